package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/peer"
	"github.com/picomq/picomq/internal/testwait"
)

// testMember is one in-process broker of a test cluster: its core and its
// membership over a real peer port on loopback.
type testMember struct {
	name string
	dir  string
	mux  *peer.Mux
	m    *Member
	b    *core.Broker
	srv  *peer.Server
	stop context.CancelFunc
	done chan struct{}
}

// testCluster is brokers b-0.. on loopback, found through a static table.
type testCluster struct {
	t     *testing.T
	addrs peer.Addresses
	ports map[string]string
	dirs  map[string]string

	mu    sync.Mutex // guards nodes: brokers start concurrently
	nodes map[string]*testMember
}

func newTestCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t, addrs: peer.Addresses{Static: map[string]peer.Static{}}, ports: map[string]string{}, dirs: map[string]string{}, nodes: map[string]*testMember{}}
	for i := range n {
		name := fmt.Sprintf("b-%d", i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		c.ports[name] = addr
		c.addrs.Static[name] = peer.Static{Peer: addr, Client: "127.0.0.1:1"}
		c.dirs[name] = filepath.Join(t.TempDir(), "data")
	}
	t.Cleanup(func() {
		for _, m := range c.nodes {
			m.close()
		}
	})
	return c
}

func (c *testCluster) names() []string {
	var out []string
	for n := range c.ports {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// start runs broker name; it returns Prepare's error when that refuses.
func (c *testCluster) start(name string) (*testMember, error) {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mux, err := peer.Listen(c.ports[name])
	if err != nil {
		t.Fatal(err)
	}
	d := peer.Dialer{Addresses: c.addrs}
	m, err := Prepare(ctx, Config{DataDir: c.dirs[name], Node: name, Addresses: c.addrs, Client: peer.NewClient(d), Peers: c.names(), Interval: 100 * time.Millisecond})
	if err != nil {
		mux.Close()
		return nil, err
	}
	b, err := core.Open(core.Config{DataDir: c.dirs[name], NodeID: name, MaintenanceInterval: time.Hour, Cluster: &core.ClusterConfig{
		MemberID: m.Identity().ID(), Bootstrap: m.Bootstrap(), Number: m.Identity().Number, Forward: m.Forward,
		Network:          &metalog.Network{Listener: mux.Raft(), Dial: d.DialRaft, Advertise: m.Advertise()},
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
	}})
	if err != nil {
		mux.Close()
		t.Fatal(err)
	}
	tm := &testMember{name: name, dir: c.dirs[name], mux: mux, m: m, b: b, srv: peer.NewServer(m.log), done: make(chan struct{})}
	if err := m.Attach(ctx, b, b.Log(), tm.srv); err != nil {
		t.Fatal(err)
	}
	go func() { _ = tm.srv.Serve(mux.HTTP()) }()
	rctx, rcancel := context.WithCancel(context.Background())
	tm.stop = rcancel
	go func() { defer close(tm.done); m.Run(rctx) }()
	c.mu.Lock()
	c.nodes[name] = tm
	c.mu.Unlock()
	return tm, nil
}

func (tm *testMember) close() {
	if tm.stop == nil {
		return
	}
	tm.stop()
	<-tm.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = tm.srv.Shutdown(ctx)
	cancel()
	_ = tm.b.Close()
	tm.mux.Close()
	tm.stop = nil
}

func (c *testCluster) kill(name string) {
	c.nodes[name].close()
	delete(c.nodes, name)
}

// leader is the member leading now, or nil.
func (c *testCluster) leader() *testMember {
	for _, m := range c.nodes {
		if m.b.Log().IsLeader() {
			return m
		}
	}
	return nil
}

// voters are the leader's configuration's voters, sorted.
func (c *testCluster) voters() []string {
	l := c.leader()
	if l == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conf, err := l.b.Log().Configuration(ctx)
	if err != nil {
		return nil
	}
	v := conf.Voters()
	slices.Sort(v)
	return v
}

// TestMembershipOfThreeBrokers: three brokers form one log — b-0
// bootstraps, the others join and are promoted; any broker creates a
// stream the others see; a broker whose directory was wiped joins as a new
// member and its old incarnation is taken out; a member the cluster removed
// is refused when it comes back with its old directory.
func TestMembershipOfThreeBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster tier: three brokers on loopback, skipped under -short")
	}
	c := newTestCluster(t, 3)
	started := make(chan error, 3)
	for _, name := range c.names() {
		go func() {
			_, err := c.start(name)
			started <- err
		}()
	}
	for range 3 {
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		var out []string
		for _, n := range c.names() {
			if m, ok := c.nodes[n]; ok {
				out = append(out, m.m.Identity().ID())
			}
		}
		slices.Sort(out)
		return out
	}
	testwait.Until(t, 30*time.Second, "three voters", func() bool { return slices.Equal(c.voters(), ids()) })
	numbers := map[int]bool{}
	for _, m := range c.nodes {
		id := m.m.Identity()
		if id.Number == 0 || numbers[id.Number] || id.Cluster == "" {
			t.Fatalf("identity %+v: want a number of its own and the cluster", id)
		}
		numbers[id.Number] = true
	}
	if id := c.nodes["b-0"].m.Identity(); id.Number != 1 {
		t.Fatalf("the bootstrapping member got number %d, want 1", id.Number)
	}

	// A follower creates; every member sees it.
	var follower *testMember
	for _, m := range c.nodes {
		if !m.b.Log().IsLeader() {
			follower = m
		}
	}
	ctx := context.Background()
	if _, _, err := follower.b.Create(ctx, "s", node.CreateOptions{}); err != nil {
		t.Fatalf("create through a follower: %v", err)
	}
	if _, err := follower.b.Get("s"); err != nil {
		t.Fatalf("the stream is not in the state of the follower that created it when Create returned: %v", err)
	}
	for _, m := range c.nodes {
		testwait.Until(t, 10*time.Second, m.name+" sees the stream", func() bool { _, err := m.b.Get("s"); return err == nil })
	}

	// The read index: only the leader answers it (a follower names the
	// leader, and leaderReadIndex follows); after a leadership transfer,
	// every member's Catchup returns only with what was committed before.
	leader := c.leader()
	if err := follower.m.get(ctx, follower.m.cfg.Addresses.Advertise(follower.name), readIndexPath, new(readIndex)); !errors.Is(err, errNotLeader) {
		t.Fatalf("a follower's read index: %v; want NOT_METADATA_LEADER", err)
	}
	ri, err := leader.m.leaderReadIndex(ctx, follower.m.Identity().ID())
	if err != nil || ri < follower.b.Status().AppliedIndex {
		t.Fatalf("the read index asked through a follower: %d, %v; want the leader's, at least the follower's %d", ri, err, follower.b.Status().AppliedIndex)
	}
	if err := leader.b.Log().TransferLeadership(ctx, follower.m.Identity().ID()); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("after-%d", i)
		if _, _, err := leader.b.Create(ctx, name, node.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		for _, m := range c.nodes {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := m.m.Catchup(cctx)
			cancel()
			if err != nil {
				t.Fatalf("%s: Catchup: %v", m.name, err)
			}
			if _, err := m.b.Get(name); err != nil {
				t.Fatalf("%s has caught up but lacks %s, created before: %v", m.name, name, err)
			}
		}
	}

	// b-2's directory is wiped: it joins as a new member, the old one goes.
	old := c.nodes["b-2"].m.Identity().ID()
	c.kill("b-2")
	if err := os.RemoveAll(c.dirs["b-2"]); err != nil {
		t.Fatal(err)
	}
	fresh, err := c.start("b-2")
	if err != nil {
		t.Fatal(err)
	}
	if fresh.m.Identity().ID() == old {
		t.Fatal("a wiped broker came back under its old member id")
	}
	testwait.Until(t, 30*time.Second, "the new incarnation voting and the old one gone", func() bool {
		v := c.voters()
		return slices.Contains(v, fresh.m.Identity().ID()) && !slices.Contains(v, old) && len(v) == 3
	})
	testwait.Until(t, 10*time.Second, "the old incarnation recorded as removed", func() bool {
		mem, ok := c.leader().b.Member(old)
		return ok && !mem.Removed.IsZero()
	})

	// The old incarnation's directory coming back is refused: keep a copy
	// of the new one's, put a removed member's identity in it.
	c.kill("b-2")
	id, _, err := loadIdentity(c.dirs["b-2"], "b-2")
	if err != nil {
		t.Fatal(err)
	}
	id.Incarnation = old[len("b-2~"):]
	if err := id.save(c.dirs["b-2"]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.start("b-2"); !errors.Is(err, node.MemberRemoved) {
		t.Fatalf("a removed member coming back: %v, want MEMBER_REMOVED", err)
	}
}
