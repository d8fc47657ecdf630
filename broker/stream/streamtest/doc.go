// Package streamtest is the engine suite: the checks every implementation of
// stream.Stream runs, so that the memory engine, the file engine and the
// remote client keep the same promises and refuse identical inputs
// identically.
//
// An engine's tests call Run with a Factory:
//
//	func TestSuite(t *testing.T) {
//		streamtest.Run(t, func(t *testing.T, p stream.PolicyValue, c streamtest.Clock) (streamtest.Engine, error) {
//			s, err := memory.New(p, memory.Options{Now: c.Now})
//			return streamtest.Engine{Stream: s}, err
//		})
//	}
//
// Time-based behaviour (retention by age, compaction windows, seeking) is
// driven by a FakeClock the suite moves; nothing sleeps on it. Real time is
// used only where the contract is about a wait — BlockTimeout (10 ms) and
// the few milliseconds the suite lets a goroutine reach a blocking Append —
// and every wait for something that should happen at once gives up after ten
// seconds, so a broken engine fails rather than hangs. Nothing assumes the
// engine runs in this process beyond what Waker itself promises (an Append
// through this stream value closes the channel), so a remote client can run
// the suite against a server started by its Factory.
//
// # Guarantees and the subtests that check them
//
// Each subtest below checks the sentence of package stream's documentation
// that follows it. Every error check asserts the static under errors.Is and
// the fields named in package stream's documentation.
//
//	Policy/ZeroValueWorks
//	    PolicyValue: "A stream's zero policy is one partition, records of up to
//	    DefaultMaxRecordBytes, kept forever, never full, never compacted".
//	Policy/RefusedByField
//	    PolicyValue.Validate: "refuses it BY FIELD (StreamMisconfigured, the
//	    "field" field naming which)"; "What is refused is a negative value ...,
//	    a BlockTimeout with no MaxBytes ..., and a MaxBytes below one record";
//	    and "the memory, file and SQL engines refuse identical inputs
//	    identically" (the engine's refusal carries Validate's fields).
//	Policy/PartitionsFixed
//	    Stream.Partitions: "at least one. It never changes for the life of a
//	    stream"; Bounds: "A partition outside [0, Partitions()) is UnknownPartition".
//	Append/ConsecutiveOffsetsFromZero
//	    Offset: "consecutive within a partition from zero"; Append: "The records
//	    take consecutive offsets in their order"; AppendValue: "the offsets of
//	    its first and last records".
//	Append/BatchSharesOneInstant
//	    EntryValue.AppendedAt: "the engine's clock when the batch holding the
//	    record was appended; every record of one batch carries the same instant".
//	Append/KeyPlacementIsPartitionOf
//	    "A record's partition is its key's, by PartitionOf ..., the same on every engine".
//	Append/KeyReadInAppendOrder
//	    "a key's records are read in the order they were appended".
//	Append/UnkeyedBatchesInTurn
//	    Append: "A batch with no key at all goes to the partitions in turn".
//	Append/UnkeyedRecordFollowsBatch
//	    Append: "PartitionOf of the first keyed record ... and an unkeyed record
//	    following the batch".
//	Append/PartitionsMixedWritesNothing
//	    Append: "every other keyed record required to hash to the same partition
//	    (PartitionsMixed otherwise, nothing written)".
//	Append/EmptyBatchIsInvalid
//	    Append: "An empty batch is InvalidBatchSize".
//	Append/RecordTooLargeRefusesBatch
//	    Append: "a record whose key and payload together exceed
//	    MaxRecordBytes is RecordTooLarge, the whole batch refused";
//	    RecordTooLarge: "Its fields carry the two sizes and the record's index
//	    in the batch, never its bytes".
//	Append/EmptyRecordsAccepted
//	    RecordValue: the Key "may be empty"; the Payload "may be empty".
//	Append/RecordIsAsAppended
//	    EntryValue.Record: "the record as it was appended".
//	Append/ConcurrentAppendersLoseNothing
//	    Stream: "Implementations MUST be safe for concurrent use by multiple
//	    goroutines"; Offset: "unique and never reused"; AppendValue: "the
//	    batch's records holding every offset between them in order".
//	Read/AtNextIsEmptyNotBlocking
//	    Read: "It does NOT block waiting for records: a read at the partition's
//	    next offset yields an empty slice and a nil error".
//	Read/UpToMaxInOffsetOrder
//	    Read: "returns up to max entries of partition, from offset from on, in
//	    offset order".
//	Read/NonPositiveMaxIsInvalid
//	    Read: "a non-positive max is InvalidBatchSize".
//	Read/PastNextIsAhead
//	    Read: "one past the next offset is OffsetAhead".
//	Read/UnknownPartition
//	    Read: "A partition outside [0, Partitions()) is UnknownPartition".
//	Read/RefusalOrder
//	    "the guard every engine runs so that all of them refuse identical inputs
//	    identically".
//	Retention/ByAge
//	    RetainFor: "how long a record is kept, measured from its AppendedAt:
//	    older records are trimmed by the engine"; Read: "from below the
//	    partition's first retained offset is OffsetTrimmed".
//	Retention/ByBytes
//	    RetainBytes: "how many bytes of records a partition keeps: above it the
//	    engine trims the oldest".
//	Retention/ZeroKeepsForever
//	    RetainFor: "Zero keeps every record for good".
//	Backpressure/ZeroTimeoutRefusesAtOnce
//	    BlockTimeout: "Zero refuses at once"; StreamFull: "nothing was written";
//	    MaxBytes: "how many bytes of records the stream may hold".
//	Backpressure/WaitsThenFull
//	    Append: "A stream holding MaxBytes waits up to BlockTimeout ..., then
//	    refuses with StreamFull".
//	Backpressure/BatchAboveMaxBytesRefusedAtOnce
//	    stream.CheckRoom (the guard): a batch larger than MaxBytes can never fit
//	    and is refused at once.
//	Backpressure/WaitsForTrim, Backpressure/WaitsForRetention
//	    Append: "waits up to BlockTimeout for retention to make room".
//	Backpressure/ContextEndsWaitWithItsCause
//	    Append: "ctx ends the wait earlier with its own cause".
//	Waker/ClosedByNextAppendToAnyPartition
//	    Wake: "returns a channel closed by the next Append through this stream
//	    value in this process, to any partition".
//	Waker/AppendBetweenReadAndWaitNotMissed
//	    Wake: "Call it BEFORE the Read that may come back empty: an append
//	    landing between that Read and the wait closes the channel already
//	    handed out, so it is not missed".
//	Seeker/AtBeforeAfter
//	    OffsetAt: "the first offset of partition whose AppendedAt is at or after
//	    t: the partition's first retained offset when t precedes every record it
//	    retains, its next offset when t follows every one. A partition outside
//	    [0, Partitions()) is UnknownPartition".
//	Trimmer/RaisesFirstNeverReusesOffsets
//	    Trim: "every record below it becomes unreadable at once (OffsetTrimmed)";
//	    "A before at or below the first offset changes nothing; one past the
//	    next offset is OffsetAhead; a partition outside [0, Partitions()) is
//	    UnknownPartition. Offsets are never reused: the next offset does not
//	    move."
//	Compactor/ZeroCompactAfterNeverCompacts
//	    Compact: "A zero CompactAfter never compacts: Compact returns a zero
//	    CompactValue. A partition outside [0, Partitions()) is UnknownPartition".
//	Compactor/KeepsLastPerKeyAndTombstoneWindow
//	    Compact: "removes ... every keyed record at least CompactAfter old that a
//	    later record of the same key, as old, supersedes, and every tombstone at
//	    least twice CompactAfter old with them"; "an unkeyed record is left as
//	    it is"; "offsets are never renumbered and Stream.Bounds does not move, so
//	    a reader inside a compacted range reads on from the next survivor";
//	    Tombstones: "A compaction keeps it ... for one more CompactAfter ..., and
//	    the first compaction after drops it"; CompactValue: "Kept plus Dropped
//	    is Scanned"; Read: "The offsets a Compactor emptied are skipped".
//	Compactor/YoungerRecordNeverSupersedes
//	    Compact: "a record younger than CompactAfter is never touched"; the
//	    superseding record must be "as old".
//	Compactor/TrimmedOnlyBelowFirst
//	    Compact: "is refused OffsetTrimmed only below the first retained
//	    offset, never in a hole".
//	Committer/UnknownGroupNeverZero
//	    Committed: "A group that never committed there is UnknownGroup — never a
//	    zero offset"; Committer: "per consumer group and partition".
//	Committer/CommitReplaysAndAdvances
//	    Commit: "replacing whatever the group committed there before — moving it
//	    back is legitimate: it is a replay".
//	Committer/PastNextIsAhead
//	    Commit: "next past the partition's next offset is OffsetAhead".
//	Committer/BelowFirstKeptThenReadTrimmed
//	    Commit: "below its first retained offset it is kept, and the group's next
//	    Read reports OffsetTrimmed".
//	Committer/EmptyGroupAndUnknownPartition
//	    Commit: "An empty group is StreamMisconfigured; a partition outside
//	    [0, Partitions()) is UnknownPartition".
//	Reopen/AcknowledgedSurvives (engines with Engine.Reopen only)
//	    Append: "When it returns nil, a durable implementation has flushed the
//	    whole batch"; Offset: "never reused"; Committer: "the durable cursor".
//
// Siblings' subtests skip only when the engine does not implement the
// sibling; Reopen's only when Engine.Reopen is nil.
package streamtest
