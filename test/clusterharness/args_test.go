package clusterharness

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeCluster is a Cluster with addresses and proxies but no process.
func fakeCluster(t *testing.T, o Options) *Cluster {
	t.Helper()
	o = o.withDefaults()
	c := &Cluster{t: t, opts: o, links: map[[2]int]*Link{}}
	for i := 0; i < o.Brokers; i++ {
		c.brokers = append(c.brokers, &Broker{Index: i, Name: brokerName(i), DataDir: "/d/" + brokerName(i)})
	}
	if o.Cluster {
		c.api = &APIServer{dir: "/k"}
	}
	if err := c.assignAddrs(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range c.links {
			l.close()
		}
	})
	return c
}

// flagValue returns the value after --name in args.
func flagValue(args []string, name string) (string, bool) {
	i := slices.Index(args, "--"+name)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

func TestArgsSingleNodeHaveNoClusterFlag(t *testing.T) {
	t.Parallel()
	c := fakeCluster(t, Options{ExtraFlags: []string{"--long-poll-timeout", "2s"}})
	args := c.Args(0)
	for _, f := range []string{"cluster", "peers", "peer-listen", "kubeconfig", "slots", "cluster-id", "namespace", "replication-factor"} {
		if _, ok := flagValue(args, f); ok {
			t.Errorf("single-node args carry --%s: %q", f, args)
		}
	}
	if v, _ := flagValue(args, "node-id"); v != "broker-0" {
		t.Errorf("--node-id %q", v)
	}
	if v, _ := flagValue(args, "listen"); v != c.Broker(0).ClientAddr() {
		t.Errorf("--listen %q, want %q", v, c.Broker(0).ClientAddr())
	}
	if v, _ := flagValue(args, "long-poll-timeout"); v != "2s" {
		t.Errorf("extra flags not passed: %q", args)
	}
}

func TestArgsClusterPeersGoThroughTheLinks(t *testing.T) {
	t.Parallel()
	c := fakeCluster(t, Options{Brokers: 3, Cluster: true, Name: "demo", LeaseDuration: 4 * time.Second})
	for i := 0; i < 3; i++ {
		args := c.Args(i)
		want := map[string]string{
			"cluster": "demo", "namespace": "default", "node-id": brokerName(i),
			"peer-listen": c.Broker(i).PeerAddr(), "kubeconfig": "/k/" + brokerName(i) + ".kubeconfig",
			"slots": "16", "lease-duration": "4s", "lease-renew-deadline": "2s",
			"lease-retry-period": "500ms", "replication-factor": "3",
		}
		for f, v := range want {
			if got, _ := flagValue(args, f); got != v {
				t.Errorf("broker %d: --%s %q, want %q", i, f, got, v)
			}
		}
		if _, ok := flagValue(args, "cluster-id"); ok {
			t.Errorf("broker %d: --cluster-id before any id was recorded", i)
		}
		peers, _ := flagValue(args, "peers")
		entries := strings.Split(peers, ",")
		if len(entries) != 3 {
			t.Fatalf("broker %d: --peers %q", i, peers)
		}
		for j, e := range entries {
			name, addrs, _ := strings.Cut(e, "=")
			peer, cl, _ := strings.Cut(addrs, "|")
			if name != brokerName(j) {
				t.Errorf("broker %d: peer %d named %q", i, j, name)
			}
			wantPeer, wantClient := c.Broker(j).PeerAddr(), c.Broker(j).ClientAddr()
			if j != i {
				l := c.Link(i, j)
				wantPeer, wantClient = l.Peer.Addr(), l.Client.Addr()
				if l.Peer.Target() != c.Broker(j).PeerAddr() || l.Client.Target() != c.Broker(j).ClientAddr() {
					t.Errorf("link %d→%d targets %s|%s", i, j, l.Peer.Target(), l.Client.Target())
				}
			}
			if peer != wantPeer || cl != wantClient {
				t.Errorf("broker %d: peer %s at %s|%s, want %s|%s", i, name, peer, cl, wantPeer, wantClient)
			}
		}
	}
	c.recordClusterID("c-123")
	c.recordClusterID("c-other") // the first id seen stays
	if v, _ := flagValue(c.Args(0), "cluster-id"); v != "c-123" {
		t.Errorf("--cluster-id %q after the id was recorded", v)
	}
	// New addresses move every proxy.
	old := c.Link(0, 1).Peer.Addr()
	if err := c.assignAddrs(); err != nil {
		t.Fatal(err)
	}
	if c.Link(0, 1).Peer.Addr() == old {
		t.Error("assignAddrs kept the link's address")
	}
}

func TestArgsDirectLinksNamePeersAtTheirOwnAddresses(t *testing.T) {
	t.Parallel()
	c := fakeCluster(t, Options{Brokers: 3, Cluster: true, DirectLinks: true})
	for i := 0; i < 3; i++ {
		peers, _ := flagValue(c.Args(i), "peers")
		var want []string
		for j := 0; j < 3; j++ {
			want = append(want, brokerName(j)+"="+c.Broker(j).PeerAddr()+"|"+c.Broker(j).ClientAddr())
		}
		if peers != strings.Join(want, ",") {
			t.Errorf("broker %d: --peers %q, want %q", i, peers, strings.Join(want, ","))
		}
	}
	if len(c.links) != 0 {
		t.Errorf("%d link proxies with DirectLinks", len(c.links))
	}
}

func TestPartitionCutsBetweenGroupsOnly(t *testing.T) {
	t.Parallel()
	c := fakeCluster(t, Options{Brokers: 3, Cluster: true})
	c.Partition([]int{0}, []int{1, 2})
	for _, l := range [][2]int{{0, 1}, {1, 0}, {0, 2}, {2, 0}} {
		if m := c.Link(l[0], l[1]).Peer.Mode(); m != Cut {
			t.Errorf("link %v: %v", l, m)
		}
	}
	for _, l := range [][2]int{{1, 2}, {2, 1}} {
		if m := c.Link(l[0], l[1]).Peer.Mode(); m != Pass {
			t.Errorf("link %v: %v", l, m)
		}
	}
}

func TestNodeInfoDecodesWhatClusterModeAdds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		voters, slots string
		names         []string
		count         int
		ok            bool
	}{
		{`["broker-0","broker-1"]`, `5`, []string{"broker-0", "broker-1"}, 5, true},
		{`[{"id":"broker-0","suffrage":"Voter"}]`, `[1,2,3]`, []string{"broker-0"}, 3, true},
		{`null`, `null`, nil, 0, false},
	} {
		n := NodeInfo{VotersRaw: []byte(tc.voters), SlotsRaw: []byte(tc.slots)}
		if got := n.Voters(); !slices.Equal(got, tc.names) {
			t.Errorf("voters %s: %q", tc.voters, got)
		}
		if count, _, ok := n.Slots(); count != tc.count || ok != tc.ok {
			t.Errorf("slots %s: %d %v", tc.slots, count, ok)
		}
	}
}

// TestQuietPortsAreClaimedAcrossProcesses: a port freeAddr hands out is
// locked in the claims folder, so another harness process (another open
// file description: flock's unit) cannot take it.
func TestQuietPortsAreClaimedAcrossProcesses(t *testing.T) {
	if lo, _ := ephemeralRange(); lo <= quietPortsFrom+1000 {
		t.Skipf("the ephemeral range starts at %d: no quiet ports below it to claim", lo)
	}
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	f, err := os.Open(filepath.Join(portClaims, port))
	if err != nil {
		t.Fatalf("no claim for the port handed out (%s): %v", addr, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("another process could lock the claim of %s: %v", addr, err)
	}
	n, _ := strconv.Atoi(port)
	if claimPort(n) {
		t.Fatalf("a second claim of %s in this process succeeded", addr)
	}
}
