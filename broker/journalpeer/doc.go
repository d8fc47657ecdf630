// Package journalpeer is the journal's peer API: an owner sends each group
// commit object to the other members of its ensemble, and a new owner
// fences and reads them, over the peer port (broker/peer's HTTP side).
//
//	POST /v1/peer/journal/objects            body: an object     204 once durable here
//	POST /v1/peer/journal/fences/{stream}/{epoch}                200 body: the stream's refs
//	GET  /v1/peer/journal/objects/{id}                           200 body: the object
//
// Objects, the hot path, go on an append stream instead (stream.go: one
// connection per member pair, every object queued meanwhile in one write,
// answers by request id in any order, each with the same meaning as POST
// objects' answer); a member that serves no stream, an older build, is
// sent them by POST.
//
// The member's journal (broker/journal) decides everything: an append is
// answered only after the fdatasync that covers it, refused JOURNAL_FENCED
// when the stream is fenced past its epoch, JOURNAL_CONFLICT when the id is
// held with other bytes, and a resend of the same bytes is answered at
// once; a fence is answered after its fdatasync with every part of the
// stream written before it. Refusals cross the wire as coded problems, so
// that errors.Is(err, journal.Fenced) holds on the sender's side.
//
// Wire format (little-endian), the same for an object sent and one read
// back:
//
//	object = "PMQO" crc32c:u32 id:u64 flags:u8 by:i64 parts:u32 {part} payload
//	part   = stream:u64 epoch:i64 first:u64 count:u64
//	refs   = "PMQR" crc32c:u32 n:u32 {object:u64 part}
//
// The CRC-32C covers what follows it: a body damaged on the way is refused
// (BAD_JOURNAL_OBJECT), never appended. flags bit 0 marks a recovery's copy
// (journal.Object.Copied), whose authority is epoch by.
//
// Served on the peer port by every cluster member (broker/cluster), over
// the member's own journal; core's ensembles.go is its one caller.
//
// Not here: whom to send to and when an append counts as acknowledged
// (broker/ensemble's write quorum and ack rule), recovery's choice of
// copies (ensemble.Recover).
package journalpeer
