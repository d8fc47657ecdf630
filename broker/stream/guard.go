package stream

import (
	"context"
	"time"
)

// RecordBytes is the size a record counts for, against MaxRecordBytes,
// RetainBytes and MaxBytes alike: its key and payload together.
func RecordBytes(r RecordValue) int64 { return int64(len(r.Key)) + int64(len(r.Payload)) }

// BatchBytes is the size of a batch: the sum of its records' RecordBytes.
func BatchBytes(records []RecordValue) int64 {
	var n int64
	for _, r := range records {
		n += RecordBytes(r)
	}
	return n
}

// IsTombstone reports whether r is a tombstone: a keyed record with an empty
// payload. An unkeyed empty record is just an empty record.
func IsTombstone(r RecordValue) bool { return len(r.Key) > 0 && len(r.Payload) == 0 }

// CheckBatch is Append's guard. It refuses an empty batch (InvalidBatchSize,
// "records" 0), then walks the records in order and refuses the first that is
// larger than the normalized MaxRecordBytes (RecordTooLarge: "index", "size",
// "max") or whose key hashes elsewhere than the batch's first key
// (PartitionsMixed: "index", "partition", "key_partition").
//
// It returns the batch's partition: PartitionOf the first keyed record, or -1
// when no record has a key and the engine picks the next partition in turn.
func CheckBatch(policy PolicyValue, records []RecordValue) (int, error) {
	if len(records) == 0 {
		return -1, InvalidBatchSize.With("records", 0)
	}
	policy = policy.Normalized()
	partition := -1
	for i, r := range records {
		if size := RecordBytes(r); size > int64(policy.MaxRecordBytes) {
			return -1, RecordTooLarge.With("index", i, "size", size, "max", policy.MaxRecordBytes)
		}
		if len(r.Key) == 0 {
			continue
		}
		p := PartitionOf(r.Key, policy.Partitions)
		if partition < 0 {
			partition = p
		} else if p != partition {
			return -1, PartitionsMixed.With("index", i, "partition", partition, "key_partition", p)
		}
	}
	return partition, nil
}

// CheckPartition refuses a partition outside [0, partitions) with
// UnknownPartition ("partition", "partitions").
func CheckPartition(partition, partitions int) error {
	if partition < 0 || partition >= partitions {
		return UnknownPartition.With("partition", partition, "partitions", partitions)
	}
	return nil
}

// CheckMax refuses a Read's non-positive max with InvalidBatchSize ("max").
func CheckMax(max int) error {
	if max <= 0 {
		return InvalidBatchSize.With("max", max)
	}
	return nil
}

// CheckRead refuses a Read from below the partition's first retained offset
// (OffsetTrimmed: "partition", "offset", "first") or past its next one
// (OffsetAhead: "partition", "offset", "next"). A read at Next is allowed and
// answers nothing.
func CheckRead(partition int, from Offset, b BoundsValue) error {
	if from < b.First {
		return OffsetTrimmed.With("partition", partition, "offset", from, "first", b.First)
	}
	return CheckOffset(partition, from, b)
}

// CheckOffset refuses an offset past the partition's next one, which a commit
// or a trim may name at most, with OffsetAhead ("partition", "offset",
// "next").
func CheckOffset(partition int, offset Offset, b BoundsValue) error {
	if offset > b.Next {
		return OffsetAhead.With("partition", partition, "offset", offset, "next", b.Next)
	}
	return nil
}

// CheckGroup refuses an empty consumer group with StreamMisconfigured
// ("field" "group").
func CheckGroup(group string) error {
	if group == "" {
		return StreamMisconfigured.With("field", "group", "value", group)
	}
	return nil
}

// NoCommit is what Committed answers for a group that never committed on
// partition: UnknownGroup ("group", "partition").
func NoCommit(group string, partition int) error {
	return UnknownGroup.With("group", group, "partition", partition)
}

// CheckRoom is Append's backpressure guard, run with held, the bytes the
// stream holds now (after the retention due now), and batch, the BatchBytes
// of the records asked.
//
// It returns wait false and a nil error when the batch fits: MaxBytes is zero,
// or held plus batch stays within it. It returns wait true when the batch
// would fit once retention, a Trim or a compaction releases enough: the
// engine waits up to BlockTimeout, checking again whenever room may have been
// made, and answers Full when the time is up (at once for a zero
// BlockTimeout). A batch larger than MaxBytes on its own can never fit, and
// is refused at once with Full rather than after a wait that cannot succeed.
func CheckRoom(policy PolicyValue, held, batch int64) (wait bool, err error) {
	if policy.MaxBytes == 0 || held+batch <= policy.MaxBytes {
		return false, nil
	}
	if batch > policy.MaxBytes {
		return false, Full(policy, held, batch)
	}
	return true, nil
}

// Full is the refusal an Append ends with when CheckRoom found no room, or
// the BlockTimeout it waited for some ran out: StreamFull ("held", "batch",
// "max", "timeout").
func Full(policy PolicyValue, held, batch int64) error {
	return StreamFull.With("held", held, "batch", batch, "max", policy.MaxBytes, "timeout", policy.BlockTimeout)
}

// Expired reports whether a record appended at appendedAt is past the
// policy's RetainFor at now, and due for trimming. A zero RetainFor keeps
// every record.
func Expired(policy PolicyValue, appendedAt, now time.Time) bool {
	return policy.RetainFor > 0 && !now.Before(appendedAt.Add(policy.RetainFor))
}

// RoomWait is Append's wait for room under MaxBytes, the same in every
// engine: CheckRoom decides, BlockTimeout runs from the first wait on,
// the engine's room signal or a poll (for room that only time makes, such
// as retention by age) ends each wait, and the deadline earns one last look
// before StreamFull. The zero value is not usable: call NewRoomWait, and
// Stop when done.
type RoomWait struct {
	policy   PolicyValue
	every    time.Duration
	timer    *time.Timer
	ticker   *time.Ticker
	timedOut bool
}

// NewRoomWait returns the wait of one Append under policy; poll, when
// positive, is how often the engine looks again without a signal.
func NewRoomWait(policy PolicyValue, poll time.Duration) *RoomWait {
	return &RoomWait{policy: policy, every: poll}
}

// Check is CheckRoom, refusing with StreamFull instead of waiting once the
// deadline passed or when BlockTimeout is zero.
func (w *RoomWait) Check(held, batch int64) (wait bool, err error) {
	wait, err = CheckRoom(w.policy, held, batch)
	if err == nil && wait && (w.timedOut || w.policy.BlockTimeout == 0) {
		return false, Full(w.policy, held, batch)
	}
	return wait, err
}

// Wait waits for room, the poll, or the deadline, and returns ctx's cause
// when ctx ends first. The engine then looks again with Check.
func (w *RoomWait) Wait(ctx context.Context, room <-chan struct{}) error {
	if w.timer == nil {
		w.timer = time.NewTimer(w.policy.BlockTimeout)
		if w.every > 0 {
			w.ticker = time.NewTicker(w.every)
		}
	}
	var poll <-chan time.Time
	if w.ticker != nil {
		poll = w.ticker.C
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-room:
	case <-poll:
	case <-w.timer.C:
		w.timedOut = true // one last look: room may have come with the deadline
	}
	return nil
}

// Stop releases the wait's timers.
func (w *RoomWait) Stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.ticker != nil {
		w.ticker.Stop()
	}
}
