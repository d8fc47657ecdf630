package clusterharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options configure Start. Zero values take the defaults noted.
type Options struct {
	// Brokers is how many broker processes run (default 1). Without
	// Cluster they are independent single-node brokers.
	Brokers int
	// Standby is how many of them (the highest ordinals) Start prepares —
	// addresses, peers lists, link proxies — but does not launch: a
	// scale-up launches them later (StartBroker or Launch), and they join
	// as new members.
	Standby int
	// Cluster runs the brokers as one cluster: the cluster flags, a
	// --peers list through the link proxies, envtest's apiserver for the
	// Leases. Without it no cluster flag is passed, so everything the
	// broker supports today runs.
	Cluster bool
	// DirectLinks names every peer at its own addresses in --peers, with
	// no link proxy: no broker-to-broker byte passes through this process,
	// as a benchmark wants. Link, Partition and Isolate are unavailable
	// then; the apiserver's proxies stay.
	DirectLinks bool

	Name      string // cluster name (default "picomq"): Leases are <Name>-slot-<n>
	Namespace string // namespace of the Leases (default "default")
	Slots     int    // default 16

	// Lease timing (defaults 3s, 2s, 500ms: short, for trials).
	LeaseDuration      time.Duration
	LeaseRenewDeadline time.Duration
	LeaseRetryPeriod   time.Duration

	ReplicationFactor int // default min(3, Brokers)

	// ExtraFlags are appended to every broker's command line; Env to its
	// environment (PICOMQ_* variables).
	ExtraFlags []string
	Env        []string

	// Security, when set, runs the brokers with TLS and tokens.
	Security *Security

	LogLevel     string        // --log-level (default warn)
	ReadyTimeout time.Duration // how long Start and WaitReady wait (default 60s)
	StopTimeout  time.Duration // how long a SIGTERM is given before SIGKILL (default 20s)
}

func (o Options) withDefaults() Options {
	if o.Brokers <= 0 {
		o.Brokers = 1
	}
	if o.Name == "" {
		o.Name = "picomq"
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Slots <= 0 {
		o.Slots = 16
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 3 * time.Second
	}
	if o.LeaseRenewDeadline <= 0 {
		o.LeaseRenewDeadline = 2 * time.Second
	}
	if o.LeaseRetryPeriod <= 0 {
		o.LeaseRetryPeriod = 500 * time.Millisecond
	}
	if o.ReplicationFactor <= 0 {
		o.ReplicationFactor = min(3, o.Brokers)
	}
	if o.LogLevel == "" {
		o.LogLevel = os.Getenv(LogLevelEnv)
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 20 * time.Second
	}
	return o
}

// Link is the link from one broker to another: a proxy for the peer port
// and one for the client port, the two addresses the source's --peers
// names for the destination. Its operations apply to both, in this
// direction only: Link(a, b).Cut() leaves the connections b opens to a.
type Link struct {
	From, To int
	Peer     *Proxy
	Client   *Proxy
}

func (l *Link) Cut()                     { l.Peer.Cut(); l.Client.Cut() }
func (l *Link) Blackhole()               { l.Peer.Blackhole(); l.Client.Blackhole() }
func (l *Link) Delay(d time.Duration)    { l.Peer.Delay(d); l.Client.Delay(d) }
func (l *Link) Heal()                    { l.Peer.Heal(); l.Client.Heal() }
func (l *Link) close()                   { l.Peer.Close(); l.Client.Close() }
func (l *Link) retarget(peer, cl string) { l.Peer.SetTarget(peer); l.Client.SetTarget(cl) }

// Cluster is N broker processes on 127.0.0.1 and, in cluster mode, the
// apiserver and a proxy on every link.
type Cluster struct {
	t    testing.TB
	opts Options
	bin  string
	api  *APIServer // nil without Cluster

	brokers []*Broker

	mu        sync.Mutex
	links     map[[2]int]*Link // [from, to]
	clusterID string           // recorded once seen, passed on every later start

	sec *security // nil: plain HTTP, no tokens
}

// Start builds the broker (once per test binary), starts the apiserver in
// cluster mode, then every broker, and waits until the cluster is ready
// (WaitReady). Everything is killed at t's cleanup, and every broker's log
// tail is printed when t failed. In cluster mode it skips t when the
// broker has no cluster mode (ClusterUnsupported).
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	c, err := TryStart(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TryStart is Start returning the cluster's failure to start instead of
// failing t (a probe decides what a failure means); its processes are
// still ended at t's cleanup.
func TryStart(t testing.TB, o Options) (*Cluster, error) {
	t.Helper()
	o = o.withDefaults()
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if o.Cluster {
		ok, err := SupportsCluster()
		if err != nil {
			return nil, err
		}
		if !ok {
			t.Skip(ClusterUnsupported)
		}
	}
	c := &Cluster{t: t, opts: o, bin: bin, links: map[[2]int]*Link{}}
	root := t.TempDir()
	for i := 0; i < o.Brokers; i++ {
		dir := filepath.Join(root, brokerName(i))
		c.brokers = append(c.brokers, &Broker{Index: i, Name: brokerName(i),
			DataDir: filepath.Join(dir, "data"), LogPath: filepath.Join(dir, "broker.log")})
	}
	// Registered after TempDir, so it runs before the directories go: the
	// log tails are still there to print.
	t.Cleanup(c.cleanup)
	if o.Cluster {
		c.api = StartAPIServer(t, o.Brokers)
	}
	if err := c.assignAddrs(); err != nil {
		return c, err
	}
	if err := c.setupSecurity(root); err != nil {
		return c, err
	}
	c.registerAddrs()
	if o.Standby < 0 || o.Standby >= o.Brokers {
		return c, fmt.Errorf("clusterharness: Standby %d of %d brokers: at least one must start", o.Standby, o.Brokers)
	}
	for i := range o.Brokers - o.Standby {
		if err := c.launch(i); err != nil {
			return c, err
		}
	}
	if err := c.WaitReady(); err != nil {
		return c, fmt.Errorf("cluster not ready: %v\n%s", err, c.LogTails(4096))
	}
	return c, nil
}

// cleanup kills every process and closes every proxy.
func (c *Cluster) cleanup() {
	var wg sync.WaitGroup
	for _, b := range c.brokers {
		wg.Add(1)
		go func() { defer wg.Done(); b.kill() }()
	}
	wg.Wait()
	c.mu.Lock()
	for _, l := range c.links {
		l.close()
	}
	c.mu.Unlock()
	if c.t.Failed() {
		c.t.Logf("broker logs (tails):\n%s", c.LogTails(4096))
	}
	if c.t.Failed() || os.Getenv(KeepAllLogsEnv) != "" {
		c.keepLogs()
	}
}

// LogLevelEnv sets the brokers' --log-level when Options leave it
// (debug shows the metadata log's own logs).
const LogLevelEnv = "PICOMQ_CLUSTER_LOG_LEVEL"

// KeepLogsEnv names a folder where a failed test's broker logs are copied
// whole (they go with the test's temporary directory otherwise).
const KeepLogsEnv = "PICOMQ_CLUSTER_LOGS"

// KeepAllLogsEnv, set (=1), keeps every test's broker logs, passed or
// failed: a fault seen once is diagnosed from the runs that passed too.
// They go to KeepLogsEnv's folder, or picomq-cluster-logs under the
// system's temporary directory.
const KeepAllLogsEnv = "PICOMQ_CLUSTER_LOGS_ALL"

func (c *Cluster) keepLogs() {
	dir := os.Getenv(KeepLogsEnv)
	if dir == "" && os.Getenv(KeepAllLogsEnv) != "" {
		dir = filepath.Join(os.TempDir(), "picomq-cluster-logs")
	}
	if dir == "" {
		return
	}
	dst := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(c.t.Name()))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		c.t.Logf("keeping the logs: %v", err)
		return
	}
	for _, b := range c.brokers {
		if raw, err := os.ReadFile(b.LogPath); err == nil {
			_ = os.WriteFile(filepath.Join(dst, b.Name+".log"), raw, 0o644)
		}
	}
	c.t.Logf("broker logs kept in %s", dst)
}

// assignAddrs gives every broker new client and peer addresses and puts a
// new proxy on every link: at the start, and for RestartAll. The modes of
// the old proxies are not kept: a restart on new addresses starts healed.
func (c *Cluster) assignAddrs() error {
	for _, b := range c.brokers {
		cl, err := freeAddr()
		if err != nil {
			return err
		}
		peer, err := freeAddr()
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.clientAddr, b.peerAddr = cl, peer
		b.mu.Unlock()
	}
	if !c.opts.Cluster || c.opts.DirectLinks {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.links {
		l.close()
	}
	c.links = map[[2]int]*Link{}
	for _, from := range c.brokers {
		for _, to := range c.brokers {
			if from == to {
				continue
			}
			name := fmt.Sprintf("%s→%s", from.Name, to.Name)
			peer, err := NewProxy(name+" peer", to.PeerAddr())
			if err != nil {
				return err
			}
			cl, err := NewProxy(name+" client", to.ClientAddr())
			if err != nil {
				peer.Close()
				return err
			}
			c.links[[2]int{from.Index, to.Index}] = &Link{From: from.Index, To: to.Index, Peer: peer, Client: cl}
		}
	}
	return nil
}

// Args returns broker i's command line as the harness would start it now.
func (c *Cluster) Args(i int) []string {
	b := c.brokers[i]
	args := []string{"--data-dir", b.DataDir, "--listen", b.ClientAddr(), "--node-id", b.Name, "--log-level", c.opts.LogLevel}
	if c.opts.Cluster {
		o := c.opts
		args = append(args,
			"--cluster", o.Name,
			"--namespace", o.Namespace,
			"--peer-listen", b.PeerAddr(),
			"--peers", c.peers(i),
			"--kubeconfig", c.api.Kubeconfig(i),
			"--slots", strconv.Itoa(o.Slots),
			"--lease-duration", o.LeaseDuration.String(),
			"--lease-renew-deadline", o.LeaseRenewDeadline.String(),
			"--lease-retry-period", o.LeaseRetryPeriod.String(),
			"--replication-factor", strconv.Itoa(o.ReplicationFactor),
		)
		if id := c.ClusterID(); id != "" {
			// The cluster exists: a broker with an empty directory (a
			// wiped one, broker-0 included) joins, never bootstraps.
			args = append(args, "--cluster-id", id)
		}
	}
	args = append(args, c.securityArgs(b)...)
	return append(args, c.opts.ExtraFlags...)
}

// peers is broker i's --peers: every broker as name=peer|client, itself
// at its own addresses and the others through i's links to them (at
// their own addresses too with DirectLinks).
func (c *Cluster) peers(i int) string {
	var parts []string
	for _, b := range c.brokers {
		if b.Index == i || c.opts.DirectLinks {
			parts = append(parts, fmt.Sprintf("%s=%s|%s", b.Name, b.PeerAddr(), b.ClientAddr()))
			continue
		}
		l := c.Link(i, b.Index)
		parts = append(parts, fmt.Sprintf("%s=%s|%s", b.Name, l.Peer.Addr(), l.Client.Addr()))
	}
	return strings.Join(parts, ",")
}

func (c *Cluster) launch(i int) error {
	return c.brokers[i].launch(c.bin, c.Args(i), c.opts.Env)
}

// Options returns the options the cluster runs with, defaults filled in.
func (c *Cluster) Options() Options { return c.opts }

// N is the number of brokers.
func (c *Cluster) N() int { return len(c.brokers) }

// Broker returns broker i.
func (c *Cluster) Broker(i int) *Broker { return c.brokers[i] }

// URL is broker i's client URL, direct.
func (c *Cluster) URL(i int) string { return c.brokers[i].URL() }

// URLs are every broker's client URL, direct, by index.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		out[i] = b.URL()
	}
	return out
}

// Link is the link from broker from to broker to (cluster mode only).
func (c *Cluster) Link(from, to int) *Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.links[[2]int{from, to}]
	if l == nil {
		panic(fmt.Sprintf("clusterharness: no link %d→%d (cluster mode without DirectLinks only)", from, to))
	}
	return l
}

// APIServer is the apiserver (nil without Cluster).
func (c *Cluster) APIServer() *APIServer { return c.api }

// APIServerLink is broker i's link to the apiserver (cluster mode only).
func (c *Cluster) APIServerLink(i int) *Proxy { return c.api.Link(i) }

// Partition cuts every link, both directions, between brokers of
// different groups; a broker named in no group is left alone.
func (c *Cluster) Partition(groups ...[]int) {
	group := map[int]int{}
	for g, members := range groups {
		for _, i := range members {
			group[i] = g
		}
	}
	for a, ga := range group {
		for b, gb := range group {
			if ga != gb {
				c.Link(a, b).Cut()
			}
		}
	}
}

// Isolate cuts broker i from every peer, both directions (not from the
// apiserver).
func (c *Cluster) Isolate(i int) {
	for j := range c.brokers {
		if j != i {
			c.Link(i, j).Cut()
			c.Link(j, i).Cut()
		}
	}
}

// HealAll heals every link, the apiserver's included.
func (c *Cluster) HealAll() {
	c.mu.Lock()
	for _, l := range c.links {
		l.Heal()
	}
	c.mu.Unlock()
	if c.api != nil {
		for i := range c.brokers {
			c.api.Link(i).Heal()
		}
	}
}

// Kill SIGKILLs broker i and waits for it to end.
func (c *Cluster) Kill(i int) { c.brokers[i].kill() }

// Stop SIGSTOPs broker i and waits until every thread of it has stopped
// (the signal is delivered asynchronously): it holds its sockets and
// answers nothing.
func (c *Cluster) Stop(i int) {
	b := c.brokers[i]
	if err := b.signal(syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	if err := Poll(context.Background(), 5*time.Second, b.Name+" stopped", func(context.Context) error {
		return stoppedAll(b.Pid())
	}); err != nil {
		c.t.Fatal(err)
	}
}

// Cont SIGCONTs a stopped broker i.
func (c *Cluster) Cont(i int) {
	if err := c.brokers[i].signal(syscall.SIGCONT); err != nil {
		c.t.Fatal(err)
	}
}

// StartBroker starts broker i again (after Kill) on its data directory and
// addresses, and waits until it answers /readyz.
func (c *Cluster) StartBroker(i int) {
	c.t.Helper()
	if err := c.launch(i); err != nil {
		c.t.Fatal(err)
	}
	if err := c.waitBrokerReady(i); err != nil {
		c.t.Fatalf("%v\n%s", err, c.brokers[i].logTail(4096))
	}
}

// Launch starts broker i again (after Kill) on its data directory and
// addresses without waiting for it to be ready: for a broker expected to
// refuse to serve.
func (c *Cluster) Launch(i int) {
	c.t.Helper()
	if err := c.launch(i); err != nil {
		c.t.Fatal(err)
	}
}

// Restart stops broker i with SIGTERM (SIGKILL after StopTimeout) and
// starts it again on the same data directory and addresses.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.brokers[i].terminate(c.opts.StopTimeout); err != nil {
		c.t.Errorf("restart: %v", err)
	}
	c.StartBroker(i)
}

// Wipe kills broker i, deletes its data directory and starts it again:
// with its old name but no data, it must join as a new member.
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	c.Kill(i)
	if err := os.RemoveAll(c.brokers[i].DataDir); err != nil {
		c.t.Fatal(err)
	}
	c.StartBroker(i)
}

// StopAll stops every broker with SIGTERM (SIGKILL after StopTimeout).
func (c *Cluster) StopAll() {
	var wg sync.WaitGroup
	for _, b := range c.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.terminate(c.opts.StopTimeout); err != nil {
				c.t.Errorf("stop all: %v", err)
			}
		}()
	}
	wg.Wait()
}

// RestartAll stops every broker, moves every address — each broker's
// client and peer ports, every link proxy, every apiserver proxy, so each
// broker's --peers changes while its data stays — and starts them all,
// then waits until the cluster is ready. Links start healed.
func (c *Cluster) RestartAll() {
	c.t.Helper()
	c.StopAll()
	if err := c.assignAddrs(); err != nil {
		c.t.Fatal(err)
	}
	if c.api != nil {
		if err := c.api.rebind(); err != nil {
			c.t.Fatal(err)
		}
	}
	for i := range c.brokers {
		if err := c.launch(i); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.WaitReady(); err != nil {
		c.t.Fatalf("after RestartAll: %v\n%s", err, c.LogTails(4096))
	}
}

// Node returns broker i's GET /v1/admin/node.
func (c *Cluster) Node(i int) (NodeInfo, error) {
	return GetNode(context.Background(), c.URL(i))
}

// ClusterID is the cluster id the brokers reported, "" until one did.
func (c *Cluster) ClusterID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusterID
}

func (c *Cluster) recordClusterID(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	if c.clusterID == "" {
		c.clusterID = id
	}
	c.mu.Unlock()
}

// Leader returns the index of the broker that says it is the metadata
// leader, among those serving; -1 when none does.
func (c *Cluster) Leader() int {
	for i, b := range c.brokers {
		if !b.Serving() {
			continue
		}
		if n, err := c.Node(i); err == nil && n.IsLeader() {
			return i
		}
	}
	return -1
}

// Index returns the index of the broker named name (broker-<i>), -1 if
// none. A member identity, name~incarnation, names its broker too.
func (c *Cluster) Index(name string) int {
	name, _, _ = strings.Cut(name, "~")
	for i, b := range c.brokers {
		if b.Name == name {
			return i
		}
	}
	return -1
}

// LogTails returns the last n bytes of every broker's log.
func (c *Cluster) LogTails(n int) string {
	var sb strings.Builder
	for _, b := range c.brokers {
		fmt.Fprintf(&sb, "--- %s (%s):\n%s\n", b.Name, b.LogPath, b.logTail(n))
	}
	return sb.String()
}
