// Package wire is what the broker's HTTP API and its Go client share: the
// URL scheme, the binary batch framing, the header names, the JSON shapes of
// the admin API and the refusals the HTTP layer adds to the engine's own. It
// has no dependency on the broker, so the client links neither the broker
// nor its metadata log.
//
// # URL scheme
//
// Stream names are paths (logs/api/prod): one or more segments of letters,
// digits, '.', '_' and '-', never empty, "." or "..". A name therefore never
// needs percent-encoding, and a request whose path holds a '%' where a name
// is expected, an empty segment, or a "." or ".." segment is refused with
// 400 STREAM_MISCONFIGURED (field "name") — a name can never escape its
// route. ':' never occurs in a name, so an operation on a stream is spelled
// as a suffix after it, in the style of custom methods:
//
//	POST /v1/log/{name}[?partition=P][&key=K]     append a batch
//	GET  /v1/log/{name}?partition=P&from=O&max=N[&wait=D][&maxBytes=B]
//	                                              read (long-poll with wait)
//	GET  /v1/log/{name}:bounds?partition=P        {"partition","first","next"}
//	GET  /v1/log/{name}:seek?partition=P&time=T   {"partition","offset"}; T is RFC 3339 or Unix ns
//	POST /v1/log/{name}:trim?partition=P&before=O 204
//	POST /v1/log/{name}:compact?partition=P       {"scanned","kept","dropped"}
//	POST /v1/log/{name}:commit?group=G&partition=P&next=O   204
//	GET  /v1/log/{name}:committed?group=G&partition=P       {"group","partition","next"}
//	POST /v1/appends                              several appends, each answered on its own (see AppendsPath)
//
//	PUT    /v1/admin/streams/{name}   create (201), same config (200), other config (409 STREAM_EXISTS)
//	GET    /v1/admin/streams/{name}   the stream with its partitions
//	PATCH  /v1/admin/streams/{name}   {"policy":{...}}: the fields given replace the current ones
//	DELETE /v1/admin/streams/{name}   204
//	GET    /v1/admin/streams          {"streams":[...]} (no per-partition detail)
//	GET    /v1/admin/node             node id, metadata log state, leader, indexes
//	POST   /v1/admin/drain            start draining (a clustered broker): DrainStatus
//	GET    /v1/admin/drain            the drain's progress: DrainStatus
//	DELETE /v1/admin/drain            stop draining: DrainStatus
//	GET    /healthz, /readyz, /metrics
//
// /v1/stream/ is reserved for the Durable Streams protocol.
//
// Query defaults: partition 0, from 0, max 100; append without partition
// places the batch by its keys (PartitionOf) or round-robin. wait is a Go
// duration (wait with no value: the server's long-poll timeout), clamped to
// the server's long-poll timeout: a read that finds nothing waits until an
// append commits to the stream or the wait ends, then reads once more.
//
// # Framing
//
// An append's body, Content-Type application/vnd.picomq.batch, is a run of
// records, each
//
//	uvarint keyLen, key bytes, uvarint payloadLen, payload bytes
//
// (an empty body is a batch of no record, which the engine refuses). A body
// of Content-Type application/octet-stream is instead ONE record: the body
// is its payload and the key query parameter its key (handy with curl).
//
// A read answers the same framing with each record's place and instant
// before it:
//
//	uvarint offset, varint appendedAt (Unix ns), uvarint keyLen, key, uvarint payloadLen, payload
//
// with the headers PicoMQ-Partition, PicoMQ-First and PicoMQ-Next (the
// partition's bounds when read), PicoMQ-Count and PicoMQ-Read-Next (the
// offset to read from next). A read sent with Accept: application/json gets
// {"partition","first","next","readNext","entries":[{"offset","appendedAt",
// "key","payload"}]} instead, keys and payloads in base64 (for people and
// curl, not for the hot path).
//
// An append answers 200 with {"partition","first","last","next",
// "duplicate"} and the same numbers in PicoMQ-Partition, PicoMQ-First,
// PicoMQ-Last and PicoMQ-Next. The idempotent producer headers
// Producer-Id, Producer-Epoch and Producer-Seq (all three or none) and
// Stream-Seq are passed to the broker; a repeat is acknowledged with
// "duplicate": true and writes nothing.
//
// # Errors
//
// Every refusal is a coded problem (errs.Marshal), Content-Type
// application/problem+json, with the status errs.HTTPStatus gives it.
// Decoded with errs.Unmarshal it matches the same static under errors.Is,
// fields intact.
package wire
