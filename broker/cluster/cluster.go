package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/journalpeer"
	"github.com/picomq/picomq/broker/membership"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/ownership"
	"github.com/picomq/picomq/broker/peer"
	"github.com/picomq/picomq/broker/repair"
	"github.com/picomq/picomq/broker/replication"
	"github.com/picomq/picomq/broker/routing"
	"github.com/picomq/picomq/broker/settings"
)

// Cluster is a clustered broker's rooms around its core: the peer port,
// its membership in the metadata log, and what runs beside the core.
type Cluster struct {
	cfg settings.Cluster
	log *slog.Logger
	reg prometheus.Registerer
	mux *peer.Mux
	// journals sends this owner's objects to its ensembles' members.
	journals *journalpeer.Client
	addrs    peer.Addresses
	dialer   peer.Dialer
	client   *peer.Client
	member   *membership.Member
	owners   *ownership.Manager
	repl     *replication.Replication
	srv      *peer.Server
	repair   *repair.Runner
	under    atomic.Int64 // objects under-replicated, as of the last count
	// dataDir is the broker's data directory (the drain's record goes
	// there). left is set once a drain removed this member from the
	// cluster's records; drained once the leader also took it out of the
	// metadata log's configuration (the voters no longer count it).
	dataDir string
	// clientTLS dials other brokers (nil: plain).
	clientTLS *tls.Config
	left      atomic.Bool
	drained   atomic.Bool
	leaving   atomic.Bool // the drain under way leaves the cluster
	// leaveMu orders a drain's last step (the removal) and a cancel: a
	// cancel that came between the step's check and the removal left the
	// member removed, not restarted, and it served nothing for good.
	leaveMu sync.Mutex
	// held is why the drain's last step waits (empty: it does not): the
	// voters that stay would have no majority answering.
	held atomic.Pointer[string]
	// restart stops the broker to start it again (SetRestart).
	restart func()

	mu sync.Mutex
	b  *core.Broker // set once open: the ownership callbacks act on it

	stop func()
	ctx  context.Context // ends with stop
	wg   sync.WaitGroup
}

// Prepare opens the peer port and takes this broker's place in the
// cluster's metadata log (bootstrap or join), before the core opens.
//
// TLS is the peer port's: peerServer serves it (nil: plain), client dials
// other brokers (nil: plain).
func Prepare(ctx context.Context, s settings.Settings, logger *slog.Logger, reg prometheus.Registerer, peerServer, client *tls.Config) (*Cluster, error) {
	c := &Cluster{cfg: s.Cluster, log: logger, reg: reg, dataDir: s.DataDir, clientTLS: client}
	_, peerPort, err := net.SplitHostPort(s.Cluster.PeerListen)
	if err != nil {
		return nil, fmt.Errorf("--peer-listen %q: %w", s.Cluster.PeerListen, err)
	}
	_, clientPort, err := net.SplitHostPort(s.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", s.Listen, err)
	}
	c.addrs = peer.Addresses{Service: s.Cluster.PeerService, PeerPort: peerPort, ClientPort: clientPort}
	var names []string
	if len(s.Cluster.Peers) > 0 {
		c.addrs.Static = map[string]peer.Static{}
		for _, p := range s.Cluster.Peers {
			c.addrs.Static[p.Name] = peer.Static{Peer: p.PeerAddr, Client: p.ClientAddr}
			names = append(names, p.Name)
		}
	}
	// With TLS, every peer connection (raft, replication, command
	// forwarding) is mutual TLS against the cluster's CA; without, the
	// peer port is plain and a NetworkPolicy must keep others off it.
	c.dialer = peer.Dialer{Addresses: c.addrs, TLS: c.clientTLS}
	c.client = peer.NewClient(c.dialer)
	if c.mux, err = peer.ListenTLS(s.Cluster.PeerListen, peerServer); err != nil {
		return nil, err
	}
	c.member, err = membership.Prepare(ctx, membership.Config{
		DataDir: s.DataDir, Node: s.NodeID, ClusterID: s.Cluster.ID,
		Addresses: c.addrs, Client: c.client, Peers: names, Logger: logger,
	})
	if err != nil {
		c.mux.Close()
		return nil, err
	}
	if c.owners, err = c.newOwnership(s, reg); err != nil {
		c.mux.Close()
		return nil, err
	}
	c.repl, err = replication.New(replication.Config{
		Self: c.member.Identity().ID(), R: s.Cluster.ReplicationFactor,
		Members: c.liveMembers, Client: c.client, Logger: logger, Metrics: reg,
	})
	if err != nil {
		c.mux.Close()
		return nil, err
	}
	return c, nil
}

// liveMembers are the members holding live member Leases, not draining:
// where new objects' copies go.
func (c *Cluster) liveMembers() []replication.Peer {
	b := c.broker()
	if b == nil {
		return nil
	}
	var out []replication.Peer
	for _, m := range c.owners.Members() {
		if m.Draining {
			continue
		}
		if rec, ok := b.Member(m.Identity); ok && rec.Removed.IsZero() {
			out = append(out, replication.Peer{ID: rec.ID, Addr: rec.PeerAddr})
		}
	}
	return out
}

// countUnderReplicated counts the objects with fewer copies on current
// members than R asks, for the metric and the node status.
func (c *Cluster) countUnderReplicated(b *core.Broker) {
	current := map[string]bool{}
	for _, m := range b.Members() {
		if m.Removed.IsZero() {
			current[m.ID] = true
		}
	}
	n := replication.UnderReplicated(b.ObjectReplicas(), func(id string) bool { return current[id] },
		replication.EffectiveR(c.cfg.ReplicationFactor, len(current)))
	c.under.Store(int64(n))
	c.repl.Metrics().UnderReplicated.Set(float64(n))
}

// newOwnership makes the slot Lease manager: the core asks it before it
// opens a partition, and it hands slots off (Release) or stops them at
// once (Revoke) through the core.
func (c *Cluster) newOwnership(s settings.Settings, reg prometheus.Registerer) (*ownership.Manager, error) {
	var rc *rest.Config
	var err error
	if s.Cluster.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", s.Cluster.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("the API server holding the slot Leases (--kubeconfig, or the pod's service account): %w", err)
	}
	client, err := kubernetes.NewForConfig(ownership.RestConfigFor(rc, s.Cluster.Slots, s.Cluster.RetryPeriod))
	if err != nil {
		return nil, err
	}
	var failsafe func(context.Context) error
	if s.Cluster.Failsafe {
		failsafe = c.failsafeRound
	}
	var m *ownership.Manager
	m, err = ownership.New(ownership.Config{
		Client: client, Namespace: s.Cluster.Namespace, Cluster: s.Cluster.Name, Node: s.NodeID,
		Identity: c.member.Identity().ID(), Slots: s.Cluster.Slots,
		// A stream's partitions share a slot, hence an owner: the core
		// keeps what applies to the whole stream (MaxBytes, producers,
		// Stream-Seq, closed) in the memory of the node writing it.
		PlaceBy: func(id uint64) uint64 {
			if b := c.broker(); b != nil {
				return b.PlacedBy(id)
			}
			return id
		},
		LeaseDuration: s.Cluster.LeaseDuration, RenewDeadline: s.Cluster.RenewDeadline, RetryPeriod: s.Cluster.RetryPeriod,
		Logger: c.log, Metrics: reg,
		// A slot taken is served once this member has what the leader
		// committed: the partitions' last owner may have committed appends
		// this member has not applied yet, and a read must not miss them.
		Acquire: func(ctx context.Context, slot int) error { return c.member.Catchup(ctx) },
		// A broker that has not heard from a metadata leader for two
		// periods cannot commit: it lets its slots go to those that can.
		InContact: func() bool {
			b := c.broker()
			return b != nil && b.Log().InContact(2*s.Cluster.RetryPeriod)
		},
		Release: func(ctx context.Context, slot int) error {
			return c.broker().Release(ctx, func(id uint64) bool { return m.SlotOf(id) == slot })
		},
		Revoke: func(slot int) {
			c.broker().Revoke(func(id uint64) bool { return m.SlotOf(id) == slot })
		},
		// Through an API server outage, the slots stay served while every
		// member confirms over the peer port that it cannot reach it
		// either (failsafe.go).
		Failsafe: failsafe,
	})
	return m, err
}

func (c *Cluster) broker() *core.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b
}

// coreConfig is how the core reaches the cluster's metadata log.
func (c *Cluster) coreConfig() *core.ClusterConfig {
	id := c.member.Identity()
	return &core.ClusterConfig{
		MemberID: id.ID(),
		Network: &metalog.Network{
			Listener: c.mux.Raft(), Dial: c.dialer.DialRaft, Advertise: c.member.Advertise(),
		},
		Forward:   c.member.Forward,
		Bootstrap: c.member.Bootstrap(),
		Number:    id.Number,
		Recover:   c.member.Recover(),
	}
}

// Configure sets the core's cluster seams in cfg.
func (c *Cluster) Configure(cfg *core.Config) {
	cfg.Cluster = c.coreConfig()
	cfg.Ownership = c.owners
	cfg.Placement = c.repl.Placement
	cfg.Fetcher = c.repl.Fetcher()
	// Appends commit on ensembles of journals (core's ensembles.go).
	// Objects go on append streams, fences and reads as HTTP requests.
	c.journals = journalpeer.NewStreamingClient(c.client, c.dialer.DialJournal)
	cfg.Peers = &journalPeers{c: c, client: c.journals}
}

// Start serves the peer API and runs the membership duties beside b.
func (c *Cluster) Start(ctx context.Context, b *core.Broker) error {
	c.srv = peer.NewServer(c.log)
	c.mu.Lock()
	c.b = b
	c.mu.Unlock()
	// Before the peer API serves: the handler sets aside copies a crash
	// left half received.
	c.srv.Handle(replication.ObjectsPath, replication.NewHandler(replication.HandlerConfig{Store: b.Objects(), Logger: c.log, Frames: b.JournalFrame, Object: b.JournalObject}))
	j := b.Journal()
	if j != nil {
		c.srv.Handle(journalpeer.Path, journalpeer.NewHandler(journalpeer.HandlerConfig{Journal: j, Logger: c.log}))
	} else {
		c.mux.Journal().Close() // no journal: streams are refused at once
	}
	c.srv.Handle("POST "+FailsafePath, http.HandlerFunc(c.serveFailsafe))
	if err := c.member.Attach(ctx, b, b.Log(), c.srv); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.ctx = cancel, ctx
	c.repair = repair.New(repair.Config{DownGrace: c.cfg.RepairDownGrace, Logger: c.log.With("component", "repair"), Metrics: c.reg}, repairCluster{c: c, b: b})
	c.wg.Add(8)
	go func() {
		defer c.wg.Done()
		if j != nil {
			journalpeer.ServeStream(c.mux.Journal(), j, c.log, 0)
		}
	}()
	go func() { defer c.wg.Done(); c.repair.Run(ctx) }()
	go func() { defer c.wg.Done(); every(ctx, reensembleEvery, func() { c.reensemble(ctx, b) }) }()
	go func() { defer c.wg.Done(); every(ctx, drainCheck, func() { c.finishDrain(ctx) }) }()
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			c.countUnderReplicated(b)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	go func() {
		defer c.wg.Done()
		if err := c.owners.Run(ctx); err != nil && ctx.Err() == nil {
			c.log.Error("the slot Lease manager stopped", "err", err)
		}
	}()
	go func() {
		defer c.wg.Done()
		if err := c.srv.Serve(c.mux.HTTP()); err != nil {
			c.log.Error("the peer API stopped", "err", err)
		}
	}()
	go func() { defer c.wg.Done(); c.member.Run(ctx) }()
	c.log.Info("cluster member running", "member", c.member.Identity().ID(), "peer", c.mux.Addr().String(), "advertise", c.member.Advertise())
	return nil
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// Close stops the cluster's rooms, after the core has closed (its last
// commands may still go to the leader through the peer port).
func (c *Cluster) Close() {
	if c.stop != nil {
		c.stop()
	}
	if c.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.srv.Shutdown(ctx)
		cancel()
	}
	c.mux.Close()
	if c.journals != nil {
		c.journals.Close()
	}
	c.wg.Wait()
}

// Router is the front of the client port: every request served here or by
// its partition's owner.
func (c *Cluster) Router(local http.Handler, maxBody int64, reg prometheus.Registerer) *routing.Router {
	b := c.broker()
	quorum := c.quorumWatch(b)
	return routing.New(routing.Config{
		Self: c.member.Identity().ID(), Local: local, Broker: b, Locate: b.Locate,
		SlotOf: c.owners.SlotOf, Owner: c.owners.Owner, Serving: c.owners.Serving,
		Address: func(member string) (string, bool) {
			m, ok := b.Member(member)
			if !ok {
				return "", false
			}
			addr, err := c.addrs.Client(m.Node)
			return addr, err == nil
		},
		Fresh: b.OpenForServing, Catchup: c.member.Catchup, MaxBodyBytes: maxBody, Logger: c.log, Metrics: reg,
		QuorumLost: quorum.QuorumLost, TLS: c.clientTLS, Settled: c.owners.Settled,
	})
}

// quorumWatch is the router's judge of a lost quorum: no contact with a
// leader and no other member renewing its Lease, seen without a break for a
// Lease duration.
func (c *Cluster) quorumWatch(b *core.Broker) *routing.QuorumWatch {
	q := &routing.QuorumWatch{
		For: c.cfg.LeaseDuration,
		Lost: func() bool {
			if b.Log().InContact(2 * c.cfg.RetryPeriod) {
				return false
			}
			for _, m := range c.owners.Members() {
				if !m.Self {
					return false // another member renews: the quorum may be there, without us
				}
			}
			return true
		},
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		q.Run(c.ctx)
	}()
	return q
}

// NodeInfo adds the cluster's view to GET /v1/admin/node.
func (c *Cluster) NodeInfo(info *wire.NodeInfo) {
	ms := c.member.Status()
	os := c.owners.Status()
	info.ClusterID, info.MemberID, info.Voters, info.NonVoters = ms.ClusterID, ms.MemberID, ms.Voters, ms.NonVoters
	held := os.SlotsHeld
	under := int(c.under.Load())
	info.SlotsHeld, info.Slots, info.UnderReplicated = &held, os.Held, &under
	if !os.FailsafeSince.IsZero() {
		info.Failsafe = &wire.Failsafe{Since: os.FailsafeSince, Rounds: os.FailsafeRounds}
	}
	if os.Draining {
		ds := c.DrainStatus()
		info.Drain = &ds
	}
}

// Leave hands this broker's work over before it stops (SIGTERM): its slots
// go to the others through the hand-off — their streams closed through the
// log, so the next owners open them at once rather than after the Leases
// run out — and its leadership of the metadata log to another voter. Each
// is bounded, so that a stop of the whole cluster does not wait on peers
// that are stopping too.
func (c *Cluster) Leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	draining := true
	if err := c.owners.SetDraining(ctx, true); err != nil {
		draining = false // the other owners never see it: they move nothing off it
		c.log.Warn("handing the slots off before stopping failed; they expire instead", "err", err)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	// What is waited for here is done by the others through the log:
	// without a leader (the whole cluster stopping) it cannot be, and
	// waiting would only delay the stop.
	hasLeader := func() bool { _, id := c.broker().Log().Leader(); return id != "" }
	waitWhile := func(ctx context.Context, cond func() bool) {
		for cond() && ctx.Err() == nil && hasLeader() {
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}
	waitWhile(ctx, func() bool { return len(c.owners.Held()) > 0 }) // the hand-offs close streams
	if n := len(c.owners.Held()); n > 0 {
		c.log.Warn("slots still held when stopping: they expire for the others to take", "slots", n)
	}
	// Another owner's partition on an ensemble of two naming this member
	// (opened while a third was away: the last broker of a rolling
	// restart) would stall until this one is back; its owner moves it
	// off this member, seen draining, within reensembleEvery. The wait
	// leaves the leadership's hand-over below time of its own.
	self := c.member.Identity().ID()
	dl, _ := ctx.Deadline() // leaveTimeout's
	wctx, wcancel := context.WithDeadline(ctx, dl.Add(-leaderHandOver))
	waitWhile(wctx, func() bool { return draining && c.broker().EnsemblesNeeding(self) > 0 })
	wcancel()
	if n := c.broker().EnsemblesNeeding(self); n > 0 {
		c.log.Warn("stopping while other owners' partitions need this member for their write quorum: their appends wait until it is back, or until their owner moves them", "partitions", n)
	}
	if l := c.broker().Log(); l.IsLeader() {
		if err := l.TransferLeadership(ctx, ""); err != nil {
			c.log.Warn("handing the metadata log's leadership over failed", "err", err)
		}
	}
}

// leaveTimeout bounds the hand-over a stopping broker makes; the last
// leaderHandOver of it is kept for the metadata log's leadership.
const (
	leaveTimeout   = 8 * time.Second
	leaderHandOver = 2 * time.Second
)

// SetRestart gives the cluster the way to stop the broker so that it
// starts again (a drain cancelled after its removal, a recovery).
func (c *Cluster) SetRestart(restart func()) { c.restart = restart }

// ServeRecover is the member's recovery endpoint (membership.RecoverPath),
// which restarts the broker.
func (c *Cluster) ServeRecover() http.Handler { return c.member.ServeRecover(c.restart) }
