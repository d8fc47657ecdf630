package journal

import "github.com/picomq/picomq/broker/errs"

// The journal's refusals: block 0.16.10 (0x00_10_0A_xx), beside
// replication's 0.16.7.
const (
	CodeFenced    errs.Code = 0x00_10_0A_01
	CodeConflict  errs.Code = 0x00_10_0A_02
	CodeDamaged   errs.Code = 0x00_10_0A_03
	CodeFailed    errs.Code = 0x00_10_0A_04
	CodeClosed    errs.Code = 0x00_10_0A_05
	CodeNotHeld   errs.Code = 0x00_10_0A_06
	CodeTooLarge  errs.Code = 0x00_10_0A_07
	CodeNotOldest errs.Code = 0x00_10_0A_08
	CodePinned    errs.Code = 0x00_10_0A_09
)

var (
	// Fenced refuses an object with a part of a stream this journal was
	// fenced past: a newer owner opened the stream. Nothing of the object
	// was written.
	Fenced = errs.Static(CodeFenced, "JOURNAL_FENCED",
		"The stream was opened by a newer owner; this write was refused and nothing of it was stored",
		"broker/journal: an object has a part of a stream at an epoch older than the journal's fence for it; fields: object, stream, epoch (the part's), fence (the journal's)",
		409, 75)

	// Conflict refuses an object whose id the journal holds with other
	// bytes: ids are never reused, so one of the two is not what its
	// writer sent.
	Conflict = errs.Static(CodeConflict, "JOURNAL_CONFLICT",
		"An object with this id is stored with other bytes; nothing was written",
		"broker/journal: an append of an object id the journal holds, with different parts or payload; fields: object",
		409, 65)

	// Damaged answers a journal found damaged at open — a bad record that
	// is not a torn tail, a segment of another journal or missing — and
	// every append to it: its copies are not trusted.
	Damaged = errs.Static(CodeDamaged, "JOURNAL_DAMAGED",
		"This broker's journal is damaged; its copies are not used until it is repaired",
		"broker/journal: open found damage that is not a torn tail; fields: segment, offset, reason",
		500, 74)

	// Failed answers every request once a write or an fdatasync of the
	// journal failed: what it holds past its last good sync is unknown,
	// so it acknowledges nothing more until reopened.
	Failed = errs.Static(CodeFailed, "JOURNAL_FAILED",
		"This broker's journal could not make a write durable; it acknowledges nothing until restarted",
		"broker/journal: a write or an fdatasync of a segment failed; fields: segment, op",
		500, 74)

	// NotHeld answers a read of an object the journal does not hold.
	NotHeld = errs.Static(CodeNotHeld, "JOURNAL_NOT_HELD",
		"This broker's journal holds no such object",
		"broker/journal: a read of an object id never appended here; fields: object",
		404, 66)

	// TooLarge refuses an object larger than a batch may hold (512 MiB):
	// nothing was written.
	TooLarge = errs.Static(CodeTooLarge, "JOURNAL_OBJECT_TOO_LARGE",
		"The object is larger than the journal takes in one write; nothing was written",
		"broker/journal: an object's entry exceeds half the largest batch; fields: object, bytes, max",
		413, 65)

	// NotOldest refuses to drop a segment that is not the oldest, or is
	// the one appended to: segments go oldest first, so that what is
	// left is always a run with no gap (a gap is damage at open).
	NotOldest = errs.Static(CodeNotOldest, "JOURNAL_SEGMENT_NOT_OLDEST",
		"Only the oldest journal segment, and never the one being written, can be dropped",
		"broker/journal: Drop of a segment that is not the oldest or is the current one; fields: segment, oldest, current",
		409, 65)

	// Pinned refuses to drop a segment holding a stream's current fence:
	// the fence would be lost at the next open.
	Pinned = errs.Static(CodePinned, "JOURNAL_SEGMENT_PINNED",
		"The journal segment holds a stream's current fence and cannot be dropped",
		"broker/journal: Drop of a segment holding the latest fence of a stream; fields: segment, stream, epoch",
		409, 65)

	// Closed answers requests to a closed journal.
	Closed = errs.Static(CodeClosed, "JOURNAL_CLOSED",
		"This broker's journal is closed",
		"broker/journal: a request after Close",
		503, 75)
)
