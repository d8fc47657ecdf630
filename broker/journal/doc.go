// Package journal is a broker's one append-only log of objects: its own
// group commits and the copies its peers send it, made durable together by
// one fdatasync per batch, and the fences that stop a stream's older
// epochs from writing. It is the data path's storage (DESIGN.md, "Two
// logs"); the metadata log decides what its objects mean.
//
// # Decisions
//
// One writer. Appends and fences go through one goroutine, which takes
// everything that arrived while the last batch was being synced, checks
// each request against the fences in the order the requests arrived,
// writes what it accepted as one batch at the end of the current segment,
// fdatasyncs it, and only then answers every request of the batch. So a
// fence and an object of its stream are always ordered, and nothing is
// answered before the fdatasync that covers it (tested on crashfs, which
// keeps at a simulated crash only what a completed fdatasync covered).
//
// Fences. Fence(stream, epoch) makes the journal refuse, from its batch on,
// every object with a part of that stream at an older epoch (the owner's
// own included: a paused owner cannot gather a write quorum once a quorum
// of its ensemble is fenced). A fence is written like an object and
// answered only after its batch is synced, so it survives a crash right
// after it was answered (BOOKKEEPER-815 lost fences on restart). Its answer
// lists every object of the stream the journal holds before it: what
// recovery reads. Fences only rise: an older one is a no-op, answered the
// same way.
//
// Objects. An object is immutable: its id, the parts it holds (stream,
// epoch, first offset, count), and its payload, opaque here (frames with
// their descriptors). A recovery copies the objects it adopts to the new
// ensemble, whose members it fenced first: such a copy keeps its parts'
// epochs but is written on the authority of the new epoch (Object.By),
// which is what the fences are checked against. An object arriving again with an id the journal
// holds is answered as durable without a second copy when its bytes are
// the same (a resend after a lost answer), and refused when they differ.
//
// Files. Segments named journal-<16 hex digits>.log, each opened by a
// header (magic, version, the member's incarnation, the segment's number)
// and then batches. A batch is one record — a marker, its length, a
// CRC-32C, its entries — written by one write and covered by one
// fdatasync before the next is written, so a crash can tear only the last
// batch of the last segment. A bad record after which no valid batch
// begins (the marker lets the scan find one) is that torn tail, however
// its bytes were written back, and is cut off at open; a bad record with a
// valid batch after it, a bad one in an earlier segment, a missing segment
// or a header that is not this journal's is damage, and the journal opens
// as Damaged: its objects are not a fenced copy for recovery (a member
// damaged mid-file is not shortened, it is untrusted). A bad final batch
// that had been synced is not told from a torn one — nothing after it says
// so. A new segment's directory entry is synced before anything in it is
// answered, and open syncs what it read before answering anything: a
// killed process's page cache keeps batches no fdatasync covered, and a
// resend of one is answered "held already". A batch never outgrows 1 GiB
// (the writer splits it); an object over half that is refused.
//
// Preallocation (Options.Preallocate). A zero-filled spare segment is
// written and synced in the background and renamed into place when the
// writer begins a segment: an fdatasync then need not grow the file. The
// zeros after a segment's last batch are the unwritten rest of it, not a
// torn tail and not damage, in the last segment or an earlier one — so a
// synced batch of an earlier segment lost to zeros is not told from that
// rest, as a bad final batch that was synced is not told from a torn one.
//
// Dropping. Segments go whole, oldest first (Drop), when the caller has
// every object in one durably elsewhere or needs it no more; never the
// current segment, never one holding a stream's current fence (it would
// be lost at the next open), and the directory is synced after each, so a
// crash never leaves a gap (a gap is damage).
//
// Not here (the caller decides): which objects may be dropped (only on metadata evidence, never by age), what an ensemble is,
// and how a recovery chooses among copies.
package journal
