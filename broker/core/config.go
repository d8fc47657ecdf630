package core

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/picomq/picomq/broker/diskio"
	"github.com/picomq/picomq/broker/diskspace"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/objstore"
)

// Config configures a broker. DataDir is required.
//
// Every other field may be left zero: zero takes the default the field
// names. A negative value turns the behaviour off where the field says so
// (SyncLinger, InlineBytes, PageCacheBytes) and is refused everywhere else;
// so is a value above a field's maximum. Open refuses a Config it cannot
// honour with an error naming the field and its value; it never clamps one.
type Config struct {
	// DataDir holds the metadata log (meta/) and the objects (objects/).
	DataDir string
	// NodeID names this broker in the metadata log and as stream owner
	// (default "broker-0").
	NodeID string
	// FlushLinger is how long the flusher waits for more appends before it
	// writes a batch (default 0: as soon as the previous flush is done;
	// batches still grow with load, because appends arriving during a flush
	// wait for the next one).
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
	// Clock dates records and measures retention, TTL and compaction ages
	// (default time.Now).
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
	// merge rewrites them into a segment (default 256). Each merge is an
	// object file (copied to R-1 peers in a cluster) and a metadata
	// command: at 32, a cluster under 1 KiB appends spent a third of its
	// CPU merging; the ranges wait meanwhile as held objects, read from
	// memory (or their spilled files) and their journals.
	MergeMinRanges int
	// MergeRangeBytes is the size below which a range counts as small and
	// is merged (default 64 KiB). Larger ranges already cost little
	// metadata and few reads per byte, so rewriting them would only double
	// the bytes written.
	MergeRangeBytes int64
	// InlineBytes is the largest group-commit object whose frames travel
	// in the journal (on the log path: in its commit command), so that one
	// fsync makes an append durable instead of two in series; a larger one
	// is first written and synced as a file of its own (journal.go,
	// decision 1b). Default DefaultInlineBytes; negative: never; at most
	// MaxInlineBytes. See inline.go.
	InlineBytes int64
	// InlineLogBytes is how many bytes of such frames the metadata log may
	// gather beyond its last snapshot before the broker takes one (default
	// 64 MiB): it bounds the log's disk use and the replay at start.
	InlineLogBytes int64
	// WALSegmentBytes is the size of one metadata-log segment file
	// (default metalog's 16 MiB): a small volume needs smaller ones, as the
	// log keeps a few and a zeroed spare.
	WALSegmentBytes int
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
	// LogCommits commits every group commit through the metadata log, as
	// before the journal: the previous data path. A lone broker commits in
	// its journal and checkpoints into the log (see journal.go); a cluster
	// member does so on its ensemble when Peers is set (ensembles.go), and
	// through the log otherwise.
	LogCommits bool
	// Peers reaches the other members' journals: a cluster member's
	// appends commit on its ensembles (ensembles.go). Nil: a cluster
	// member commits through the log.
	Peers Peers
	// AckTimeout bounds how long an object waits for its write quorum
	// before its appends are answered APPEND_OUTCOME_UNKNOWN, and a
	// recovery's fences (default DefaultAckTimeout).
	AckTimeout time.Duration
	// CheckpointInterval is how often the journal's acknowledged appends
	// are checkpointed into the metadata log (default 200 ms).
	CheckpointInterval time.Duration
	// CheckpointBytes checkpoints at once when this many record bytes are
	// acknowledged and not checkpointed (default 16 MiB).
	CheckpointBytes int64
	// JournalSegmentBytes is the size past which the journal begins a new
	// segment (default DefaultJournalSegmentBytes). A segment is deleted
	// only once it is no longer written to and all of it is checkpointed,
	// so a small volume wants small ones.
	JournalSegmentBytes int64
	// JournalRetainBytes is how much journal is kept before a segment
	// whose objects still hold ranges has them written to files of their
	// own so that it can go (default 8 segments): within it, merges
	// usually free them first.
	JournalRetainBytes int64
	// MaxUncheckpointedBytes bounds them: while the log takes no
	// checkpoint, appends past it are refused, METADATA_UNAVAILABLE
	// (default 256 MiB).
	MaxUncheckpointedBytes int64
	// Ownership decides whether this node may open an internal stream for
	// writing (default SingleNode: always).
	Ownership Ownership
	// Placement wraps the store the broker writes object files to, so that
	// a cluster can copy each object to its replicas before the commit that
	// references it (default: this node's directory only).
	Placement func(local ObjectStore) ObjectStore
	// Fetcher reads frames of objects this node has no file of (default
	// none: on one node every committed object is local).
	Fetcher Fetcher
	// Tier, when set, moves sealed segments to object storage and reads
	// them back from it (tier.go).
	Tier *TierConfig
	// Cluster, when set, makes this broker a member of a cluster: its
	// metadata log speaks over the peer network and forwards commands to
	// the leader (see ClusterConfig). Nil: a lone broker, its own sole
	// voter.
	Cluster *ClusterConfig
	// Disk, when set, watches the data volume: appends and creates are
	// refused while it is full (STORAGE_FULL), and every one once a store
	// failed to make a write durable (STORAGE_FAILED), which it is told.
	Disk *diskspace.Monitor
	// FS is the storage seam the objects and the metadata log's segments
	// are written through (default diskio.OS); tests inject faults.
	FS diskio.FS
	// Logger receives operational logs (default: discard).
	Logger *slog.Logger
	// Metrics, when set, receives the broker's measurements.
	Metrics *Metrics
	// RaftLog receives the metadata log's own logs (default: discard).
	RaftLog io.Writer

	// syncObjects makes objects' files durable before a snapshot lets the
	// log drop their entries (objstore.SyncObjects; tests replace it).
	syncObjects func(dir string, ids []uint64) error
}

const (
	// DefaultSyncLinger is Config.SyncLinger unless set.
	DefaultSyncLinger = 500 * time.Microsecond
	// DefaultJournalSegmentBytes is Config.JournalSegmentBytes unless set.
	DefaultJournalSegmentBytes = 16 << 20
	// DefaultInlineBytes is Config.InlineBytes unless set.
	DefaultInlineBytes = 64 << 10
	// DefaultPageCacheBytes is Config.PageCacheBytes unless set.
	DefaultPageCacheBytes = objstore.DefaultCachedBytes
	// MaxInlineBytes bounds Config.InlineBytes: every such object's bytes
	// travel in a log entry, are held in memory until merged or spilled,
	// and stay in the log until a snapshot.
	MaxInlineBytes = 1 << 20
)

// ClusterConfig is how a cluster member's metadata log is reached and
// where its object ids start.
type ClusterConfig struct {
	// MemberID is this member's id in the log's configuration (its node and
	// incarnation); Config.NodeID stays its node name, the owner it records.
	MemberID string
	// Network and Forward: see metalog.Config.
	Network *metalog.Network
	Forward metalog.Forwarder
	// Bootstrap seeds a brand-new log with this member as its only voter:
	// the first member of a new cluster, once.
	Bootstrap bool
	// Number is the member's number (its object ids start at
	// Number<<meta.ObjectIDBits); 0 before the member was ever recorded
	// (a lone broker's directory adopted into a cluster).
	Number int
	// HeartbeatTimeout and ElectionTimeout: see metalog.Config (zero:
	// metalog's defaults).
	HeartbeatTimeout, ElectionTimeout time.Duration
	// Recover, when set, opens the log with this configuration instead of
	// its own: the explicit recovery of a quorum lost for good (see
	// metalog.Config.Recover).
	Recover []metalog.Server
}

// check refuses a configuration Open cannot honour, naming the field.
func (c Config) check() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("core: Config.%s = %v: %s", field, v, want)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"FlushLinger", c.FlushLinger}, {"MaintenanceInterval", c.MaintenanceInterval}, {"TouchInterval", c.TouchInterval},
		{"GarbageGrace", c.GarbageGrace}, {"OrphanGrace", c.OrphanGrace}, {"MaxHold", c.MaxHold}, {"HoldFor", c.HoldFor},
		{"CheckpointInterval", c.CheckpointInterval}, {"AckTimeout", c.AckTimeout},
	} {
		if d.v < 0 {
			return bad(d.field, d.v, "must not be negative (zero takes the default)")
		}
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"MaxBatchBytes", c.MaxBatchBytes}, {"CommitsInFlight", int64(c.CommitsInFlight)}, {"MergeMinRanges", int64(c.MergeMinRanges)},
		{"MergeRangeBytes", c.MergeRangeBytes}, {"JournalRetainBytes", c.JournalRetainBytes}, {"InlineLogBytes", c.InlineLogBytes}, {"FrameBytes", c.FrameBytes},
		{"CheckpointBytes", c.CheckpointBytes}, {"MaxUncheckpointedBytes", c.MaxUncheckpointedBytes},
		{"JournalSegmentBytes", c.JournalSegmentBytes},
	} {
		if n.v < 0 {
			return bad(n.field, n.v, "must not be negative (zero takes the default)")
		}
	}
	if cl := c.Cluster; cl != nil {
		switch {
		case cl.MemberID == "":
			return bad("Cluster.MemberID", `""`, "a cluster member needs its id")
		case cl.Network == nil:
			return bad("Cluster.Network", "nil", "a cluster member needs its peer network")
		case cl.Number < 0 || cl.Number > meta.MaxMembers:
			return bad("Cluster.Number", cl.Number, fmt.Sprintf("want 0 to %d", meta.MaxMembers))
		}
	}
	if c.InlineBytes > MaxInlineBytes {
		return bad("InlineBytes", c.InlineBytes, fmt.Sprintf("at most MaxInlineBytes (%d); negative turns inline commits off", MaxInlineBytes))
	}
	return nil
}

// withDefaults returns c with its zero fields set.
func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		c.NodeID = "broker-0"
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 8 << 20
	}
	if c.SyncLinger == 0 {
		c.SyncLinger = DefaultSyncLinger
	}
	if c.CommitsInFlight == 0 {
		c.CommitsInFlight = 4
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = time.Second
	}
	if c.TouchInterval == 0 {
		c.TouchInterval = 10 * time.Second
	}
	if c.MaxHold == 0 {
		c.MaxHold = time.Millisecond
	}
	if c.GarbageGrace == 0 {
		c.GarbageGrace = 2 * time.Second
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = 10 * time.Minute
	}
	if c.MergeMinRanges == 0 {
		c.MergeMinRanges = 256
	}
	if c.MergeRangeBytes == 0 {
		c.MergeRangeBytes = 64 << 10
	}
	if c.InlineBytes == 0 {
		c.InlineBytes = DefaultInlineBytes
	}
	if c.HoldFor == 0 {
		c.HoldFor = 5 * time.Second
	}
	if c.InlineLogBytes == 0 {
		c.InlineLogBytes = 64 << 20
	}
	if c.FrameBytes == 0 {
		c.FrameBytes = 1 << 20
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 200 * time.Millisecond
	}
	if c.CheckpointBytes == 0 {
		c.CheckpointBytes = 16 << 20
	}
	if c.MaxUncheckpointedBytes == 0 {
		c.MaxUncheckpointedBytes = 256 << 20
	}
	if c.JournalSegmentBytes == 0 {
		c.JournalSegmentBytes = DefaultJournalSegmentBytes
	}
	if c.JournalRetainBytes == 0 {
		c.JournalRetainBytes = 8 * c.JournalSegmentBytes
	}
	if c.PageCacheBytes == 0 {
		c.PageCacheBytes = DefaultPageCacheBytes
	}
	if c.Ownership == nil {
		c.Ownership = SingleNode{}
	}
	if c.Placement == nil {
		c.Placement = func(local ObjectStore) ObjectStore { return local }
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
	if c.syncObjects == nil {
		c.syncObjects = objstore.SyncObjects
	}
	return c
}
