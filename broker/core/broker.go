// Package core is the PicoMQ broker on one node: named streams over internal
// streams, appends batched by one group-commit flusher into immutable
// objects, committed in the broker's journal and checkpointed into the
// metadata log (a lone broker; a cluster member commits each through the
// log), and read back from the objects the metadata names.
//
// It knows nothing of HTTP or Kubernetes: the front ends drive it through
// package node's Broker interface, which Broker implements and whose types
// its API speaks; the metadata log's commands and state (broker/meta,
// broker/metalog) stay inside. The cluster plugs in at three seams:
// Ownership (may this node open an internal stream for writing),
// ObjectStore (where object files are written, so that they can be copied
// to replicas before their commit) and metalog's membership operations.
//
// # Files
//
// broker.go opens and closes the broker; config.go is its configuration;
// named.go the owner's in-memory view of a stream; lifecycle.go creates,
// updates, deletes and expires streams, fork.go forks them; append.go
// admits appends and flusher.go commits them, journal.go in the journal
// and its checkpoints; read.go reads and seeks,
// framecache.go caches frames; retention.go trims; groups.go keeps
// consumer-group offsets. In the background, maintain.go runs the
// maintenance loop, gc.go collects objects, merge.go and compact.go rewrite
// ranges (rewrite.go is what they share), inline.go keeps the objects
// committed inside their log entries, and tier.go moves sealed segments to
// object storage (tierplan.go decides which) and reads them back.
//
// # Locks
//
// Taken in this order, never the other way:
//
//	Broker.mu → named.mu → the state machine's lock (meta.FSM: View, Entry, Internal)
//
// named.mu may be held while queueing to the flusher (flusher.mu), and the
// flusher's goroutines take named.mu without holding flusher.mu; its
// settle goroutine alone holds several at once (ordered by name) while an
// object joins the journal's tail (journal.go's tail.mu is a leaf). No
// metadata command is proposed while a named.mu is held: an append whose
// partition must be opened leaves the lock for the open (openPart). A
// state machine View must not take Broker.mu (see loadedViews). The frame
// cache's, the inline objects', the garbage collector's and the tier
// loop's (tiering.mu) locks are leaves.
package core

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/picomq/picomq/broker/bufpool"
	"github.com/picomq/picomq/broker/diskio"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// Broker is one node's broker. It implements node.Broker.
type Broker struct {
	cfg  Config
	log  *metalog.Log
	fsm  *meta.FSM
	objs *objstore.Store
	out  ObjectStore // where object files are written: objs, or a cluster's wrapper of it

	mu     sync.Mutex        // guards named, byID and closed
	named  map[string]*named // the views of the streams this node loaded
	byID   map[uint64]*named // the same views by their partitions' internal ids
	closed bool

	flush *flusher
	// tiering is the tier loop's state (nil: no object storage).
	tiering *tiering
	// journal and tail, set on the journal data path (journal.go): the
	// broker's journal, and what it acknowledged that the log lacks yet.
	journal      *journal.Journal
	tail         *tailState
	checkpointMu sync.Mutex // one checkpoint at a time
	journalSeq   uint64     // the last sequence number the journal holds (the flusher goes on from it)

	frames *frameCache
	inline *inlineObjects
	// batchBuffers recycles large appends' encoded batches. Such a batch
	// lives from admission until its commit is answered: the flusher
	// writes it from where it is (objstore's AppendFrameRef) and nothing
	// keeps it after (it is not put in the frame cache: its object is a
	// file whose pages are cached). Allocating one per append, zeroed, was
	// a tenth of the broker's CPU under 100 KiB batches, and most of its
	// garbage.
	batchBuffers bufpool.Pool

	gcMu         sync.Mutex           // guards garbageSince; one collection at a time
	garbageSince map[uint64]time.Time // garbage objects waiting out GarbageGrace

	opened       time.Time // when Open returned
	fullSnapshot time.Time // the last snapshot taken because the volume was full (maintenance loop only)
	// snapshotDue wakes the maintenance loop as soon as the log holds
	// InlineLogBytes of frames (see inline.go), not at its next tick.
	snapshotDue chan struct{}

	// unnames are the objects whose replica sets name members that never
	// held them (unname.go); nil on a lone broker.
	unnames *unnames

	stop chan struct{}
	wg   sync.WaitGroup
}

var _ node.Broker = (*Broker)(nil)

// Open prepares the data directory, replays the metadata log, removes the
// objects nobody committed, and starts the flusher and the maintenance loop.
func Open(cfg Config) (*Broker, error) {
	if cfg.DataDir == "" {
		return nil, stream.StreamDirectoryUnusable.With("path", "", "reason", "no data directory given")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := objstore.PrepareDir(cfg.DataDir); err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:         cfg,
		fsm:         meta.NewFSM(),
		named:       map[string]*named{},
		byID:        map[uint64]*named{},
		frames:      newFrameCache(64 << 20),
		inline:      newInlineObjects(objectsDir(cfg.DataDir), cfg.syncObjects),
		snapshotDue: make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	if cfg.Tier != nil {
		tc := *cfg.Tier
		tc.defaults()
		b.tiering = &tiering{cfg: &tc, seen: map[uint64]time.Time{}, keysDeleted: map[uint64]bool{}, garbageSince: map[uint64]time.Time{}}
		if tc.UploadBytesPerSecond > 0 {
			b.tiering.limit = rate.NewLimiter(rate.Limit(tc.UploadBytesPerSecond), 256<<10)
		}
	}
	// Set before the log replays: a replayed inline commit writes its object.
	b.fsm.SetHooks(meta.Hooks{Applied: b.applied, Snapshot: b.snapshotting})
	metaDir := filepath.Join(cfg.DataDir, "meta")
	if err := objstore.PrepareDir(metaDir); err != nil {
		return nil, err
	}
	lc := metalog.Config{
		Dir: metaDir, NodeID: cfg.NodeID, Bootstrap: true, LogOutput: cfg.RaftLog,
		TrailingLogs: trailingLogs(cfg.Cluster),
		SegmentBytes: cfg.WALSegmentBytes,
		SyncFailed:   func(path string, err error) { b.storageFailed("metalog.fsync", path, err) },
		FS:           cfg.FS,
	}
	if cl := cfg.Cluster; cl != nil {
		lc.NodeID, lc.Bootstrap, lc.Network, lc.Forward = cl.MemberID, cl.Bootstrap, cl.Network, cl.Forward
		lc.HeartbeatTimeout, lc.ElectionTimeout = cl.HeartbeatTimeout, cl.ElectionTimeout
		lc.Recover = cl.Recover
	}
	l, err := metalog.Open(lc, b.fsm)
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "metalog.open")
	}
	b.log = l
	var journalMax uint64
	if cfg.LogCommits || cfg.Cluster != nil && cfg.Peers == nil {
		// The log path cannot adopt a journal's appends: opening a lone
		// broker's directory on it would hand their offsets out again.
		if names, _ := filepath.Glob(filepath.Join(journalDir(cfg.DataDir), "journal-*.log")); len(names) > 0 {
			_ = l.Close()
			return nil, stream.StreamDirectoryUnusable.With("path", journalDir(cfg.DataDir), "reason",
				"the data directory holds a lone broker's journal, which a cluster member (or the log data path) cannot adopt: open it as a lone broker")
		}
	} else {
		dir := journalDir(cfg.DataDir)
		if err := objstore.PrepareDir(dir); err != nil {
			_ = l.Close()
			return nil, err
		}
		j, err := journal.Open(journal.DirOn(dir, diskio.Or(cfg.FS)), journal.Options{SegmentBytes: cfg.JournalSegmentBytes, Preallocate: true, Synced: cfg.Metrics.JournalSyncs.Inc})
		if err == nil {
			err = j.Damaged()
			if err != nil {
				_ = j.Close()
			}
		}
		if err != nil {
			_ = l.Close()
			return nil, stream.StreamDirectoryUnusable.Wrap(err, "path", dir, "reason", "the journal cannot be opened")
		}
		b.journal, b.tail = j, newTailState()
		if cfg.Cluster != nil && cfg.Peers != nil {
			b.unnames = newUnnames() // the ensemble path's objects only
		}
		journalMax = journalMaxID(j)
		if cl := cfg.Cluster; cl != nil && cl.Number == 0 {
			// A lone broker's directory taken into a cluster: a cluster
			// member does not adopt its own journal at start (its
			// ensembles' opens recover), and a lone broker's streams
			// have none to recover from.
			if err := b.loneTail(); err != nil {
				_ = j.Close()
				_ = l.Close()
				return nil, err
			}
		}
	}
	closeAll := func() {
		if b.journal != nil {
			_ = b.journal.Close()
		}
		_ = l.Close()
	}
	oo := objstore.Options{CachedBytes: cfg.PageCacheBytes, FS: cfg.FS, SyncFailed: b.storageFailed}
	if cl := cfg.Cluster; cl != nil && cl.Number > 0 {
		// A member's ids are its own range's, reserved on disk: its log
		// may not be replayed yet (a follower applies after the leader's
		// word), so the state cannot say which ids it handed out.
		oo.IDBase = uint64(cl.Number) << meta.ObjectIDBits
	} else {
		// A lone broker (or a member never recorded) has replayed its whole
		// log by now: the state knows every id.
		var maxObj uint64
		b.fsm.View(func(s *meta.State) { maxObj = s.MaxObjectID })
		oo.MinNextID = max(maxObj, journalMax) + 1
	}
	objs, err := objstore.Open(objectsDir(cfg.DataDir), oo)
	if err != nil {
		closeAll()
		return nil, err
	}
	b.objs = objs
	b.out = cfg.Placement(localObjects{objs})
	var restored error
	b.fsm.View(func(s *meta.State) { restored = b.inline.restore(objs, s) })
	if restored == nil && b.journal != nil && cfg.Cluster == nil {
		// A cluster member's journal tail is recovered by the next open
		// of each stream, on its ensemble (ensembles.go, decision 12):
		// its log may not even be replayed yet.
		restored = b.recoverJournal()
	}
	if restored != nil {
		_ = objs.Close()
		closeAll()
		return nil, restored
	}
	// Nothing is in flight yet: every object the log never committed is a
	// torn or abandoned write, and goes now.
	if err := b.collectGarbage(context.Background(), 0, true); err != nil {
		cfg.Logger.Warn("start-up garbage collection failed", "err", err)
	}
	b.flush = newFlusher(b)
	b.opened = time.Now()
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.flush.run() }()
	go func() { defer b.wg.Done(); b.maintainLoop() }()
	if b.tail != nil {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.checkpointLoop() }()
	}
	if b.unnames != nil {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.unnameLoop() }()
	}
	if b.tiering != nil {
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.tierLoop() }()
	}
	cfg.Logger.Info("broker open", "dataDir", cfg.DataDir, "node", cfg.NodeID, "streams", len(b.fsm.State().Names))
	return b, nil
}

// admitWrite refuses a write of new data while the volume is full or the
// storage failed (Config.Disk); what frees space never asks.
func (b *Broker) admitWrite() error {
	if d := b.cfg.Disk; d != nil {
		if err := d.Admit(); err != nil {
			return err
		}
	}
	return b.uncheckpointedFull()
}

// background answers whether background work that writes about writes
// bytes and frees about frees may run on the volume now (see
// diskspace.Monitor.Background): a full volume is not filled further by
// work that only moves data.
func (b *Broker) background(work string, writes, frees int64) bool {
	if d := b.cfg.Disk; d != nil {
		return d.Background(work, writes, frees)
	}
	return true
}

// backgroundBudget is how many bytes one maintenance pass may write (see
// diskspace.Monitor.BackgroundBudget).
func (b *Broker) backgroundBudget() int64 {
	if d := b.cfg.Disk; d != nil {
		return d.BackgroundBudget()
	}
	return math.MaxInt64
}

// freedBy is about what replacing the ranges old frees on this node's
// volume: the objects no other range references, each rounded up to whole
// 4 KiB blocks — their files, or for those held in memory their frames in
// the metadata log, which the next snapshot lets go without writing them.
// pending counts, by object, ranges that replaces not applied yet drop (a
// pass's batch of merges): an object they free already is not counted
// again, one they and old free together is.
func (b *Broker) freedBy(old []meta.Range, pending map[uint64]int) int64 {
	uses := map[uint64]int{}
	for _, r := range old {
		uses[r.Object]++
	}
	sizes := map[uint64]int64{}
	b.fsm.View(func(s *meta.State) {
		for id, n := range uses {
			if o, ok := s.Objects[id]; ok && o.Refs > pending[id] && o.Refs <= pending[id]+n {
				sizes[id] = o.Size
			}
		}
	})
	var freed int64
	for _, size := range sizes {
		freed += (size + 4095) &^ 4095
	}
	return freed
}

// storageFailed tells Config.Disk that a write could not be made durable.
func (b *Broker) storageFailed(op, path string, err error) {
	if d := b.cfg.Disk; d != nil {
		d.Fail(op, path, err)
	}
}

// objectsDir is where a data directory keeps its object files.
func objectsDir(dataDir string) string { return filepath.Join(dataDir, "objects") }

// Close stops accepting appends, flushes what is pending, closes the streams
// this node owns (so their next owner opens them at the next epoch without
// waiting) and closes the log and the objects.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()

	b.flush.close() // drains: every pending append is committed or answered
	close(b.stop)
	b.wg.Wait()
	// One command closes every stream this node opened, however many, so
	// their next owner opens them at the next epoch without waiting.
	// Without a leader nothing commits: the streams are left for their
	// next owner to reopen, rather than the stop waiting on a quorum a
	// cluster stopping as a whole will not have again.
	if _, leader := b.log.Leader(); leader != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := b.checkpoint(ctx); err != nil {
			b.cfg.Logger.Warn("the last checkpoint failed; the next start adopts the appends from the journal", "err", err)
		}
		if err := b.closeOpen(ctx, func(uint64) bool { return true }); err != nil {
			b.cfg.Logger.Warn("closing the streams this broker owns failed; their next owner reopens them anyway", "err", err)
		}
		cancel()
	} else {
		b.cfg.Logger.Info("no metadata leader: the streams this broker owns are left for their next owner to reopen")
	}
	err := b.log.Close()
	if cerr := b.objs.Close(); err == nil {
		err = cerr
	}
	if b.journal != nil {
		if cerr := b.journal.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (b *Broker) now() time.Time { return b.cfg.Clock() }

// self is this broker's id as the log knows it: the owner its opens record
// and the name replica sets give it — the member id in a cluster, the node
// id alone.
func (b *Broker) self() string {
	if b.cfg.Cluster != nil {
		return b.cfg.Cluster.MemberID
	}
	return b.cfg.NodeID
}

// untilStopped returns a context that ends when the broker stops: a
// loop's command in flight then ends at once (it may wait on a quorum a
// cluster stopping as a whole does not have), and Close waits for the
// loop.
func (b *Broker) untilStopped() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// apply proposes a command and returns its result. A refusal of the state
// machine comes back as the error (metalog.Apply returns an error result
// as its error), a failure of the log as STREAM_BACKEND_FAILED wrapping it.
func (b *Broker) apply(ctx context.Context, c *meta.Command) (any, error) {
	if b.tail != nil && b.tail.needs(c) {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, applyTimeout)
			defer cancel()
		}
		if err := b.checkpoint(ctx); err != nil {
			return nil, err
		}
	}
	return b.applyNow(ctx, c)
}

// applyNow is apply without the checkpoint some commands need first.
func (b *Broker) applyNow(ctx context.Context, c *meta.Command) (any, error) {
	raw, err := meta.Encode(c)
	if err != nil {
		return nil, meta.BadCommand.Wrap(err, "op", string(c.Op))
	}
	if _, ok := ctx.Deadline(); !ok {
		// A command waits for a quorum: without one, answer in time.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, applyTimeout)
		defer cancel()
	}
	start := time.Now()
	res, err := b.log.Apply(ctx, raw)
	b.cfg.Metrics.observeCommit(time.Since(start))
	if err != nil {
		return nil, logFailure(err, "metalog.apply."+string(c.Op))
	}
	return res, nil
}

// applyTimeout bounds a metadata command whose caller set no deadline.
const applyTimeout = 15 * time.Second

// logFailure is what a metadata command's failure answers: the state
// machine's refusal as it is; a log that cannot commit now (no leader, no
// quorum, an outcome unknown) METADATA_UNAVAILABLE, retriable; anything
// else STREAM_BACKEND_FAILED.
func logFailure(err error, op string) error {
	var coded *errs.Error
	switch {
	case errors.As(err, &coded):
		return err
	case errors.Is(err, metalog.ErrNotLeader), errors.Is(err, metalog.ErrNoLeader):
		return node.MetadataUnavailable.Wrap(err, "op", op, "reason", "no metadata leader")
	case errors.Is(err, metalog.ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded):
		return node.MetadataUnavailable.Wrap(err, "op", op, "reason", "the command's outcome is unknown (no quorum, or a leader change)")
	}
	return stream.StreamBackendFailed.Wrap(err, "op", op)
}

// Status reports the node's identity and its metadata log's state.
//
// AppliedIndex is the index of the last command this broker's state
// machine applied: raft's own AppliedIndex may trail a command that has
// already returned, which made "nothing was written" checks race.
func (b *Broker) Status() node.Status {
	_, leader := b.log.Leader()
	st := node.Status{
		NodeID: b.cfg.NodeID, LogState: b.log.State(), Leader: leader,
		AppliedIndex: b.fsm.Applied(), LastIndex: b.log.LastIndex(),
	}
	if d := b.cfg.Disk; d != nil {
		st.StorageFailed, st.DiskFull = d.Failed(), d.Full()
	}
	return st
}

// NodeID returns this broker's id.
func (b *Broker) NodeID() string { return b.cfg.NodeID }

// Snapshot forces a metadata snapshot.
func (b *Broker) Snapshot() error { return b.log.Snapshot() }
