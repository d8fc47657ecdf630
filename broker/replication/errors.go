package replication

import "github.com/picomq/picomq/broker/errs"

// Replication's refusals: block 0.16.7 (0x00_10_07_xx), beside the
// broker's 0.16.1 (metadata), 0.16.2 (data path), 0.16.4 (ownership),
// 0.16.5 (Durable Streams) and 0.16.6 (membership) blocks.
const (
	CodeReplicationFailed  errs.Code = 0x00_10_07_01
	CodeReplicaRefused     errs.Code = 0x00_10_07_02
	CodeReplicaID          errs.Code = 0x00_10_07_03
	CodeReplicaTooLarge    errs.Code = 0x00_10_07_04
	CodeReplicaConflict    errs.Code = 0x00_10_07_05
	CodeReplicaBusy        errs.Code = 0x00_10_07_06
	CodeReplicaNotFound    errs.Code = 0x00_10_07_07
	CodeBadFrameRange      errs.Code = 0x00_10_07_08
	CodeReplicaCorrupt     errs.Code = 0x00_10_07_09
	CodeReplicaUnavailable errs.Code = 0x00_10_07_0A
	CodeBadConfig          errs.Code = 0x00_10_07_0B
	CodeNoRoute            errs.Code = 0x00_10_07_0C
)

var (
	// ReplicationFailed answers a Sync that could not make the object
	// durable on a write quorum of R members: too few live members to copy
	// it to, or copies that failed. Nothing is acknowledged with fewer
	// copies: the append (or merge) that wrote the object fails, nothing
	// of it is committed, and it may be retried.
	ReplicationFailed = errs.Static(CodeReplicationFailed, "REPLICATION_FAILED",
		"The data could not be copied to enough replicas; nothing was written, retry shortly",
		"broker/replication: an object file was durable on fewer members than a write quorum of the replication factor; fields: object, wanted (R), got (durable copies, this member's included), failed (the peers whose copy failed), live (live members, when too few), reason",
		503, 75)

	// ReplicaRefused answers a copy whose bytes are not the object it
	// names: another object's header, a frame failing its CRC or length, a
	// body ending inside a frame. Nothing was kept.
	ReplicaRefused = errs.Static(CodeReplicaRefused, "REPLICA_REFUSED",
		"The object copy failed its checks and was not stored",
		"broker/replication: a PUT of an object replica whose header or frames did not check; fields: object, reason",
		400, 65)

	// ReplicaID answers a request naming an id that is not an object id
	// (16 lower-case hex digits), or one this member may not store a copy
	// under (one of its own pool files or future ids).
	ReplicaID = errs.Static(CodeReplicaID, "REPLICA_ID_REFUSED",
		"The object id is not valid here",
		"broker/replication: the path's id is not 16 lower-case hex digits, or names an id this member hands out itself; fields: id, reason",
		400, 65)

	// ReplicaTooLarge answers a copy larger than the receiver takes.
	ReplicaTooLarge = errs.Static(CodeReplicaTooLarge, "REPLICA_TOO_LARGE",
		"The object copy is larger than this member accepts",
		"broker/replication: a PUT body above HandlerConfig.MaxObjectBytes; fields: object, max",
		413, 65)

	// ReplicaConflict answers a copy of an object this member already
	// holds a different, valid copy of: ids are never reused, so one of
	// them is wrong; the copy in place is kept.
	ReplicaConflict = errs.Static(CodeReplicaConflict, "REPLICA_CONFLICT",
		"A different object is stored under this id",
		"broker/replication: the receiving member holds a valid object under the id that is neither these bytes nor a shorter version of them; fields: object",
		409, 65)

	// ReplicaBusy answers a copy of an object this member is receiving (or
	// writing) already.
	ReplicaBusy = errs.Static(CodeReplicaBusy, "REPLICA_BUSY",
		"The object is being written on this member; retry shortly",
		"broker/replication: another copy of the object is being received, or it is open for writing here; fields: object",
		503, 75)

	// ReplicaNotFound answers a fetch of an object this member holds no
	// file of.
	ReplicaNotFound = errs.Static(CodeReplicaNotFound, "REPLICA_NOT_FOUND",
		"This member holds no copy of the object",
		"broker/replication: no file of the object on this member (never copied here, or collected); fields: object",
		404, 66)

	// BadFrameRange answers a fetch whose pos or len no frame can have.
	BadFrameRange = errs.Static(CodeBadFrameRange, "BAD_FRAME_RANGE",
		"The frame position or length is invalid",
		"broker/replication: a frame fetch needs pos >= the object header's size and a len above a frame header's, as decimal query parameters; fields: object, pos, len",
		400, 64)

	// ReplicaCorrupt answers a fetch of a frame whose copy here fails its
	// checks: the member never serves bytes it cannot vouch for.
	ReplicaCorrupt = errs.Static(CodeReplicaCorrupt, "REPLICA_CORRUPT",
		"This member's copy of the object failed its checksum",
		"broker/replication: the frame read from this member's file failed its CRC or length check, or a fetched frame failed the fetcher's; fields: object, pos, member",
		500, 74)

	// ReplicaUnavailable answers a fetch no replica of the object could
	// answer (down, unreachable, failing), while none said it holds no
	// copy: the data may well exist; retry.
	ReplicaUnavailable = errs.Static(CodeReplicaUnavailable, "REPLICA_UNAVAILABLE",
		"No replica of the data could be reached; retry shortly",
		"broker/replication: every member named as a replica of the object was down, unreachable or failed the fetch; fields: object, replicas, reason",
		503, 75)

	// NoRoute answers a request under ObjectsPath that is none of
	// replication's: 405 for a known path with another method, else 404.
	NoRoute = errs.Static(CodeNoRoute, "REPLICATION_NO_ROUTE",
		"No such replication request",
		"broker/replication: the peer API serves PUT ObjectsPath{id} and GET ObjectsPath{id}/frame only; fields: method, path",
		404, 64)

	// BadConfig refuses a Config New cannot honour.
	BadConfig = errs.Static(CodeBadConfig, "REPLICATION_CONFIG",
		"The replication configuration is invalid",
		"broker/replication: a Config field is missing or out of range; fields: field, value, and the rule it breaks",
		0, 78)
)
