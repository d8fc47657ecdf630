// Package objstore keeps the broker's immutable object files in one directory
// of its data volume (the PVC). It knows bytes only: an object is a file of
// CRC-checked frames, named by a numeric id, written once by the group-commit
// flusher or a segment merge, read by position afterwards, and removed when
// no metadata references it. It knows nothing of streams, records, HTTP or
// Kubernetes.
//
// # File format
//
// An object is one file named by its id in fixed-width lower-case hex, so
// that a directory listing sorts by id:
//
//	0000000000000001.obj
//
// It starts with a 16-byte header that lets a stray or misnamed file be
// recognised, followed by frames, back to back, to the end of the file:
//
//	header (HeaderSize = 16 bytes)
//	  0   4  magic "PMQO"
//	  4   1  format version (1)
//	  5   3  reserved, zero
//	  8   8  object id, uint64 little-endian (must match the file name)
//	frame (FrameHeaderSize = 8 bytes + payload), repeated
//	  0   4  payload length, uint32 little-endian, 1..MaxPayload
//	  4   4  CRC-32C (Castagnoli) of the payload, uint32 little-endian
//	  8   n  payload
//
// A frame is addressed by (id, pos, n): pos is the file offset of its header
// and n its total length, header included, as AppendFrame returns them.
// Empty payloads are refused: a zero length is what a torn tail of zeros
// reads as (the CRC-32C of nothing is 0), so a zero length always means
// "not a frame" and Scan stops there.
//
// # Reading never returns wrong bytes
//
// ReadFrame checks the frame header against the length the caller expects
// and the CRC against the payload. A mismatch, or a file that ends inside the
// frame, is ErrCorrupt (as a *CorruptError carrying the id and position);
// every other failure of the operating system is a
// stream.StreamBackendFailed naming the operation. The header of a file is
// checked once, when a read handle is opened for it.
//
// # Durability and the pre-created pool
//
// Group commit pays for every fsync on its latency path, so Create is built
// to cost no directory fsync. A new file is durable only once both its
// contents (fdatasync of the file) and its directory entry (fsync of the
// directory) are; the second is the expensive one and the same for every
// file. So the store keeps a small pool of files created ahead of time (4 by
// default): a background goroutine creates them, writes their headers and
// fsyncs the directory once for the whole refill. Create hands out a pool file
// whose entry is already durable, and the writer's Sync needs only the file's
// own fdatasync, which also makes the header durable.
//
// Pool files are named by their final id from the start. Renaming a pool file
// into place at Create (from a .pool name, say) would need another directory
// fsync to make the new name durable — the very cost the pool avoids. The set
// of unclaimed pool ids is kept in memory only: List leaves them out and
// Remove treats them as absent, so the broker's orphan collection never sees
// them, and Close deletes them. After a crash they are ordinary objects of
// HeaderSize bytes (or 0 bytes, when the header never reached the disk)
// that no metadata references: orphans for the broker to delete like any
// other. The store never reuses them, because it cannot know what the
// metadata says.
//
// Ids are allocated above every object file present and above
// Options.MinNextID. The file names are the only record the store keeps, and
// a removed file is gone from it, so the caller passes one more than the
// highest id its metadata ever knew: an id is never handed out again while
// metadata may still mention it. Ids are unique, not ordered by creation.
//
// An object whose bytes a log keeps durable (the broker's small group
// commits carry their frames in its journal, or on the older log path in
// their metadata-log entry) needs no file
// before it is acknowledged: Hold keeps it in memory and the reads serve it
// from there; Spill writes it to its file, unsynced, Restore holds it again
// from the log on replay (replacing a torn file), and SyncObjects makes it
// durable before the log drops the entry (see held.go and logged.go).
//
// Remove and Abort do not fsync the directory: if a crash brings a removed
// file back, it is an orphan, collected again, and its id is not reused.
//
// A Writer that failed a write or an fdatasync keeps failing: after a failed
// fdatasync the kernel may have dropped the dirty pages and a retry can
// report success for data that never reached the disk, so the only way on is
// Abort and a new object.
//
// # Kubernetes volumes
//
// PrepareDir refuses a directory writable by group or others, because such
// an account could inject or remove records. A pod securityContext.fsGroup
// with the default fsGroupChangePolicy (Always) makes every directory of the
// volume group-writable on each mount; with fsGroupChangePolicy OnRootMismatch
// only the volume's root is changed, once, so the data directory must be a
// subdirectory of the mount, created by PrepareDir.
package objstore
