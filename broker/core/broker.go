// Package core is the PicoMQ broker on one node: named streams over internal
// streams, appends batched by one group-commit flusher into immutable
// objects, committed through the metadata log, and read back from the
// objects the metadata names.
//
// It knows nothing of HTTP or Kubernetes: the HTTP layers, the embedded
// engine and the cluster code drive it through Broker's methods.
package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// Config configures a broker. DataDir is required.
type Config struct {
	// DataDir holds the metadata log (meta/) and the objects (objects/).
	DataDir string
	// NodeID names this broker in the metadata log and as stream owner.
	NodeID string
	// FlushLinger is how long the flusher waits for more appends before it
	// writes a batch. Zero writes as soon as the previous flush is done;
	// batches still grow with load, because appends arriving during a flush
	// wait for the next one.
	FlushLinger time.Duration
	// MaxBatchBytes bounds one group-commit object (default 8 MiB).
	MaxBatchBytes int64
	// SyncLinger is how long a group commit whose object will have its own
	// fdatasync (above InlineBytes) waits for more appends, while several
	// are queued, until SyncLingerBytes are (default 500µs; negative:
	// never). One fdatasync then covers more appends: measured here with
	// eight writers of 100 KiB batches, ~4 instead of ~2.5 appends per
	// object and ~1.2x the throughput. Small appends (inline) never wait.
	SyncLinger time.Duration
	// CommitsInFlight bounds the group-commit commands proposed to the
	// metadata log and not yet applied (default 4): more lets several
	// small objects commit in one log write, fewer makes objects larger.
	// (Measured here under load: 4 gave ~1.3-1.5x the appends/s of 1.)
	CommitsInFlight int
	// Clock dates records and measures retention, TTL and compaction ages.
	Clock func() time.Time
	// MaintenanceInterval is how often retention, merging, expiry, touch
	// persistence and garbage collection run (default 1s).
	MaintenanceInterval time.Duration
	// TouchInterval bounds how stale a persisted last access may be
	// (default 10s): reads never write the metadata log themselves.
	TouchInterval time.Duration
	// GarbageGrace is how long an object's file is kept after no range
	// references it any more (default 2s), so that a read which looked up
	// its ranges just before a trim, merge or delete usually finishes on
	// them; one that is slower looks its ranges up again. Until it is
	// collected, a file cannot be recycled for a new object.
	GarbageGrace time.Duration
	// OrphanGrace is how old an object nobody committed must be before it is
	// deleted while running (default 10 min); at start every orphan goes.
	OrphanGrace time.Duration
	// MaxHold bounds how long a group commit waits for a Hold to be
	// released (default 1 ms): a hold gathers one request's appends into
	// one object, and must never stall the others for long.
	MaxHold time.Duration
	// MergeMinRanges is how many small ranges a partition gathers before the
	// merge rewrites them into a segment (default 32).
	MergeMinRanges int
	// MergeRangeBytes is the size below which a range counts as small and
	// is merged (default 64 KiB). Larger ranges already cost little
	// metadata and few reads per byte, so rewriting them would only double
	// the bytes written.
	MergeRangeBytes int64
	// InlineBytes is the largest group-commit object whose frames travel in
	// its commit command, so that one fsync (the metadata log's) makes an
	// append durable instead of two in series (default DefaultInlineBytes;
	// negative: never; at most MaxInlineBytes). See inline.go.
	InlineBytes int64
	// InlineLogBytes is how many bytes of such frames the metadata log may
	// gather beyond its last snapshot before the broker takes one (default
	// 64 MiB): it bounds the log's disk use and the replay at start.
	InlineLogBytes int64
	// HoldFor is how long an object committed inline is held in memory
	// before it is written to a file, unless the merge frees it first
	// (default 5 s; see inline.go).
	HoldFor time.Duration
	// FrameBytes is the frame size of merged segments (default 1 MiB): the
	// unit a read fetches and retention drops.
	FrameBytes int64
	// PageCacheBytes is how many bytes of the objects it wrote last the
	// broker leaves in the kernel's page cache; older objects' pages are
	// dropped so that new writes reuse them (default 256 MiB; negative:
	// never drop; see objstore's cached.go).
	PageCacheBytes int64
	// Logger receives operational logs (default: discard).
	Logger *slog.Logger
	// Metrics, when set, receives the broker's measurements.
	Metrics *Metrics
	// RaftLog receives the metadata log's own logs (default: discard).
	RaftLog io.Writer
}

const (
	// DefaultSyncLinger is Config.SyncLinger unless set.
	DefaultSyncLinger = 500 * time.Microsecond
	// DefaultInlineBytes is Config.InlineBytes unless set.
	DefaultInlineBytes = 64 << 10
	// DefaultPageCacheBytes is Config.PageCacheBytes unless set.
	DefaultPageCacheBytes = objstore.DefaultCachedBytes
	// MaxInlineBytes bounds Config.InlineBytes: every such object's bytes
	// travel in a log entry, are held in memory until merged or spilled,
	// and stay in the log until a snapshot.
	MaxInlineBytes = 1 << 20
)

func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		c.NodeID = "broker-0"
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 8 << 20
	}
	if c.SyncLinger == 0 {
		c.SyncLinger = DefaultSyncLinger
	}
	if c.CommitsInFlight <= 0 {
		c.CommitsInFlight = 4
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.MaintenanceInterval <= 0 {
		c.MaintenanceInterval = time.Second
	}
	if c.TouchInterval <= 0 {
		c.TouchInterval = 10 * time.Second
	}
	if c.MaxHold <= 0 {
		c.MaxHold = time.Millisecond
	}
	if c.GarbageGrace <= 0 {
		c.GarbageGrace = 2 * time.Second
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = 10 * time.Minute
	}
	if c.MergeMinRanges <= 0 {
		c.MergeMinRanges = 32
	}
	if c.MergeRangeBytes <= 0 {
		c.MergeRangeBytes = 64 << 10
	}
	if c.InlineBytes == 0 {
		c.InlineBytes = DefaultInlineBytes
	}
	c.InlineBytes = min(c.InlineBytes, MaxInlineBytes)
	if c.HoldFor <= 0 {
		c.HoldFor = 5 * time.Second
	}
	if c.InlineLogBytes <= 0 {
		c.InlineLogBytes = 64 << 20
	}
	if c.FrameBytes <= 0 {
		c.FrameBytes = 1 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.RaftLog == nil {
		c.RaftLog = io.Discard
	}
	return c
}

// Aborted answers an append whose provisional offsets were computed on top
// of an append the metadata log refused: nothing of it was committed, and it
// may be retried.
var Aborted = errs.Static(0x00_10_02_01, "APPEND_ABORTED",
	"The append was aborted and may be retried",
	"broker/core: an earlier append of the same stream was refused, so this one, built on its offsets, was rolled back; nothing was written",
	503, 75)

// Corrupt answers a read of a committed range whose object fails its
// checksum: the broker never returns bytes it cannot vouch for.
var Corrupt = errs.Static(0x00_10_02_02, "OBJECT_CORRUPT",
	"Stored records failed their checksum",
	"broker/core: a committed object's frame failed its CRC or is short; the fields name the object and position; the records are not served",
	500, 74)

// Broker is one node's broker.
type Broker struct {
	cfg  Config
	log  *metalog.Log
	fsm  *meta.FSM
	objs *objstore.Store

	mu     sync.Mutex
	named  map[string]*named
	closed bool

	flush  *flusher
	frames *frameCache
	inline *inlineObjects

	gcMu         sync.Mutex
	garbageSince map[uint64]time.Time // garbage objects waiting out GarbageGrace

	stop chan struct{}
	wg   sync.WaitGroup
}

// Open prepares the data directory, replays the metadata log, removes the
// objects nobody committed, and starts the flusher and the maintenance loop.
func Open(cfg Config) (*Broker, error) {
	cfg = cfg.withDefaults()
	if cfg.DataDir == "" {
		return nil, stream.StreamDirectoryUnusable.With("path", "", "reason", "no data directory given")
	}
	if err := objstore.PrepareDir(cfg.DataDir); err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:    cfg,
		fsm:    meta.NewFSM(),
		named:  map[string]*named{},
		frames: newFrameCache(64 << 20),
		inline: newInlineObjects(objectsDir(cfg.DataDir)),
		stop:   make(chan struct{}),
	}
	// Set before the log replays: a replayed inline commit writes its object.
	b.fsm.SetHooks(meta.Hooks{Applied: b.applied, Snapshot: b.snapshotting})
	metaDir := filepath.Join(cfg.DataDir, "meta")
	if err := objstore.PrepareDir(metaDir); err != nil {
		return nil, err
	}
	l, err := metalog.Open(metalog.Config{
		Dir: metaDir, NodeID: cfg.NodeID, Bootstrap: true, LogOutput: cfg.RaftLog,
		// Entries may carry objects' frames (inline commits): keep few past
		// a snapshot. A lone voter has no follower to catch up from them.
		TrailingLogs: 1024,
	}, b.fsm)
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "metalog.open")
	}
	b.log = l
	var maxObj uint64
	b.fsm.View(func(s *meta.State) { maxObj = s.MaxObjectID })
	objs, err := objstore.Open(objectsDir(cfg.DataDir), objstore.Options{MinNextID: maxObj + 1, CachedBytes: cfg.PageCacheBytes})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	b.objs = objs
	var restored error
	b.fsm.View(func(s *meta.State) { restored = b.inline.restore(objs, s) })
	if restored != nil {
		_ = objs.Close()
		_ = l.Close()
		return nil, restored
	}
	// Nothing is in flight yet: every object the log never committed is a
	// torn or abandoned write, and goes now.
	if err := b.collectGarbage(context.Background(), 0, true); err != nil {
		cfg.Logger.Warn("start-up garbage collection failed", "err", err)
	}
	b.flush = newFlusher(b)
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.flush.run() }()
	go func() { defer b.wg.Done(); b.maintainLoop() }()
	cfg.Logger.Info("broker open", "dataDir", cfg.DataDir, "node", cfg.NodeID, "streams", len(b.fsm.State().Names))
	return b, nil
}

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
	nameds := make([]*named, 0, len(b.named))
	for _, n := range b.named {
		nameds = append(nameds, n)
	}
	b.mu.Unlock()

	b.flush.close() // drains: every pending append is committed or answered
	close(b.stop)
	b.wg.Wait()
	// One command closes every stream this node opened, however many, so
	// their next owner opens them at the next epoch without waiting.
	var parts []meta.Close
	for _, n := range nameds {
		parts = append(parts, n.openParts()...)
	}
	if len(parts) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := b.apply(ctx, &meta.Command{Op: meta.OpCloseMany, CloseMany: &meta.CloseMany{Streams: parts}}); err != nil {
			b.cfg.Logger.Warn("closing the streams this broker owns failed; their next owner reopens them anyway", "streams", len(parts), "err", err)
		}
		cancel()
	}
	err := b.log.Close()
	if cerr := b.objs.Close(); err == nil {
		err = cerr
	}
	return err
}

func (b *Broker) now() time.Time { return b.cfg.Clock() }

// apply proposes a command and returns its result, turning a refusal into
// an error.
func (b *Broker) apply(ctx context.Context, c *meta.Command) (any, error) {
	raw, err := meta.Encode(c)
	if err != nil {
		return nil, meta.BadCommand.Wrap(err, "op", string(c.Op))
	}
	start := time.Now()
	res, err := b.log.Apply(ctx, raw)
	b.cfg.Metrics.observeCommit(time.Since(start))
	if err != nil {
		var coded *errs.Error
		if errors.As(err, &coded) {
			return nil, err
		}
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "metalog.apply."+string(c.Op))
	}
	return res, nil
}

// CreateOptions are a named stream's configuration.
type CreateOptions struct {
	ContentType string
	Policy      stream.PolicyValue
	TTL         time.Duration
	ExpiresAt   time.Time
	Closed      bool
	// Initial, when set, are the stream's first records (partition 0, from
	// offset 0): written to an object of their own first, they land with
	// the create in one metadata command, or not at all.
	Initial []stream.RecordValue
}

// Create creates a named stream, or returns the existing one (created false)
// unchanged: the caller compares configurations.
func (b *Broker) Create(ctx context.Context, name string, o CreateOptions) (*meta.Entry, bool, error) {
	if err := ValidateName(name); err != nil {
		return nil, false, err
	}
	if err := o.Policy.Validate(); err != nil {
		return nil, false, err
	}
	if e, ok, err := b.existing(ctx, name); ok || err != nil {
		return e, false, err
	}
	c := &meta.Create{Name: name, ContentType: o.ContentType, Policy: o.Policy, TTL: int64(o.TTL), Closed: o.Closed, Now: b.now().UnixNano()}
	if !o.ExpiresAt.IsZero() {
		c.ExpiresAt = o.ExpiresAt.UnixNano()
	}
	if len(o.Initial) > 0 {
		if _, err := stream.CheckBatch(stream.PolicyValue{MaxRecordBytes: o.Policy.MaxRecordBytes}, o.Initial); err != nil {
			return nil, false, err
		}
		obj, size, rs, err := b.writeInitial(0, o.Initial)
		if err != nil {
			return nil, false, err
		}
		c.Object, c.Size, c.Initial = obj, size, rs
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpCreate, Create: c})
	if err != nil {
		return nil, false, err
	}
	return createResult(res, "create")
}

// createResult reads a create's or a fork's answer: an entry that lost a
// race to a soft-deleted one is gone.
func createResult(res any, op string) (*meta.Entry, bool, error) {
	switch r := res.(type) {
	case *meta.CreateResult:
		if r.Entry.Deleted {
			return nil, false, meta.StreamGone.With("name", r.Entry.Name)
		}
		return r.Entry, r.Created, nil
	case error:
		return nil, false, r
	}
	return nil, false, meta.BadCommand.With("op", op, "reason", fmt.Sprintf("result %T", res))
}

// existing returns the entry a create of name must answer with instead of
// creating: a live one (ok), or StreamGone for a soft-deleted one. An
// expired one is deleted first, so that the name is created anew.
func (b *Broker) existing(ctx context.Context, name string) (*meta.Entry, bool, error) {
	e, ok := b.fsm.Entry(name)
	if !ok {
		return nil, false, nil
	}
	if e.Deleted {
		return nil, false, meta.StreamGone.With("name", name)
	}
	if !b.expired(e, b.now().UnixNano()) {
		return e, true, nil
	}
	if err := b.deleteEntry(ctx, e); err != nil && !errors.Is(err, meta.StreamNotFound) {
		return nil, false, err
	}
	if e, ok := b.fsm.Entry(name); ok && e.Deleted {
		return nil, false, meta.StreamGone.With("name", name) // expired, but forks of it live
	}
	return nil, false, nil
}

// Delete removes a named stream: the name is reusable at once, its data is
// collected later.
func (b *Broker) Delete(ctx context.Context, name string) error {
	e, ok := b.lookup(name)
	if !ok {
		return meta.StreamNotFound.With("name", name)
	}
	return b.deleteEntry(ctx, e)
}

func (b *Broker) deleteEntry(ctx context.Context, e *meta.Entry) error {
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpDelete, Delete: &meta.Delete{Name: e.Name, IfStreams: e.Streams}})
	if err != nil {
		return err
	}
	b.forget(e.Name)
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}

// UpdatePolicy changes a stream's policy (partitions may only grow).
func (b *Broker) UpdatePolicy(ctx context.Context, name string, p stream.PolicyValue) (*meta.Entry, error) {
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpUpdatePolicy, UpdatePolicy: &meta.UpdatePolicy{Name: name, Policy: p}})
	if err != nil {
		return nil, err
	}
	switch r := res.(type) {
	case *meta.Entry:
		return r, nil
	case error:
		return nil, r
	}
	return nil, meta.BadCommand.With("op", "updatePolicy")
}

// Get returns a named stream's entry; an expired one is not found, a
// soft-deleted one (kept for its forks) is StreamGone.
func (b *Broker) Get(name string) (*meta.Entry, error) {
	e, ok := b.lookup(name)
	if !ok {
		return nil, meta.StreamNotFound.With("name", name)
	}
	if e.Deleted {
		return nil, meta.StreamGone.With("name", name)
	}
	return e, nil
}

// List returns every live named stream's entry, sorted by name.
func (b *Broker) List() []*meta.Entry {
	var out []*meta.Entry
	now := b.now().UnixNano()
	views := b.loadedViews()
	b.fsm.View(func(s *meta.State) {
		for name, e := range s.Names {
			if !e.Deleted && !lifetimeOver(views[name], e.TTL, e.ExpiresAt, e.LastAccess, now) {
				out = append(out, e.Clone())
			}
		}
	})
	sortEntries(out)
	return out
}

// Internal returns an internal stream's state (status reporting).
func (b *Broker) Internal(id uint64) (*meta.Internal, bool) { return b.fsm.Internal(id) }

// LogState reports the metadata log's role and indexes.
//
// applied is the index of the last command this broker's state machine
// applied: raft's own AppliedIndex may trail a command that has already
// returned, which made "nothing was written" checks race.
func (b *Broker) LogState() (state, leader string, applied, last uint64) {
	_, id := b.log.Leader()
	return b.log.State(), id, b.fsm.Applied(), b.log.LastIndex()
}

// NodeID returns this broker's id.
func (b *Broker) NodeID() string { return b.cfg.NodeID }

// Snapshot forces a metadata snapshot.
func (b *Broker) Snapshot() error { return b.log.Snapshot() }

// lookup returns the entry of name: not found when absent or expired. A
// soft-deleted entry is returned: callers refuse it with StreamGone.
func (b *Broker) lookup(name string) (*meta.Entry, bool) {
	e, ok := b.fsm.Entry(name)
	if !ok {
		return nil, false
	}
	if b.expired(e, b.now().UnixNano()) {
		return nil, false
	}
	return e, true
}
