package stream

import "time"

// DefaultMaxRecordBytes bounds one record when PolicyValue.MaxRecordBytes is
// left at zero: one mebibyte, the queue's DefaultMaxMessageBytes and Kafka's
// default message.max.bytes.
const DefaultMaxRecordBytes int = 1 << 20

// DefaultSegmentBytes is a segment's size when PolicyValue.SegmentBytes is
// left at zero: 64 MiB, kernel/fs/seglog's and the consensus log's.
const DefaultSegmentBytes int64 = 64 << 20

// PolicyValue is what an engine enforces on a stream: how many partitions,
// how large a record, how long and how much it keeps, how much it may hold
// before producers wait, and how large a segment a file engine writes.
//
// # Its zero value WORKS, and that is the decision
//
// A stream's zero policy is one partition, records of up to
// DefaultMaxRecordBytes, kept forever, never full, never compacted, in
// segments of DefaultSegmentBytes. Every zero here has one reading (ADR
// 0031's clamp branch): unlike the queue's visibility timeout, no field has
// two opposite readings of zero, so none is refused at zero. What is refused
// is a negative value — it is not a bound, and the caller who wrote it meant
// something —, a PolicyValue.BlockTimeout with no PolicyValue.MaxBytes to
// wait under, and a MaxBytes below one record, under which no Append could
// ever succeed.
type PolicyValue struct {
	// Partitions is how many partitions the stream has, fixed for its life.
	// Zero means one; negative is refused.
	Partitions int
	// MaxRecordBytes bounds one record, its key and payload together. A
	// larger record is refused at [Stream.Append] with [RecordTooLarge]. Zero
	// means [DefaultMaxRecordBytes]; negative is refused.
	MaxRecordBytes int
	// RetainFor is how long a record is kept, measured from its
	// [EntryValue.AppendedAt]: older records are trimmed by the engine, a
	// file engine dropping whole segments only. Zero keeps every record for
	// good; negative is refused.
	RetainFor time.Duration
	// RetainBytes is how many bytes of records a partition keeps: above it
	// the engine trims the oldest. Zero is unbounded; negative is refused.
	RetainBytes int64
	// MaxBytes is how many bytes of records the stream may hold before
	// [Stream.Append] waits for room — the producers' backpressure, for a
	// stream whose retention is bounded by its readers rather than by time.
	// Zero is unbounded; negative is refused, and so is a positive value
	// below the normalized MaxRecordBytes, under which no record could fit.
	MaxBytes int64
	// BlockTimeout is how long an Append waits for room under MaxBytes before
	// it is refused with [StreamFull]. Zero refuses at once. Negative is
	// refused, and so is a positive value with no MaxBytes, which would wait
	// for nothing.
	BlockTimeout time.Duration
	// SegmentBytes is the size of the segments a file engine writes, and the
	// unit its retention releases. Zero means [DefaultSegmentBytes]; negative
	// is refused. Engines that keep no segments ignore it.
	SegmentBytes int64
	// CompactAfter is how old a record must be before a [Compactor] may
	// drop it, measured from its [EntryValue.AppendedAt]: a reader that
	// stays within that window behind the head sees every update, and a
	// tombstone is kept one more CompactAfter after it became compactable.
	// Zero never compacts; negative is refused.
	CompactAfter time.Duration
	// Tiering says whether the stream's sealed segments move to the
	// cluster's object storage: [TieringEnabled], [TieringDisabled], or
	// empty to follow the cluster (on when it has object storage). Any
	// other value is refused. Engines without object storage ignore it.
	Tiering string
	// LocalRetainFor is how long a sealed segment stays on the local disks
	// after it is uploaded, measured from its newest record; zero follows
	// the cluster's default. Negative is refused.
	LocalRetainFor time.Duration
	// LocalRetainBytes bounds a partition's uploaded bytes kept on the
	// local disks too: above it the oldest uploaded segments are evicted
	// first. Zero follows the cluster's default. Negative is refused.
	LocalRetainBytes int64
}

// The values of [PolicyValue.Tiering].
const (
	TieringEnabled  = "Enabled"
	TieringDisabled = "Disabled"
)

// Validate reports whether the policy is one an engine can honour, and
// refuses it BY FIELD (StreamMisconfigured, the "field" field naming which)
// when it is not.
//
// It lives in core so that the memory, file and SQL engines refuse identical
// inputs identically, which is what makes the first usable as a test double
// for the other two.
//
// The fields are checked in their declaration order, negative values first,
// so a policy wrong in several ways is refused for the same field by every
// engine. The "value" field carries the refused value; a MaxBytes below one
// record also carries "min", the normalized MaxRecordBytes it must reach.
func (p PolicyValue) Validate() error {
	negatives := []struct {
		field    string
		value    any
		negative bool
	}{
		{"Partitions", p.Partitions, p.Partitions < 0},
		{"MaxRecordBytes", p.MaxRecordBytes, p.MaxRecordBytes < 0},
		{"RetainFor", p.RetainFor, p.RetainFor < 0},
		{"RetainBytes", p.RetainBytes, p.RetainBytes < 0},
		{"MaxBytes", p.MaxBytes, p.MaxBytes < 0},
		{"BlockTimeout", p.BlockTimeout, p.BlockTimeout < 0},
		{"SegmentBytes", p.SegmentBytes, p.SegmentBytes < 0},
		{"CompactAfter", p.CompactAfter, p.CompactAfter < 0},
		{"LocalRetainFor", p.LocalRetainFor, p.LocalRetainFor < 0},
		{"LocalRetainBytes", p.LocalRetainBytes, p.LocalRetainBytes < 0},
	}
	for _, n := range negatives {
		if n.negative {
			return StreamMisconfigured.With("field", n.field, "value", n.value)
		}
	}
	if p.Tiering != "" && p.Tiering != TieringEnabled && p.Tiering != TieringDisabled {
		return StreamMisconfigured.With("field", "Tiering", "value", p.Tiering, "reason", "Enabled, Disabled or empty")
	}
	if p.BlockTimeout > 0 && p.MaxBytes == 0 {
		// A wait with nothing to wait under would always time out: the
		// caller meant a MaxBytes and forgot it.
		return StreamMisconfigured.With("field", "BlockTimeout", "value", p.BlockTimeout)
	}
	if minimum := int64(p.Normalized().MaxRecordBytes); p.MaxBytes > 0 && p.MaxBytes < minimum {
		return StreamMisconfigured.With("field", "MaxBytes", "value", p.MaxBytes, "min", minimum)
	}
	return nil
}

// Normalized returns the policy with its clamped fields resolved, so that
// every engine reads the same numbers rather than each applying the same
// default. It does NOT validate: call PolicyValue.Validate first, at
// construction.
//
// Only a zero Partitions, MaxRecordBytes or SegmentBytes changes; every other
// zero already means what it says (forever, unbounded, never), and a negative
// value is left for Validate to refuse.
func (p PolicyValue) Normalized() PolicyValue {
	if p.Partitions == 0 {
		p.Partitions = 1
	}
	if p.MaxRecordBytes == 0 {
		p.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if p.SegmentBytes == 0 {
		p.SegmentBytes = DefaultSegmentBytes
	}
	return p
}
