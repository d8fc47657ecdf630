package node

import (
	"errors"

	"github.com/picomq/picomq/broker/errs"
)

// The broker's own refusals: block 0.16.1 (0x00_10_01_xx) for the
// registry and the metadata log's checks, 0.16.2 (0x00_10_02_xx) for the
// data path, beside the SDK's 0.2.38 and 0.3.94 blocks (broker/stream).
// The state machine and the core return them; the front ends map them by
// their declared status, and errors.Is matches them across the wire.
const (
	CodeStreamNotFound   errs.Code = 0x00_10_01_01
	CodeStaleEpoch       errs.Code = 0x00_10_01_02
	CodeOffsetMismatch   errs.Code = 0x00_10_01_03
	CodeStreamClosed     errs.Code = 0x00_10_01_04
	CodeProducerFenced   errs.Code = 0x00_10_01_05
	CodeProducerSeqGap   errs.Code = 0x00_10_01_06
	CodeStreamSeqOrder   errs.Code = 0x00_10_01_07
	CodeRangesChanged    errs.Code = 0x00_10_01_08
	CodeBadCommand       errs.Code = 0x00_10_01_09
	CodeStreamExists     errs.Code = 0x00_10_01_0A
	CodePartitionsShrink errs.Code = 0x00_10_01_0B
	CodeStreamGone       errs.Code = 0x00_10_01_0C
	CodeProducerEpochSeq errs.Code = 0x00_10_01_0D
	CodeMemberRemoved    errs.Code = 0x00_10_01_0E
	CodeReplicasChanged  errs.Code = 0x00_10_01_0F
	CodeLevelTooLow      errs.Code = 0x00_10_01_10
	CodeObjectGone       errs.Code = 0x00_10_01_11
)

var (
	// StreamNotFound: no stream of that name or id exists.
	StreamNotFound = errs.Static(CodeStreamNotFound, "STREAM_NOT_FOUND",
		"The stream does not exist",
		"broker/meta: no registry entry or internal stream by that name or id; the fields name it",
		404, 66)

	// StaleEpoch: a write under an epoch that is no longer the stream's: the
	// writer lost ownership and is fenced.
	StaleEpoch = errs.Static(CodeStaleEpoch, "STALE_EPOCH",
		"The stream was reopened by another owner",
		"broker/meta: a commit or close carried an epoch that is not the internal stream's current one; the fields carry both",
		409, 75)

	// OffsetMismatch: a commit whose first offset is not the stream's end: an
	// earlier commit of the same pipeline was rejected.
	OffsetMismatch = errs.Static(CodeOffsetMismatch, "OFFSET_MISMATCH",
		"The append does not continue the stream",
		"broker/meta: a commit's first offset is not the internal stream's end; the fields carry both",
		409, 75)

	// StreamClosed: the stream refuses appends for good (a Durable Streams close).
	StreamClosed = errs.Static(CodeStreamClosed, "STREAM_CLOSED",
		"The stream is closed",
		"broker/meta: an append to a closed stream; the fields carry its final offset",
		409, 65)

	// ProducerFenced: an idempotent producer at an epoch below its current one.
	ProducerFenced = errs.Static(CodeProducerFenced, "PRODUCER_FENCED",
		"The producer epoch is stale",
		"broker/meta: Producer-Epoch below the producer's current epoch; the fields carry both",
		403, 65)

	// ProducerSeqGap: an idempotent producer skipped sequence numbers.
	ProducerSeqGap = errs.Static(CodeProducerSeqGap, "PRODUCER_SEQ_GAP",
		"The producer sequence has a gap",
		"broker/meta: Producer-Seq is past the next expected one; the fields carry expected and received",
		409, 65)

	// StreamSeqOrder: a Stream-Seq not strictly above the last one.
	StreamSeqOrder = errs.Static(CodeStreamSeqOrder, "STREAM_SEQ_ORDER",
		"The Stream-Seq does not increase",
		"broker/meta: Stream-Seq must be byte-wise greater than the last accepted one",
		409, 65)

	// RangesChanged: a merge or compaction raced a trim or another rewrite.
	RangesChanged = errs.Static(CodeRangesChanged, "RANGES_CHANGED",
		"The stream's ranges changed under a rewrite",
		"broker/meta: replace-ranges named a range that is no longer present; retry from the new state",
		409, 75)

	// BadCommand: a command that cannot apply as written (a bug in its author).
	BadCommand = errs.Static(CodeBadCommand, "BAD_COMMAND",
		"The metadata command is malformed",
		"broker/meta: a command the state machine cannot decode or apply; the fields say why",
		500, 70)

	// StreamExists: a create whose configuration differs from the existing stream's.
	StreamExists = errs.Static(CodeStreamExists, "STREAM_EXISTS",
		"A stream of that name exists with another configuration",
		"broker/meta: create of an existing name with a different content type, lifetime or policy; the fields say which",
		409, 73)

	// PartitionsShrink: a policy update lowering the partition count.
	PartitionsShrink = errs.Static(CodePartitionsShrink, "PARTITIONS_SHRINK",
		"Partitions may only grow",
		"broker/meta: a policy update asked for fewer partitions; the fields carry both counts",
		409, 65)

	// StreamGone: the stream was deleted but forks of it live, so its name
	// is still taken; it is removed with its last fork.
	StreamGone = errs.Static(CodeStreamGone, "STREAM_GONE",
		"The stream was deleted; forks of it still hold its name",
		"broker/meta: the entry is soft-deleted because live forks were made from it; the name is reusable once the last fork is deleted",
		410, 66)

	// ProducerEpochSeq: an idempotent producer opened a new epoch at a
	// sequence other than 0.
	ProducerEpochSeq = errs.Static(CodeProducerEpochSeq, "PRODUCER_EPOCH_SEQ",
		"A new producer epoch must start at sequence 0",
		"broker/meta: Producer-Epoch above the producer's current epoch with a Producer-Seq other than 0; the fields carry both",
		400, 65)
)

var (
	// MemberRemoved: a broker incarnation that was removed from the
	// cluster for good asks to act as a member again (it came back with its
	// old data directory). It is never let back in: a broker whose data is
	// set aside or wiped joins as a new member.
	MemberRemoved = errs.Static(CodeMemberRemoved, "MEMBER_REMOVED",
		"This broker was removed from the cluster",
		"broker/meta: the member id (node and incarnation) was removed from the cluster for good; start the broker on an empty data directory to join as a new member",
		409, 77)

	// ReplicasChanged: a move of an object's copies was proposed against a
	// replica set that is no longer the object's (another move, or the
	// object was collected). Nothing changed; the mover plans again.
	ReplicasChanged = errs.Static(CodeReplicasChanged, "REPLICAS_CHANGED",
		"The object's replica set changed since the move was planned",
		"broker/meta: a replicas command whose old set is not the object's current one, or whose object is gone; fields: object, want (the old set proposed), have (the current set, absent when the object is gone)",
		409, 75)

	// ObjectGone: a Tiered named an object the state no longer holds (it
	// was merged, trimmed or deleted while it uploaded). Nothing changed;
	// the uploaded key is an orphan the leader's scan collects.
	ObjectGone = errs.Static(CodeObjectGone, "OBJECT_GONE",
		"The object was collected before its upload was recorded",
		"broker/meta: a tiered command named an object that is no longer live; fields: object, key",
		409, 75)

	// LevelTooLow: a command was not proposed because a current member of
	// the cluster runs a build whose state machine cannot apply it (a
	// rolling upgrade under way): it would refuse the command while the
	// others applied it, and their states would part. Nothing changed;
	// retried once every member runs a build of the level.
	LevelTooLow = errs.Static(CodeLevelTooLow, "LEVEL_TOO_LOW",
		"A broker of the cluster runs a version that cannot apply this change yet",
		"broker/core: the command needs a level of the metadata log's state machine that a current member lacks (an upgrade under way); fields: op, need, have (the lowest level of the members), member (one at that level); finish the upgrade",
		503, 75)
)

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

// OwnerChanged answers an append the metadata log refused because another
// node opened its partition meanwhile (a higher epoch fenced this one):
// nothing of it was written, and it may be retried — at the partition's
// new owner.
var OwnerChanged = errs.Static(0x00_10_02_03, "OWNER_CHANGED",
	"The partition moved to another broker; the append was not written and may be retried",
	"broker/core: a commit carried an epoch the metadata log no longer holds, because another node opened the partition; nothing of the append was written",
	503, 75)

// MetadataUnavailable answers a write that needs the metadata log while it
// cannot commit: no leader is known (an election, or a lost quorum), or the
// outcome of a command could not be learned. Committed data stays
// readable; the write may be retried (an append's retry is safe with an
// idempotent producer, as its outcome may be "written").
var MetadataUnavailable = errs.Static(0x00_10_02_04, "METADATA_UNAVAILABLE",
	"The cluster's metadata log cannot commit right now; retry shortly",
	"broker/core: the metadata log has no leader known or no quorum, or a command's outcome could not be learned; the fields say which",
	503, 75)

// ErrWouldWait is what an append with NoRoomWait returns when it would
// have waited for room under MaxBytes.
var ErrWouldWait = errors.New("node: the append would wait for room")

// ErrNotOpen is what an append with NoOpen returns when its partition is
// not open yet.
var ErrNotOpen = errors.New("node: the append's partition is not open yet")

// StorageFull answers an append or a create while the data volume's free
// space is below the headroom (--disk-headroom): nothing was written. The
// headroom keeps room for what frees space — deletes, trims, merges, the
// metadata log's commits and recovery —, which keep working; appends are
// accepted again by themselves once space returns.
var StorageFull = errs.Static(0x00_10_02_05, "STORAGE_FULL",
	"The broker's data volume is almost full; delete or trim streams, or grow the volume, then retry",
	"broker/diskspace: the data volume's free bytes are below the headroom kept for deletes, trims and recovery; fields: free, headroom (bytes), dir",
	503, 75)

// StorageFailed answers every append once a write to the data volume
// could not be made durable (an fsync failed): the kernel may have dropped
// the pages it could not write, so nothing written since the last good
// fsync can be vouched for, and retrying the fsync would report success
// for data that is gone. The broker stops acknowledging and /readyz turns
// unhealthy until it is restarted (and replays what is durable).
var StorageFailed = errs.Static(0x00_10_02_06, "STORAGE_FAILED",
	"The broker's storage failed; it acknowledges nothing until restarted",
	"broker/diskspace: an fsync (or a write the store cannot undo) failed; fields: op, path, err; restart the broker, and check the volume",
	500, 74)

// OutcomeUnknown answers an append whose object may be durable but was
// not acknowledged: the journal failed to answer it durable, or its
// stream was fenced, revoked or rolled back meanwhile. A later start or
// recovery may or may not adopt it. Retriable; a producer's retry is
// recognised if it was adopted.
var OutcomeUnknown = errs.Static(0x00_10_02_07, "APPEND_OUTCOME_UNKNOWN",
	"Whether the append was stored is unknown; retry it (a producer's retry is answered as a duplicate if it was)",
	"broker/core: the append's object may be durable, but the journal did not answer it durable, or its stream's epoch or provisional state ended before it was acknowledged; fields: name, first",
	503, 75)
