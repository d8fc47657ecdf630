package stream

import "github.com/picomq/picomq/broker/errs"

const (

	// CodeStreamMisconfigured identifies a PolicyValue field, or a call's
	// argument, an engine cannot honour, refused before anything is written.
	CodeStreamMisconfigured errs.Code = 0x00_02_26_01 // 0.2.38.1

	// CodeRecordTooLarge identifies an Append holding a record whose key and
	// payload together exceed PolicyValue.MaxRecordBytes.
	CodeRecordTooLarge errs.Code = 0x00_02_26_02 // 0.2.38.2

	// CodeOffsetTrimmed identifies a read from an offset below the first one
	// its partition still retains.
	CodeOffsetTrimmed errs.Code = 0x00_02_26_03 // 0.2.38.3

	// CodeOffsetAhead identifies an offset past the next one its partition
	// will assign.
	CodeOffsetAhead errs.Code = 0x00_02_26_04 // 0.2.38.4

	// CodeUnknownPartition identifies a partition outside [0, Partitions()).
	CodeUnknownPartition errs.Code = 0x00_02_26_05 // 0.2.38.5

	// CodeInvalidBatchSize identifies an Append of no record, or a Read asked
	// for a non-positive number of entries.
	CodeInvalidBatchSize errs.Code = 0x00_02_26_06 // 0.2.38.6

	// CodeStreamFull identifies an Append refused because the stream held
	// PolicyValue.MaxBytes for longer than PolicyValue.BlockTimeout.
	CodeStreamFull errs.Code = 0x00_02_26_07 // 0.2.38.7

	// CodeUnknownGroup identifies a Committed for a group that never committed
	// an offset on that partition.
	CodeUnknownGroup errs.Code = 0x00_02_26_08 // 0.2.38.8

	// CodePartitionsMixed identifies an Append whose records' keys hash to more
	// than one partition: a batch is appended to one partition, under one sync.
	CodePartitionsMixed errs.Code = 0x00_02_26_09 // 0.2.38.9
)

const (

	// CodeStreamBackendFailed identifies an operation a durable engine depends
	// on that its storage refused: a filesystem call the operating system
	// refused, or a statement the SQL engine's database did not complete.
	CodeStreamBackendFailed errs.Code = 0x00_03_5E_01 // 0.3.94.1

	// CodeStreamDirectoryUnusable identifies a stream directory that cannot be
	// prepared, is not a directory, or is writable by accounts that must not be
	// able to inject or remove records.
	CodeStreamDirectoryUnusable errs.Code = 0x00_03_5E_02 // 0.3.94.2

	// CodeSQLStreamMisconfigured identifies an SQL engine configuration refused
	// at construction: no transactor, one it cannot join a transaction of, a
	// dialect it cannot spell, or a table name it cannot interpolate safely.
	CodeSQLStreamMisconfigured errs.Code = 0x00_03_5E_03 // 0.3.94.3

	// CodeSubscriberMisconfigured identifies a subscriber configuration the
	// engine refuses: no handler, no group, or a handler whose author has not
	// asserted that it is idempotent.
	CodeSubscriberMisconfigured errs.Code = 0x00_03_5E_04 // 0.3.94.4
)

// The statics below declare 0 as their HTTP status where the seed does; a
// server answers those with errs.HTTPStatus, which reads the exit code:
// STREAM_MISCONFIGURED and INVALID_BATCH_SIZE (78) answer 400,
// STREAM_BACKEND_FAILED (74) answers 500.

var (
	// StreamMisconfigured refuses a PolicyValue an engine cannot honour — a
	// negative bound, a BlockTimeout with no MaxBytes, a MaxBytes below one
	// record — and an argument a call cannot honour, such as an empty group
	// name. The "field" field names which value.
	StreamMisconfigured = errs.Static(CodeStreamMisconfigured, "STREAM_MISCONFIGURED",
		"The stream policy is not one this engine can honour",
		"core/data/stream: a policy field or an argument has no usable value; the field names which",
		0,
		78)

	// RecordTooLarge refuses an Append holding a record above the policy's
	// bound, at the producer that can still make it smaller. Its fields carry
	// the two sizes and the record's index in the batch, never its bytes.
	RecordTooLarge = errs.Static(CodeRecordTooLarge, "RECORD_TOO_LARGE",
		"The record exceeds the stream's configured maximum size",
		"core/data/stream: a record larger than PolicyValue.MaxRecordBytes; the fields carry both sizes, never the bytes",
		413,
		78)

	// OffsetTrimmed refuses a read below the first offset the partition retains:
	// the records were trimmed by retention or Trim — never by compaction,
	// whose holes a read skips. It is a refusal and not a silent skip because a reader that
	// resumed later than it asked has lost records without knowing; its fields
	// name the offset asked and the first retained, so the reader decides.
	OffsetTrimmed = errs.Static(CodeOffsetTrimmed, "OFFSET_TRIMMED",
		"The requested records are no longer retained",
		"core/data/stream: read below the first retained offset; the fields carry both offsets",
		409,
		65)

	// OffsetAhead refuses an offset past the partition's next one: a read, a
	// commit or a trim naming a record that does not exist yet. It is usually a
	// cursor carried over from another stream, or from before a rebuild.
	OffsetAhead = errs.Static(CodeOffsetAhead, "OFFSET_AHEAD",
		"The requested offset is past the end of the stream",
		"core/data/stream: offset past the partition's next offset; the fields carry both offsets",
		409,
		65)

	// UnknownPartition refuses a partition outside [0, Partitions()).
	UnknownPartition = errs.Static(CodeUnknownPartition, "UNKNOWN_PARTITION",
		"The stream has no such partition",
		"core/data/stream: partition outside [0, Partitions()); the fields carry it and the count",
		400,
		65)

	// InvalidBatchSize refuses an Append of no record and a Read asked for a
	// non-positive number of entries, rather than an empty answer forever from
	// a loop that processes nothing.
	InvalidBatchSize = errs.Static(CodeInvalidBatchSize, "INVALID_BATCH_SIZE",
		"The batch size is not a positive number",
		"core/data/stream: empty Append or non-positive Read max",
		0,
		78)

	// StreamFull refuses an Append that waited PolicyValue.BlockTimeout for
	// room under PolicyValue.MaxBytes and found none: the readers, or the
	// retention, are behind. It is the producer's backpressure, and nothing was
	// written.
	StreamFull = errs.Static(CodeStreamFull, "STREAM_FULL",
		"The stream is full",
		"core/data/stream: MaxBytes held for BlockTimeout; nothing was written",
		503,
		75)

	// UnknownGroup answers a Committed for a group that never committed an
	// offset on that partition: where it starts is the reader's decision.
	UnknownGroup = errs.Static(CodeUnknownGroup, "UNKNOWN_GROUP",
		"The consumer group has no committed offset",
		"core/data/stream: no offset committed by this group on this partition",
		404,
		66)

	// PartitionsMixed refuses an Append whose keyed records hash to more than
	// one partition: a batch is one partition's, written under one sync, and
	// splitting it would make a crash keep half of it. The producer groups its
	// records by PartitionOf first.
	PartitionsMixed = errs.Static(CodePartitionsMixed, "PARTITIONS_MIXED",
		"The batch's records belong to different partitions",
		"core/data/stream: a batch's keys name more than one partition; nothing was written",
		400,
		65)

	// StreamBackendFailed reports an operation a durable engine depends on that
	// its storage refused. The fields name the operation; the cause is wrapped.
	StreamBackendFailed = errs.Static(CodeStreamBackendFailed, "STREAM_BACKEND_FAILED",
		"The stream's storage failed",
		"service/data/stream: the engine's storage refused an operation; the fields name it",
		0,
		74)

	// StreamDirectoryUnusable refuses a stream directory that cannot be
	// prepared, is not a directory, or is writable by another account.
	StreamDirectoryUnusable = errs.Static(CodeStreamDirectoryUnusable, "STREAM_DIRECTORY_UNUSABLE",
		"The stream directory cannot be used",
		"service/data/stream: the stream directory cannot be prepared or is writable by others",
		0,
		78)

	// SQLStreamMisconfigured refuses an SQL engine configuration at
	// construction; the "field" field names which value.
	SQLStreamMisconfigured = errs.Static(CodeSQLStreamMisconfigured, "SQL_STREAM_MISCONFIGURED",
		"The SQL stream configuration is not usable",
		"service/data/stream: SQL engine configuration refused at construction; the field names which",
		0,
		78)

	// SubscriberMisconfigured refuses a subscriber configuration: no handler,
	// no group, or a handler not asserted idempotent; the "field" field names
	// which value.
	SubscriberMisconfigured = errs.Static(CodeSubscriberMisconfigured, "SUBSCRIBER_MISCONFIGURED",
		"The stream subscriber configuration is not usable",
		"service/data/stream: subscriber configuration refused; the field names which",
		0,
		78)
)
