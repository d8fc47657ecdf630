package metalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/picomq/picomq/broker/diskio"
)

// Defaults applied by Open to the zero fields of Config. See Config for why.
const (
	DefaultSnapshotThreshold = 8192
	DefaultSnapshotInterval  = 2 * time.Minute
	DefaultTrailingLogs      = 10240
	DefaultHeartbeatTimeout  = 500 * time.Millisecond
	DefaultElectionTimeout   = 500 * time.Millisecond
	DefaultMaxAppendEntries  = 256
	DefaultSegmentBytes      = 16 << 20
	DefaultOpenTimeout       = 30 * time.Second
	DefaultLogLevel          = "warn"
)

const (
	// walDir holds the log: hashicorp/raft-wal segment files, preallocated
	// and appended to with one fsync per batch of entries, and wal-meta.db, a
	// small bbolt file that is both raft's StableStore (term, vote) and the
	// WAL's segment index. raft-boltdb's raft.db cost two fdatasyncs per
	// batch (bbolt writes its pages, then its meta page); the WAL costs one,
	// which halves the metadata commit on the append path.
	walDir = "wal"

	// lockFile is locked (flock) while a Log has the directory open.
	lockFile = "LOCK"

	// snapshotRetain is how many snapshots FileSnapshotStore keeps: the
	// newest, and the one before it in case the newest turns out unreadable.
	snapshotRetain = 2

	// logCacheSize is how many recent entries raft.LogCache keeps in memory
	// in front of the WAL, so that replicating to a follower that is slightly
	// behind (a later, multi-node concern) does not read the disk. It is the
	// size Consul and Nomad use.
	logCacheSize = 512

	// tcpMaxPool and tcpTimeout are the NetworkTransport's connection pool
	// size per peer and its I/O deadline, the values hashicorp's own servers
	// use.
	tcpMaxPool = 3
	tcpTimeout = 10 * time.Second
)

// ErrNotLeader is returned (wrapped) by Apply, Barrier and the membership
// calls when this node is not the leader, or is handing leadership over. The
// command was NOT appended to the log, so proposing it again to the leader
// (see Log.Leader) is safe.
var ErrNotLeader = errors.New("metalog: not the leader")

// ErrClosed is returned (wrapped) by every call on a Log that is closed or
// closing. A command whose Apply returns ErrClosed may or may not have been
// applied: it depends on whether it was committed before the shutdown.
var ErrClosed = errors.New("metalog: closed")

// Config configures Open. Dir and NodeID are required. For every other
// field, zero means its default (the Default* constants); a negative
// duration or size is refused, and so is a value out of the range raft
// accepts (HeartbeatTimeout, ElectionTimeout and SnapshotInterval below 5ms,
// ElectionTimeout below HeartbeatTimeout, MaxAppendEntries above 1024,
// SegmentBytes below 1 MiB): Open names the field and the value instead of
// adjusting it.
type Config struct {
	// Dir is the folder holding wal/ and snapshots/. It is created if
	// missing. One Log at a time may use it: Open locks Dir/LOCK.
	Dir string

	// NodeID is this server's raft ID, unique in the cluster for all time
	// (in Kubernetes: the pod name of the StatefulSet ordinal).
	NodeID string

	// BindAddr is the TCP address the raft transport listens on
	// ("0.0.0.0:7001"). Empty selects an in-memory transport: a single node
	// talks to nobody, so it needs no listener. The address a node is known
	// by is recorded in the replicated configuration, so moving a node from
	// in-memory to TCP later is a membership change (AddVoter with the same
	// ID and the new address), to be done by the cluster code.
	BindAddr string

	// Advertise is the host:port other nodes dial to reach this one. Empty
	// means BindAddr, which then must not be an unspecified address
	// (0.0.0.0 or ::). raft.NewTCPTransport needs an IP here: a host name is
	// resolved once, at Open.
	Advertise string

	// Bootstrap seeds a brand-new Dir (no log, no term, no snapshot) with a
	// configuration holding exactly one voter, this node. It is ignored when
	// Dir has state, so it is safe to set on every start of the first node.
	// Leave it unset on nodes that will be added to an existing cluster.
	Bootstrap bool

	// SnapshotThreshold is how many entries past the last snapshot make raft
	// take a new one (checked every SnapshotInterval); TrailingLogs is how
	// many entries stay in the WAL behind a snapshot so a lagging follower
	// catches up from the log rather than from a whole snapshot.
	// Defaults are raft's own (8192, 2m, 10240): metadata commands are a few
	// hundred bytes, so the WAL stays a few MB, and a restart replays at
	// most ~18k small entries, a matter of milliseconds.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// HeartbeatTimeout and ElectionTimeout are how long a follower (or a
	// candidate) goes without a leader before it starts an election;
	// ElectionTimeout must not be below HeartbeatTimeout (raft's rule), so
	// a HeartbeatTimeout above the 500ms default needs an ElectionTimeout
	// set too. On a
	// one-voter cluster they only decide how long Open waits before the node
	// elects itself (between 1x and 2x HeartbeatTimeout, raft randomises it)
	// — once leader, a lone node never loses leadership. The 500ms default
	// halves raft's 1s so a single broker starts quickly, while leaving a
	// multi-node cluster on a LAN well clear of spurious elections (the
	// leader heartbeats every HeartbeatTimeout/10 = 50ms).
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration

	// MaxAppendEntries is the most proposals the leader writes to the WAL in
	// one write and one fsync (group commit), the capacity of raft's apply queue, and
	// the most entries sent to a follower in one RPC. Default 256 (raft's is
	// 64; the maximum is 1024): metadata entries are small, so a larger batch
	// costs little and lets more concurrent proposers share one fsync.
	MaxAppendEntries int

	// SegmentBytes is the size of one WAL segment file, written out in
	// zeros before the WAL rotates to it (default 16 MiB; see zeroedFS). A
	// few old segments stay behind a snapshot (TrailingLogs) and the next
	// one waits as a spare, so the log's disk use is a small multiple of it.
	SegmentBytes int

	// OpenTimeout bounds how long Open waits for this node to become leader
	// and apply the log it has on disk, when it is the only voter. Default
	// 30s.
	OpenTimeout time.Duration

	// Logger receives raft's, the transport's and the snapshot store's logs.
	// When nil, a logger writing to LogOutput (default os.Stderr) at LogLevel
	// (default "warn") is made. Note that raft logs each election at warn,
	// so a node logs one "starting election" line when it starts.
	Logger    hclog.Logger
	LogOutput io.Writer
	LogLevel  string

	// Network, when set, is the peer network of a clustered node (see
	// Network); BindAddr must then be empty.
	Network *Network

	// Recover, when set, replaces the configuration in Dir with these
	// servers before the node starts: the explicit recovery of a cluster
	// that lost its quorum for good (raft.RecoverCluster). Every surviving
	// node must be recovered with the same servers, none of them running.
	// Never automatic: entries the lost majority committed and these nodes
	// lack are gone.
	Recover []Server

	// Forward, when set, sends a follower's commands to the leader (see
	// Forwarder): Apply and Propose then work on every member. Without it
	// they fail with ErrNotLeader on a follower.
	Forward Forwarder

	// SyncFailed, when set, is told when an fsync of the log's segments
	// failed: the broker then stops acknowledging (STORAGE_FAILED), since
	// a retried fsync could report success for pages the kernel dropped.
	SyncFailed func(path string, err error)

	// FS is the storage seam: when it injects faults (diskio.Faulty, in
	// tests), the log's segment writes and syncs meet them.
	FS diskio.FS

	// wrapLogStore, set only by tests, wraps the log store raft writes to
	// (to count StoreLogs calls, i.e. WAL fsyncs). Being a field of the
	// Config of the Log under test, not a package variable, it lets tests
	// run in parallel.
	wrapLogStore func(raft.LogStore) raft.LogStore
}

// minTimeout is the shortest HeartbeatTimeout, ElectionTimeout and
// SnapshotInterval raft accepts (raft.ValidateConfig).
const minTimeout = 5 * time.Millisecond

// maxAppendEntries is the largest MaxAppendEntries raft accepts.
const maxAppendEntries = 1024

// withDefaults returns cfg with its zero fields set, or an error naming the
// first field that cannot work: a required one missing, a negative one, or
// one out of the range raft accepts. Nothing is adjusted silently.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Dir == "" {
		return cfg, errors.New("metalog: Config.Dir is required")
	}
	if cfg.NodeID == "" {
		return cfg, errors.New("metalog: Config.NodeID is required")
	}
	if cfg.BindAddr == "" && cfg.Advertise != "" {
		return cfg, errors.New("metalog: Config.Advertise is set without Config.BindAddr")
	}
	if cfg.Network != nil {
		if cfg.BindAddr != "" {
			return cfg, errors.New("metalog: Config.Network and Config.BindAddr are both set")
		}
		if err := cfg.Network.check(); err != nil {
			return cfg, err
		}
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"SnapshotInterval", cfg.SnapshotInterval},
		{"HeartbeatTimeout", cfg.HeartbeatTimeout},
		{"ElectionTimeout", cfg.ElectionTimeout},
		{"OpenTimeout", cfg.OpenTimeout},
	} {
		if d.value < 0 {
			return cfg, fmt.Errorf("metalog: Config.%s %v is negative (zero means the default)", d.field, d.value)
		}
	}
	for _, n := range []struct {
		field string
		value int
	}{
		{"MaxAppendEntries", cfg.MaxAppendEntries},
		{"SegmentBytes", cfg.SegmentBytes},
	} {
		if n.value < 0 {
			return cfg, fmt.Errorf("metalog: Config.%s %d is negative (zero means the default)", n.field, n.value)
		}
	}
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = DefaultSnapshotInterval
	}
	if cfg.TrailingLogs == 0 {
		cfg.TrailingLogs = DefaultTrailingLogs
	}
	electionDefaulted := cfg.ElectionTimeout == 0
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = DefaultElectionTimeout
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"SnapshotInterval", cfg.SnapshotInterval},
		{"HeartbeatTimeout", cfg.HeartbeatTimeout},
		{"ElectionTimeout", cfg.ElectionTimeout},
	} {
		if d.value < minTimeout {
			return cfg, fmt.Errorf("metalog: Config.%s %v is below raft's minimum of %v", d.field, d.value, minTimeout)
		}
	}
	if cfg.ElectionTimeout < cfg.HeartbeatTimeout {
		// raft refuses it too, naming raft's fields; say which of ours, and
		// whether the lower one is a default the caller never set.
		how := ""
		if electionDefaulted {
			how = " (the default, Config.ElectionTimeout being zero)"
		}
		return cfg, fmt.Errorf("metalog: Config.ElectionTimeout %v%s is below Config.HeartbeatTimeout %v: set ElectionTimeout to at least HeartbeatTimeout",
			cfg.ElectionTimeout, how, cfg.HeartbeatTimeout)
	}
	if cfg.MaxAppendEntries == 0 {
		cfg.MaxAppendEntries = DefaultMaxAppendEntries
	}
	if cfg.MaxAppendEntries > maxAppendEntries {
		return cfg, fmt.Errorf("metalog: Config.MaxAppendEntries %d is above raft's maximum of %d", cfg.MaxAppendEntries, maxAppendEntries)
	}
	if cfg.SegmentBytes == 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.SegmentBytes < 1<<20 {
		return cfg, fmt.Errorf("metalog: Config.SegmentBytes %d is below 1 MiB", cfg.SegmentBytes)
	}
	if cfg.OpenTimeout == 0 {
		cfg.OpenTimeout = DefaultOpenTimeout
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = DefaultLogLevel
	}
	if hclog.LevelFromString(cfg.LogLevel) == hclog.NoLevel {
		return cfg, fmt.Errorf("metalog: unknown Config.LogLevel %q (want trace, debug, info, warn, error or off)", cfg.LogLevel)
	}
	if cfg.Logger == nil {
		out := cfg.LogOutput
		if out == nil {
			out = os.Stderr
		}
		cfg.Logger = hclog.New(&hclog.LoggerOptions{
			Name:   "metalog",
			Level:  hclog.LevelFromString(cfg.LogLevel),
			Output: out,
		})
	}
	return cfg, nil
}

// raftConfig translates cfg into raft's Config.
func (cfg Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = cfg.Logger.Named("raft")

	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	// The lease must not exceed the heartbeat timeout nor go under 5ms
	// (raft validates both); half of it is raft's own ratio (500ms of 1s).
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	if rc.LeaderLeaseTimeout < 5*time.Millisecond {
		rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout
	}

	// Group commit. The leader loop takes one proposal from the apply
	// channel and then drains whatever else is already waiting, up to
	// MaxAppendEntries, into a single StoreLogs call — one WAL write, one
	// fsync. BatchApplyCh gives that channel a
	// buffer of MaxAppendEntries, so a proposer hands its entry over at once
	// and goes on to wait for the commit, instead of parking on the channel
	// until the leader loop is out of its current fsync; the buffer filled
	// meanwhile is the next batch. (raft's caveat — a buffered proposal can
	// outlive Apply's enqueue timeout — does not matter here: Log.Apply
	// bounds its wait with its context.)
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.BatchApplyCh = true

	// CommitTimeout is left at raft's 50ms: it is how often an idle leader
	// tells followers the commit index, never a delay before a commit. On a
	// single voter an entry is committed the moment the local write returns
	// (commitment.match right after StoreLogs), with no timer involved.

	if cfg.Network != nil {
		// A follower learns that an entry committed from the next message
		// the leader sends; when no entry follows, that is the commit
		// timeout's heartbeat. Forwarded commands wait for their apply on
		// the follower, so 5ms rather than raft's 50ms keeps an idle
		// cluster's commits quick, for one small message per follower
		// every 5ms.
		rc.CommitTimeout = 5 * time.Millisecond
	}

	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs

	// Emit metrics once, labelled, not also under legacy per-peer names.
	rc.NoLegacyTelemetry = true
	return rc
}

// Log is an open metadata log: one raft node and its stores. Its methods are
// safe for concurrent use.
type Log struct {
	raft  *raft.Raft
	store *walStore // closed by Close; raft closes the transport
	lock  *os.File  // the directory lock, released by Close

	// What Configuration reads the configuration's index from (raft v1.7's
	// GetConfiguration answers index 0): the log raft writes (through its
	// cache) and the snapshot store. self and addr are this node's ID and
	// the address the transport is known by.
	logs  raft.LogStore
	snaps raft.SnapshotStore
	self  raft.ServerID
	addr  raft.ServerAddress

	// fsm is the state machine as raft applies it (envelopes stripped);
	// fwd, when set, forwards a follower's commands to the leader.
	fsm *fsmWrapper
	fwd *forwarding

	// lastConfig is the newest configuration entry Configuration found in
	// the log, so that the next call reads only the entries after it.
	configMu   sync.Mutex
	lastConfig configEntry

	// compactMu serializes SnapshotKeeping's change and restore of raft's
	// TrailingLogs.
	compactMu sync.Mutex

	// closed is closed by Close once raft has shut down. Waiters select on
	// it because raft does not always answer a proposal it received just
	// before shutting down (hashicorp/raft#498): without it such an Apply
	// would hang forever.
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the log in cfg.Dir and starts a raft node
// applying it to fsm.
//
// fsm must be empty: raft rebuilds it on start, first by Restore from the
// newest snapshot, if any, then by applying the entries after it.
//
// If Dir holds no state and cfg.Bootstrap is set, the node first bootstraps a
// cluster whose only voter is itself. When this node is the only voter —
// the single-broker case, new or restarted — Open returns only once it is the
// leader and every entry already in the log has been applied to fsm (a
// barrier), so the state machine is complete and Apply works at once. The
// wait is bounded by cfg.OpenTimeout. A node of a multi-voter cluster, or one
// waiting to be added to a cluster, is returned without waiting.
func Open(cfg Config, fsm raft.FSM) (*Log, error) {
	if fsm == nil {
		return nil, errors.New("metalog: Open: nil FSM")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rc := cfg.raftConfig()
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("metalog: invalid configuration: %w", err)
	}

	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("metalog: create %s: %w", cfg.Dir, err)
	}

	// The lock keeps a second process (or a Log not closed) off the same
	// directory: two raft nodes appending to one WAL would corrupt it.
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := migrateBolt(cfg.Dir, cfg.Logger); err != nil {
		lock.Close()
		return nil, err
	}
	inject, _ := cfg.FS.(diskio.Injector)
	store, err := openWALWith(filepath.Join(cfg.Dir, walDir), cfg.SegmentBytes, cfg.Logger, cfg.SyncFailed, inject)
	if err != nil {
		lock.Close()
		return nil, err
	}
	// ok turns true once raft owns the stores; until then, undo what was
	// opened if Open fails.
	ok := false
	var trans raft.Transport
	defer func() {
		if ok {
			return
		}
		if c, isCloser := trans.(io.Closer); isCloser {
			_ = c.Close()
		}
		_ = store.Close()
		_ = lock.Close()
	}()

	var logStore raft.LogStore = store
	if cfg.wrapLogStore != nil {
		logStore = cfg.wrapLogStore(logStore)
	}
	logs, err := raft.NewLogCache(logCacheSize, logStore)
	if err != nil {
		return nil, fmt.Errorf("metalog: log cache: %w", err)
	}

	// NewFileSnapshotStore keeps its files in Dir/snapshots.
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, snapshotRetain, cfg.Logger.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("metalog: snapshot store: %w", err)
	}

	trans, err = newTransport(cfg)
	if err != nil {
		return nil, err
	}

	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return nil, fmt.Errorf("metalog: read existing state: %w", err)
	}
	if len(cfg.Recover) > 0 {
		if !hasState {
			return nil, errors.New("metalog: recover: the directory holds no log to recover")
		}
		conf := raft.Configuration{}
		for _, s := range cfg.Recover {
			suffrage := raft.Voter
			if s.Suffrage == Nonvoter {
				suffrage = raft.Nonvoter
			}
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: suffrage, ID: raft.ServerID(s.ID), Address: raft.ServerAddress(s.Address)})
		}
		if err := raft.RecoverCluster(rc, newFSMWrapper(fsm), logs, store, snaps, trans, conf); err != nil {
			return nil, fmt.Errorf("metalog: recover: %w", err)
		}
		cfg.Logger.Warn("metadata log recovered with a new configuration", "servers", fmt.Sprint(cfg.Recover))
	}
	if !hasState && cfg.Bootstrap {
		// The beginning of time for this cluster: write a configuration
		// entry naming this node as the only voter. Other nodes join later
		// through AddVoter on the leader; they must not bootstrap.
		boot := raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter,
			ID:       rc.LocalID,
			Address:  trans.LocalAddr(),
		}}}
		if err := raft.BootstrapCluster(rc, logs, store, snaps, trans, boot); err != nil {
			return nil, fmt.Errorf("metalog: bootstrap: %w", err)
		}
	}

	wrapped := newFSMWrapper(fsm)
	r, err := raft.NewRaft(rc, wrapped, logs, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("metalog: start raft: %w", err)
	}
	l := &Log{raft: r, store: store, lock: lock, closed: make(chan struct{}),
		logs: logs, snaps: snaps, self: rc.LocalID, addr: trans.LocalAddr(), fsm: wrapped}
	ok = true // from here on, l.Close releases everything
	if cfg.Forward != nil {
		l.fwd = newForwarding(l, cfg.Forward)
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.OpenTimeout)
	defer cancel()
	sole, err := l.soleVoter(ctx, rc.LocalID)
	if err == nil && sole {
		err = l.awaitLeadership(ctx)
	}
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("metalog: open: %w", err)
	}
	return l, nil
}

// newTransport makes the in-memory transport of a lone node, or the TCP
// transport of one that may have peers.
func newTransport(cfg Config) (raft.Transport, error) {
	if cfg.Network != nil {
		return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: streamLayer{*cfg.Network}, MaxPool: tcpMaxPool, Timeout: tcpTimeout,
			Logger: cfg.Logger.Named("transport"),
		}), nil
	}
	if cfg.BindAddr == "" {
		// The NodeID doubles as the address so that the address recorded
		// in the configuration stays the same across restarts.
		_, t := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
		return t, nil
	}
	var advertise net.Addr
	if cfg.Advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
		if err != nil {
			return nil, fmt.Errorf("metalog: advertise address %q: %w", cfg.Advertise, err)
		}
		advertise = a
	}
	t, err := raft.NewTCPTransportWithLogger(cfg.BindAddr, advertise, tcpMaxPool, tcpTimeout, cfg.Logger.Named("transport"))
	if err != nil {
		return nil, fmt.Errorf("metalog: listen on %s (advertise %q): %w", cfg.BindAddr, cfg.Advertise, err)
	}
	return t, nil
}

// soleVoter reports whether the latest configuration has exactly one voter
// and it is this node.
func (l *Log) soleVoter(ctx context.Context, self raft.ServerID) (bool, error) {
	f := l.raft.GetConfiguration()
	if err := l.wait(ctx, f); err != nil {
		return false, fmt.Errorf("read configuration: %w", err)
	}
	voters := 0
	selfVotes := false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			selfVotes = selfVotes || s.ID == self
		}
	}
	return voters == 1 && selfVotes, nil
}

// awaitLeadership waits until this node is leader and then until the FSM
// has applied every entry before a barrier, i.e. the whole log on disk.
func (l *Log) awaitLeadership(ctx context.Context) error {
	// An observer rather than raft.LeaderCh: the latter is a single shared
	// channel that a later consumer (cluster code) may want for itself. The
	// observer is registered before the state is read, so a transition
	// between the read and the select still wakes us. Dropped observations
	// (non-blocking, buffer of one) only ever drop a redundant wake-up.
	ch := make(chan raft.Observation, 1)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	l.raft.RegisterObserver(obs)
	defer l.raft.DeregisterObserver(obs)

	for l.raft.State() != raft.Leader {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("not leader after waiting (state %s): %w", l.raft.State(), ctx.Err())
		}
	}
	if err := l.Barrier(ctx); err != nil {
		return fmt.Errorf("replay log: %w", err)
	}
	return nil
}

// Apply proposes cmd, waits until it is committed and applied to the FSM, and
// returns the FSM's response. If that response is an error, Apply returns it
// as its error, unwrapped, so the FSM's errors reach the caller as they are.
//
// Every other error is wrapped with the reason: ErrNotLeader (not appended,
// safe to retry on the leader), ErrClosed, ErrUnknownOutcome with
// raft.ErrLeadershipLost (appended but leadership was lost before it
// committed: it may or may not apply), or
// the context's error.
//
// ctx bounds the wait. When ctx ends first Apply returns at once, but the
// command may still be committed and applied afterwards: raft offers no way
// to withdraw a proposal. Callers that must know the outcome read it back
// from the FSM (after Barrier), or make commands idempotent. Proposals of one
// goroutine are appended in the order it makes them — Apply enqueues cmd
// before it starts waiting — so an abandoned command never overtakes one
// proposed after it.
func (l *Log) Apply(ctx context.Context, cmd []byte) (any, error) {
	if err := l.usable(ctx); err != nil {
		return nil, l.wrap("apply", err)
	}
	if l.forwards() {
		return l.forward(ctx, cmd)(ctx)
	}
	f := l.raft.Apply(cmd, enqueueTimeout(ctx))
	if err := l.wait(ctx, f); err != nil {
		return nil, l.wrap("apply", err)
	}
	resp := f.Response()
	if err, isErr := resp.(error); isErr {
		return nil, err
	}
	return resp, nil
}

// Propose appends cmd to the log without waiting and returns a function
// that waits for its result as Apply does. Proposals are appended in the
// order Propose is called, so a caller can keep several in flight — raft
// then writes them in one batch — and still read their results in order.
func (l *Log) Propose(cmd []byte) func(ctx context.Context) (any, error) {
	if err := l.usable(context.Background()); err != nil {
		return func(context.Context) (any, error) { return nil, l.wrap("apply", err) }
	}
	if l.forwards() {
		return l.forward(context.Background(), cmd)
	}
	f := l.raft.Apply(cmd, 0)
	return func(ctx context.Context) (any, error) {
		var err error
		if ctx.Done() == nil {
			// Nothing can cancel the wait: block on the future itself and
			// spare the hand-off through a helper goroutine, which costs a
			// scheduling delay on a busy machine. (Callers that may still
			// wait when the Log closes must pass a cancellable ctx.)
			err = f.Error()
		} else {
			err = l.wait(ctx, f)
		}
		if err != nil {
			return nil, l.wrap("apply", err)
		}
		resp := f.Response()
		if err, isErr := resp.(error); isErr {
			return nil, err
		}
		return resp, nil
	}
}

// forwards reports whether a command proposed now goes to the leader
// through Config.Forward: this node forwards and is not the leader. (A
// node that turns leader meanwhile appends what it forwards itself.)
func (l *Log) forwards() bool {
	return l.fwd != nil && l.raft.State() != raft.Leader
}

// Barrier waits until every entry appended before it has been applied to the
// FSM. It only works on the leader. Like Apply, it stops waiting when ctx
// ends, while the barrier itself stays in the log.
func (l *Log) Barrier(ctx context.Context) error {
	if err := l.usable(ctx); err != nil {
		return l.wrap("barrier", err)
	}
	if err := l.wait(ctx, l.raft.Barrier(enqueueTimeout(ctx))); err != nil {
		return l.wrap("barrier", err)
	}
	return nil
}

// Snapshot makes raft snapshot the FSM now and compact the log behind it
// (keeping TrailingLogs entries), as it does by itself every
// SnapshotThreshold entries. For tests and administration. Each call writes
// a new snapshot, even of an unchanged FSM; the two newest are kept. When
// the FSM has applied nothing at all yet raft has nothing to snapshot, and
// Snapshot returns nil.
func (l *Log) Snapshot() error {
	if err := l.usable(context.Background()); err != nil {
		return l.wrap("snapshot", err)
	}
	err := l.wait(context.Background(), l.raft.Snapshot())
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil
	}
	if err != nil {
		return l.wrap("snapshot", err)
	}
	return nil
}

// SnapshotKeeping is Snapshot compacting the log down to its newest keep
// entries rather than TrailingLogs, which it then restores. It is for a
// volume short of space: the entries kept for followers' catch-up may hold
// most of the log's bytes (inline frames), and a follower that would have
// needed them is sent the snapshot instead. keep at or above TrailingLogs
// is a plain Snapshot; zero is refused, as Config reads a TrailingLogs of
// zero as "the default".
func (l *Log) SnapshotKeeping(keep uint64) error {
	if keep == 0 {
		return l.wrap("snapshot", fmt.Errorf("SnapshotKeeping(0): keep at least one entry"))
	}
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
	rc := l.raft.ReloadableConfig()
	usual := rc.TrailingLogs
	if keep >= usual {
		return l.Snapshot()
	}
	rc.TrailingLogs = keep
	if err := l.raft.ReloadConfig(rc); err != nil {
		return l.wrap("snapshot", err)
	}
	defer func() {
		// Read again: only TrailingLogs is ours to put back.
		rc := l.raft.ReloadableConfig()
		rc.TrailingLogs = usual
		_ = l.raft.ReloadConfig(rc) // valid: it was raft's own a moment ago
	}()
	return l.Snapshot()
}

// Leader returns the address and ID of the current leader as this node knows
// it, or two empty strings when there is none (during an election, or after
// Close).
func (l *Log) Leader() (addr, id string) {
	a, i := l.raft.LeaderWithID()
	return string(a), string(i)
}

// IsLeader reports whether this node is the leader now. Leadership can be
// lost at any moment after; Apply reports ErrNotLeader when it is.
func (l *Log) IsLeader() bool { return l.raft.State() == raft.Leader }

// InContact reports whether this node can commit through a leader now:
// it is the leader (a leader that loses its quorum steps down within its
// lease), or it heard from one within within. A node cut from the others
// must give up what only a member in contact may hold (its slots): its
// commits would fail anyway.
func (l *Log) InContact(within time.Duration) bool {
	switch l.raft.State() {
	case raft.Leader:
		return true
	case raft.Follower:
		_, id := l.raft.LeaderWithID()
		return id != "" && time.Since(l.raft.LastContact()) < within
	}
	return false
}

// State returns raft's state: "Follower", "Candidate", "Leader" or
// "Shutdown".
func (l *Log) State() string { return l.raft.State().String() }

// Stats returns raft's statistics (terms, indexes, configuration, ...), for
// diagnostics. Keys and values are raft's.
func (l *Log) Stats() map[string]string { return l.raft.Stats() }

// AppliedIndex returns raft's applied index: the last entry raft has handed
// to the FSM. As raft documents, the FSM may not have consumed that entry
// yet; and since raft updates the index only after handing a batch over,
// it can also trail, for an instant, an Apply that has already returned.
func (l *Log) AppliedIndex() uint64 { return l.raft.AppliedIndex() }

// LastIndex returns the index of the last entry in the log (or in the latest
// snapshot), applied or not.
func (l *Log) LastIndex() uint64 { return l.raft.LastIndex() }

// Close shuts raft down — waiting for its goroutines, including the one
// applying to the FSM, so the FSM is not touched after Close returns — and
// then closes the transport and the WAL. Calls waiting in Apply, Barrier or
// Snapshot return ErrClosed (or raft's own shutdown errors), and later calls
// fail at once. Close is idempotent: every call returns the first's result.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		// Shutdown's future closes the transport too when it can be closed
		// (both transports used here can).
		err := l.raft.Shutdown().Error()
		// Release waiters only now: a proposal raft answered during the
		// shutdown keeps raft's answer rather than a blanket ErrClosed.
		close(l.closed)
		if cerr := l.store.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("metalog: close %s: %w", walDir, cerr))
		}
		if cerr := l.lock.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("metalog: release %s: %w", lockFile, cerr))
		}
		l.closeErr = err
	})
	return l.closeErr
}

// usable returns why a call should not even be attempted: the context has
// ended or the Log is closed.
func (l *Log) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-l.closed:
		return ErrClosed
	default:
		return nil
	}
}

// wait waits for f while honouring ctx and Close. raft's futures have no
// channel to select on, so a goroutine blocks in f.Error() and hands the
// result over; it ends when raft answers. (It can only outlive the call if
// raft never answers — a proposal caught in a shutdown, hashicorp/raft#498 —
// and then it is one parked goroutine per such proposal.) The cost, a
// goroutine per call, is negligible next to the fsync every commit waits for.
func (l *Log) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-l.closed:
		// Prefer raft's answer if it came at the same moment.
		select {
		case err := <-done:
			return err
		default:
			return ErrClosed
		}
	}
}

// wrap turns an error of raft, of the context or of the Log into what the
// caller sees: the operation, the sentinel to test with errors.Is, and the
// original error, still reachable with errors.Is as well.
func (l *Log) wrap(op string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		leader := "no leader known"
		if addr, id := l.Leader(); id != "" {
			leader = fmt.Sprintf("the leader is %s at %s", id, addr)
		}
		return fmt.Errorf("%w: %s refused, %s: %w", ErrNotLeader, op, leader, err)
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("%w: %s refused", err, op)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %s: %w", ErrClosed, op, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %s: leadership lost before the entry committed, it may or may not be applied: %w", ErrUnknownOutcome, op, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("metalog: %s: not accepted by raft before the context deadline: %w: %w", op, context.DeadlineExceeded, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("metalog: %s: stopped waiting, the operation may still take effect: %w", op, err)
	default:
		return fmt.Errorf("metalog: %s: %w", op, err)
	}
}

// enqueueTimeout is how long raft may take to accept a proposal into its
// queue: the time left before ctx's deadline, or no limit (0) when ctx has
// none. The queue is buffered and drained by the leader loop between fsyncs,
// so in practice this never waits long; cancellation without a deadline is
// honoured by the wait that follows.
func enqueueTimeout(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	d := time.Until(deadline)
	if d <= 0 {
		// Already past: the smallest positive timeout, since 0 means none.
		d = time.Nanosecond
	}
	return d
}

// UnzeroedSegments counts the WAL segments this Log created without a
// zeroed spare ready (see zeroedFS): each of their commits pays a second
// device write. A count that keeps rising means the log fills segments
// faster than spares are written.
func (l *Log) UnzeroedSegments() int64 {
	l.store.rw.RLock()
	defer l.store.rw.RUnlock()
	return l.store.files.fallocated.Load()
}
