package stream

import (
	"context"
	"time"
)

// Offset is a record's position in its partition: assigned by the engine at
// Stream.Append, consecutive within a partition from zero, and never reused —
// a trimmed offset stays trimmed and the next one keeps counting. A
// Compactor may leave holes between the offsets a partition still holds; it
// never renumbers them.
type Offset uint64

// RecordValue is what a producer appends: a key that places it, and the bytes
// it carries.
type RecordValue struct {
	// Key places the record: records of one key go to one partition
	// ([PartitionOf]) and are read in the order they were appended. It may
	// be empty, for a record whose order relative to others does not matter.
	Key []byte
	// Payload is the record's bytes. It may be empty; under a key, an empty
	// payload is a tombstone, the key's deletion for a [Compactor].
	Payload []byte
}

// EntryValue is one record as a partition keeps it: where it is, when it
// arrived, and what it holds.
type EntryValue struct {
	// AppendedAt is the engine's clock when the batch holding the record was
	// appended; every record of one batch carries the same instant. It is
	// what [Seeker.OffsetAt] and retention by age read.
	AppendedAt time.Time
	// Record is the record as it was appended.
	Record RecordValue
	// Partition is the partition the record was appended to.
	Partition int
	// Offset is the record's position in its partition, unique and never reused.
	Offset Offset
}

// AppendValue is where Stream.Append put a batch: its partition and the
// offsets of its first and last records, the batch's records holding every
// offset between them in order.
type AppendValue struct {
	// Partition is the partition the whole batch was appended to.
	Partition int
	// First is the offset of the batch's first record.
	First Offset
	// Last is the offset of the batch's last record.
	Last Offset
}

// BoundsValue is a partition's retained range: records from First up to Next
// excluded. The partition holds none when First equals Next.
type BoundsValue struct {
	// First is the lowest offset still readable. Retention and Trim raise
	// it, compaction never moves it; nothing lowers it.
	First Offset
	// Next is the offset the partition's next record will take.
	Next Offset
}

// CompactValue is what one Compactor.Compact did to a partition: the records
// it looked at, those it kept and those it dropped; Kept plus Dropped is
// Scanned.
type CompactValue struct {
	// Scanned is how many retained records were at least
	// [PolicyValue.CompactAfter] old, the only ones a compaction may drop.
	Scanned int64
	// Kept is how many of them survived.
	Kept int64
	// Dropped is how many of them were removed: superseded by a later
	// record of their key, or a tombstone past its second window.
	Dropped int64
}

// Stream is one named, partitioned log: producers append batches of records to
// it, and readers read each partition from an offset of their own choosing.
// Implementations MUST be safe for concurrent use by multiple goroutines AND,
// where the implementation is durable, by every process that opens the same
// storage.
//
// IFACE-PLUGIN: the concrete engines stay unexported behind their
// constructors in internal/service/data/stream.
//
// The interface is FROZEN at these four methods. A published alias makes it
// structural for every downstream implementation, and a fifth method would
// break each one at compile time with no deprecation window (ADR 0039). A new
// capability arrives as a sibling reached by type assertion — Waker, Seeker,
// Trimmer, Compactor and Committer are the ones that ship.
//
// # Why the READER owns its offset
//
// Because a stream has many readers and each reads at its own pace: the
// record is not consumed by being read, so nothing about a read can live in
// the record. A reader that wants its position to survive it keeps it through
// Committer; a reader that does not — a replay, an audit, a backfill — just
// reads from wherever it likes.
type Stream interface {
	// Append writes records to one partition as one batch and returns where
	// they landed.
	//
	// The partition is the records' keys': [PartitionOf] of the first keyed
	// record, every other keyed record required to hash to the same partition
	// ([PartitionsMixed] otherwise, nothing written), and an unkeyed record
	// following the batch. A batch with no key at all goes to the partitions in
	// turn. The records take consecutive offsets in their order.
	//
	// When it returns nil, a durable implementation has flushed the whole batch
	// to its device under one sync: a crash one instruction later loses none of
	// it, and a crash before loses all of it, never a part. An implementation
	// that joins the transaction ctx carries (ADR 0151) has instead made the
	// batch part of that transaction.
	//
	// An empty batch is [InvalidBatchSize]; a record whose key and payload
	// together exceed [PolicyValue.MaxRecordBytes] is [RecordTooLarge], the
	// whole batch refused. A stream holding [PolicyValue.MaxBytes] waits up to
	// [PolicyValue.BlockTimeout] for retention to make room, then refuses with
	// [StreamFull]; ctx ends the wait earlier with its own cause.
	Append(ctx context.Context, records []RecordValue) (AppendValue, error)
	// Read returns up to max entries of partition, from offset from on, in
	// offset order. It does NOT block waiting for records: a read at the
	// partition's next offset yields an empty slice and a nil error, and
	// waiting is the caller's ([Waker] tells it when to look again). The
	// offsets a [Compactor] emptied are skipped: the entries carry their own
	// offsets, which need not be consecutive.
	//
	// from below the partition's first retained offset is [OffsetTrimmed] —
	// the records are gone, and silently starting later would hide the gap; one
	// past the next offset is [OffsetAhead]. A partition outside
	// [0, Partitions()) is [UnknownPartition], and a non-positive max is
	// [InvalidBatchSize].
	Read(ctx context.Context, partition int, from Offset, max int) ([]EntryValue, error)
	// Bounds returns the first offset partition still retains and the next one
	// it will assign. A partition outside [0, Partitions()) is
	// [UnknownPartition].
	Bounds(ctx context.Context, partition int) (BoundsValue, error)
	// Partitions returns how many partitions the stream has, at least one. It
	// never changes for the life of a stream: a key's partition is its hash
	// modulo this number, and changing it would move every key.
	Partitions() int
}

// Waker lets an idle reader sleep until there may be records to read.
//
// It is a SIBLING of Stream for the reason queue's Waker is: an engine that
// cannot see its own appends — or whose appends come from another process —
// has no honest answer to give. A reader asks by type assertion and polls
// when the answer is no, so an engine that omits it loses latency, never
// records.
//
// A wake is a HINT: a signal may come with nothing new on the reader's
// partition, and records appended by another process close no signal, so a
// reader that uses it still polls at the cadence that bounds the second case.
type Waker interface {
	// Wake returns a channel closed by the next Append through this stream value
	// in this process, to any partition. Call it BEFORE the Read that may come
	// back empty: an append landing between that Read and the wait closes the
	// channel already handed out, so it is not missed.
	Wake() <-chan struct{}
}

// Seeker finds an offset by time: where a reader that wants "everything since
// nine o'clock" starts.
//
// It is a sibling because an engine over a store that keeps no append instant
// cannot implement it.
type Seeker interface {
	// OffsetAt returns the first offset of partition whose [EntryValue.AppendedAt]
	// is at or after t: the partition's first retained offset when t precedes
	// every record it retains, its next offset when t follows every one. A
	// partition outside [0, Partitions()) is [UnknownPartition].
	OffsetAt(ctx context.Context, partition int, t time.Time) (Offset, error)
}

// Trimmer drops a partition's prefix before its retention would: the
// operator's lever, and the one a reader uses once every record below an
// offset is known to be useless.
//
// It is a sibling because an engine over a store whose retention is its own
// cannot honour it.
type Trimmer interface {
	// Trim makes before the first offset partition retains: every record below
	// it becomes unreadable at once ([OffsetTrimmed]) and its storage is
	// released when the engine can — a file engine releases whole segments only.
	// A before at or below the first offset changes nothing; one past the next
	// offset is [OffsetAhead]; a partition outside [0, Partitions()) is
	// [UnknownPartition]. Offsets are never reused: the next offset does not
	// move.
	Trim(ctx context.Context, partition int, before Offset) error
}

// Compactor rewrites a partition so that it keeps, of every key, only its last
// record: the shape of a changelog read from the start to rebuild a state,
// with no need to keep every intermediate value.
//
// It is a sibling because compaction is a policy only some engines afford. It
// never runs on its own — no timer, no goroutine —: a caller runs it, from a
// scheduler's job for instance, and PolicyValue.CompactAfter says which
// records it may touch.
//
// # Tombstones
//
// A keyed record with an empty payload is a TOMBSTONE: the key's deletion. A
// compaction keeps it, as the last record of its key, for one more
// CompactAfter — a reader that bootstraps within that window still learns the
// key is gone —, and the first compaction after drops it with every earlier
// record of its key.
type Compactor interface {
	// Compact removes from partition every keyed record at least
	// [PolicyValue.CompactAfter] old that a later record of the same key, as
	// old, supersedes, and every tombstone at least twice CompactAfter old with
	// them; a record younger than CompactAfter is never touched, and an unkeyed
	// record is left as it is. Every survivor keeps its offset: offsets are
	// never renumbered and [Stream.Bounds] does not move, so a reader inside a
	// compacted range reads on from the next survivor and is refused
	// [OffsetTrimmed] only below the first retained offset, never in a hole.
	//
	// It reports what it looked at — every retained record at least
	// CompactAfter old —, what it kept and what it dropped. A zero CompactAfter
	// never compacts: Compact returns a zero [CompactValue]. A partition outside
	// [0, Partitions()) is [UnknownPartition].
	Compact(ctx context.Context, partition int) (CompactValue, error)
}

// Committer keeps, per consumer group and partition, the offset the group
// reads next: the durable cursor that lets a group's reader stop and another
// one resume where it was.
//
// It is a sibling because keeping cursors is a capability of the engine's
// storage: an engine that keeps them in the same store as the records lets a
// handler commit its offset in its own transaction (exactly-once in effect,
// ADR 0231 and kitsunium/sdk#823), which is the reason they are kept there
// and not beside it.
type Committer interface {
	// Commit records next as the offset group reads next on partition,
	// replacing whatever the group committed there before — moving it back is
	// legitimate: it is a replay. next past the partition's next offset is
	// [OffsetAhead]; below its first retained offset it is kept, and the
	// group's next Read reports [OffsetTrimmed]. An empty group is
	// [StreamMisconfigured]; a partition outside [0, Partitions()) is
	// [UnknownPartition].
	Commit(ctx context.Context, group string, partition int, next Offset) error
	// Committed returns the offset group committed last on partition.
	//
	// A group that never committed there is [UnknownGroup] — never a zero
	// offset, because "start at the beginning" and "start at the end" are both
	// legitimate first positions and only the reader knows which it wants.
	Committed(ctx context.Context, group string, partition int) (Offset, error)
}
