// Package node is what one broker node offers the front ends that serve
// it — the partitioned-log and admin API (broker/httpapi), the Durable
// Streams protocol (broker/dsapi) and the embedded engine — in the
// broker's own types: named streams, their partitions, appends, reads,
// retention, consumer-group offsets and the node's status.
//
// It holds no implementation. broker/core implements Broker on one node;
// the front ends depend on this package only, so they know nothing of the
// metadata log's commands and state (broker/meta, broker/metalog), and the
// cluster's rooms (membership, ownership, replication, routing) can stand
// between a front end and the core without either changing.
package node

import (
	"context"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// Broker is one node's broker as its front ends use it. Every refusal is a
// coded error (errs.Error) naming the values that explain it, and writes
// nothing.
type Broker interface {
	Registry
	Appender
	Reader
	Retention
	Groups

	// Status reports the node's identity and its metadata log's state.
	Status() Status
}

// Registry is the lifecycle of named streams.
type Registry interface {
	// Create creates a named stream, or returns the existing one (created
	// false) unchanged: the caller compares configurations.
	Create(ctx context.Context, name string, o CreateOptions) (e *Entry, created bool, err error)
	// Fork creates name as a fork of o.Source, sharing its records below
	// o.At, or returns the existing entry of name unchanged (created false).
	Fork(ctx context.Context, name string, o ForkOptions) (e *Entry, created bool, err error)
	// Delete removes a named stream: the name is reusable at once.
	Delete(ctx context.Context, name string) error
	// UpdatePolicy changes a stream's policy (partitions may only grow).
	UpdatePolicy(ctx context.Context, name string, p stream.PolicyValue) (*Entry, error)
	// Get returns a named stream; an expired one is StreamNotFound, a
	// deleted one kept for its forks StreamGone.
	Get(name string) (*Entry, error)
	// List returns every live named stream, sorted by name.
	List() []*Entry
	// Partition returns the state of the internal stream with id (the ids
	// an Entry's Partitions hold).
	Partition(id uint64) (PartitionState, bool)
	// TailOf returns a stream's entry and one partition's bounds, read in
	// one view of the state. It does not count as an access.
	TailOf(name string, partition int) (Tail, error)
	// Touch records an access for a sliding TTL (in memory; persisted
	// lazily).
	Touch(name string)
}

// Appender writes records.
type Appender interface {
	// Append validates records against the stream's policy and state,
	// gives them offsets and returns once they are durable and committed.
	// On a refusal the result carries what explains it (the final offset
	// of a closed stream, a producer's current state).
	Append(ctx context.Context, name string, records []stream.RecordValue, o AppendOptions) (AppendResult, error)
	// Admit is Append without the wait for the commit: it returns once the
	// append is queued (wait for it with Pending.Wait), answered (a
	// duplicate) or refused.
	Admit(ctx context.Context, name string, records []stream.RecordValue, o AppendOptions) (Pending, error)
	// Hold makes the next group commit wait briefly until release is
	// called, so that appends admitted one after another share an object.
	Hold() (release func())
}

// Reader reads records and waits for them.
type Reader interface {
	// Read returns up to max committed records of a partition from offset
	// from on, and the partition's bounds; at the end it returns no entry
	// at once (wait with Wake).
	Read(ctx context.Context, name string, partition int, from uint64, max int, o ReadOptions) ([]stream.EntryValue, stream.BoundsValue, error)
	// Wake returns a channel closed by the next commit to any partition of
	// name (or its deletion): take it BEFORE the read that may come back
	// empty.
	Wake(name string) (<-chan struct{}, error)
	// Bounds returns a partition's first retained offset and next offset.
	Bounds(ctx context.Context, name string, partition int) (stream.BoundsValue, error)
	// OffsetAt returns the first offset of a partition appended at or
	// after t (the next offset when there is none).
	OffsetAt(ctx context.Context, name string, partition int, t time.Time) (uint64, error)
}

// Retention drops records.
type Retention interface {
	// Trim makes before the first offset of a partition.
	Trim(ctx context.Context, name string, partition int, before uint64) error
	// Compact drops superseded keyed records and old tombstones of a
	// partition by its CompactAfter policy; survivors keep their offsets.
	Compact(ctx context.Context, name string, partition int) (stream.CompactValue, error)
}

// Groups keeps consumer-group offsets.
type Groups interface {
	// Commit records next as the offset group reads next on a partition.
	Commit(ctx context.Context, name, group string, partition int, next uint64) error
	// Committed returns the offset group committed last on a partition.
	Committed(ctx context.Context, name, group string, partition int) (uint64, error)
}

// Entry is a named stream as the registry holds it.
type Entry struct {
	Name string
	// Partitions holds the internal stream id of every partition, in
	// order: a recreated name has other ids.
	Partitions  []uint64
	ContentType string
	Policy      stream.PolicyValue
	// TTL is a sliding lifetime (0: none); ExpiresAt an absolute one
	// (zero: none).
	TTL       time.Duration
	ExpiresAt time.Time
	// CreatedAt is when the stream was created; LastAccess when it was
	// last appended to or read, as persisted (it may trail the owner's
	// in-memory value by the broker's touch interval).
	CreatedAt  time.Time
	LastAccess time.Time
	// Closed: the stream refuses appends for good; ClosedBy is the
	// producer append that closed it, whose retry is acknowledged.
	Closed   bool
	ClosedBy *ProducerTuple
	// Producers is the idempotent producers' accepted state.
	Producers map[string]Producer
	// LastStreamSeq is the last accepted Stream-Seq.
	LastStreamSeq string
	// ForkOf names the stream this one was forked from ("" when it is not
	// a fork), ForkOffset the source's offset it was forked at and
	// ForkSubOffset what the client asked inside the record there.
	ForkOf        string
	ForkOffset    uint64
	ForkSubOffset int64
}

// PartitionState is one partition's internal stream.
type PartitionState struct {
	ID        uint64
	Partition int
	// Epoch is -1 until the partition is first opened for writing and
	// grows by one at every open; Owner is the node holding it open, and
	// Open whether one does.
	Epoch int64
	Owner string
	Open  bool
	// Start is the first readable offset, End the next one to assign.
	Start, End uint64
	// Bytes is the key+payload bytes held at or above Start, in Ranges
	// runs of records.
	Bytes  int64
	Ranges int
	// LocalBytes is what its ranges take on the brokers' disks (one copy
	// counted), TieredBytes what of them object storage holds: an
	// uploaded segment not evicted yet counts in both.
	LocalBytes, TieredBytes int64
	// Groups maps each consumer group that committed in the partition to
	// the offset it reads next.
	Groups map[string]uint64
}

// Tail is a stream's entry and one partition's bounds, read together.
type Tail struct {
	Entry *Entry
	// Start and End bound the partition's offsets: End is the next one.
	Start, End uint64
}

// Status is a node's identity and its metadata log's state.
type Status struct {
	NodeID string
	// LogState is the metadata log's role on this node: Follower,
	// Candidate, Leader or Shutdown; Leader the leader's id ("" when none
	// is known).
	LogState string
	Leader   string
	// AppliedIndex is the last metadata command this node's state machine
	// applied; LastIndex the last one stored.
	AppliedIndex, LastIndex uint64
	// StorageFailed, when set, is why the broker's storage stopped
	// acknowledging (STORAGE_FAILED): /readyz then reports it unhealthy.
	StorageFailed error
	// DiskFull: appends are refused with STORAGE_FULL for want of space.
	DiskFull bool
}

// Producer is one idempotent producer's accepted state.
type Producer struct {
	Epoch   int64
	LastSeq int64
}

// ProducerTuple identifies one idempotent producer's append.
type ProducerTuple struct {
	ID    string
	Epoch int64
	Seq   int64
}

// GroupOffset is a consumer-group offset committed atomically with an
// append: Next is what Group reads next on a partition of a stream.
type GroupOffset struct {
	// Stream and Partition name the partition; Stream "" is the append's
	// own partition.
	Stream    string
	Partition int
	Group     string
	Next      uint64
}

// CreateOptions are a named stream's configuration.
type CreateOptions struct {
	ContentType string
	Policy      stream.PolicyValue
	TTL         time.Duration
	ExpiresAt   time.Time
	Closed      bool
	// Initial, when set, are the stream's first records (partition 0, from
	// offset 0): they land with the create, or not at all.
	Initial []stream.RecordValue
}

// ForkOptions describe a fork.
type ForkOptions struct {
	// Source names the stream forked; it must have one partition.
	Source string
	// At is the offset of Source the fork starts at: it shares Source's
	// records below At.
	At uint64
	// SubOffset is what the client asked inside the record at At, kept for
	// comparing configurations; Initial carries its effect.
	SubOffset   int64
	ContentType string
	// TTL and ExpiresAt: neither set inherits Source's.
	TTL       time.Duration
	ExpiresAt time.Time
	Closed    bool
	// Initial are the records the fork starts with at At, landing with the
	// fork or not at all.
	Initial []stream.RecordValue
}

// AppendOptions carry what an append asks beyond its records.
type AppendOptions struct {
	// Partition is the partition to append to, or -1 to place the batch by
	// its keys (stream.PartitionOf) or round-robin when it has none.
	Partition int
	// Producer makes the append idempotent: a repeat of an accepted
	// sequence is acknowledged without writing.
	Producer *ProducerTuple
	// StreamSeq, when set, must be byte-wise above the last one accepted.
	StreamSeq string
	// Close closes the stream for good with this append (records may be
	// empty: a close-only append).
	Close bool
	// Group, when set, commits a consumer-group offset atomically with the
	// records: both land or neither does.
	Group *GroupOffset
	// NoRoomWait makes an append that would wait for room under MaxBytes
	// return ErrWouldWait at once, having written nothing, instead of
	// waiting up to BlockTimeout.
	NoRoomWait bool
	// NoOpen makes Admit return ErrNotOpen at once, having admitted
	// nothing, when the append's partition must first be opened (a write
	// of the metadata log), so that a caller admitting several appends can
	// admit those concurrently.
	NoOpen bool
}

// AppendResult says where an append landed.
type AppendResult struct {
	Partition int
	// First and Last are the batch's offsets; Next is the partition's next
	// offset after it. A close-only append has First == Next and Last
	// unset.
	First, Last, Next uint64
	// Duplicate: an idempotent repeat, acknowledged without writing.
	Duplicate bool
	// Producer is the producer's highest accepted state after the append.
	Producer Producer
	// Closed: the stream is closed after the append.
	Closed bool
}

// Pending is an append Admit accepted: queued for the group commit, or
// answered already (a duplicate).
type Pending interface {
	// Wait waits for the append's commit and returns where it landed, as
	// Append does; call it once. When ctx ends first the append may still
	// commit.
	Wait(ctx context.Context) (AppendResult, error)
}

// Answered is a Pending whose answer is known at admission.
type Answered AppendResult

// Wait returns the answer.
func (a Answered) Wait(context.Context) (AppendResult, error) { return AppendResult(a), nil }

// ReadOptions bound a read beyond its record count.
type ReadOptions struct {
	// MaxBytes stops the read once this many key+payload bytes are
	// gathered (at least one record is always returned). Zero: no bound.
	MaxBytes int64
}
