// Package tier keeps sealed segments in S3-compatible object storage, so
// that a stream's history is bounded by a bucket rather than by the PVCs of
// its ensemble, and reads them back through a bounded cache on local disk.
// It knows buckets, keys and bytes; the decisions about which segment goes
// when, and what the metadata log records, are core's (broker/core/tier.go).
//
// # Decisions
//
//  1. What tiers: a sealed segment — an object a merge or a compaction
//     wrote (meta.Object.Segment), every record of which is below its
//     stream's checkpointed end. Group-commit objects and the journal are
//     never uploaded: they are shared by many streams and live briefly.
//  2. Who uploads: the owner of the stream the segment belongs to, from its
//     own copy, in a loop of its own (never the append path, never the
//     maintenance loop a slow bucket would stall).
//  3. Key: <prefix>segments/<object id, 16 hex>.obj. An object id is never
//     reused and an object never rewritten, so an upload is idempotent: a
//     retry, or a second owner after a failover, writes the same bytes to
//     the same key.
//  4. Confirmed before recorded: the upload is one PUT carrying the
//     body's MD5 (Content-MD5: the server refuses a body that does not
//     match it), then a HEAD must show the size and that MD5 as the ETag.
//     Only then does the uploader propose meta's Tiered command with the
//     key, size and MD5. So the log never names a key whose object is not
//     there. The frames are checked (CRC-32C) before they leave.
//  5. Evicted only after recorded: local copies go only once meta's Evict
//     command has applied, which the state machine refuses for an object
//     that is not tiered. Each replica then deletes its own file. Eviction
//     follows the stream's LocalRetainFor (age of the segment's newest
//     record) and LocalRetainBytes (uploaded bytes kept locally, newest
//     first).
//  6. Deleted only after the log forgets it: retention, trims, merges,
//     compaction and stream deletion make a segment garbage; the metadata
//     leader deletes its key GarbageGrace later (a DELETE of a missing key
//     succeeds, so it is idempotent) before it proposes ObjectsDeleted.
//     A key whose object is no longer live and that no garbage entry
//     names — an upload whose owner died, or whose object was collected,
//     before Tiered landed — is an orphan: the leader's scan deletes it
//     once older than the orphan grace. A live object's key is never
//     deleted by the scan, tiered or not (an upload whose confirmation
//     failed is sent again under the same key), and a collected object
//     never becomes live again, so the scan cannot delete a key a Tiered
//     is about to name.
//  7. Reads: a range of an evicted segment is read from the bucket by a
//     ranged GET of whole chunks (ChunkBytes) into the cache on local disk
//     (LRU, bounded by --tier-cache-bytes); each frame is checked against
//     its CRC-32C as every local read is. A chunk that fails is dropped and
//     fetched again from the bucket; a second failure is TIER_CORRUPT, and
//     core then tries any copy a broker still holds. A read of chunk n
//     prefetches the next chunks in the background: catch-up readers go
//     through a segment in order. Tails, long-polls and SSE read what is
//     past the checkpoint, which is never tiered, so they never wait on the
//     bucket.
//  8. Faults: every failure of the bucket leaves the local copies where
//     they are; uploads retry with exponential backoff (capped), and the
//     disk headroom rule (503 STORAGE_FULL) protects the volume while they
//     cannot. Reachability is what the last request said; the status and
//     the operator's Degraded reason come from it.
//  9. Credentials are read from two files (access-key-id,
//     secret-access-key) in a directory a Kubernetes Secret is mounted on,
//     and read again when they change: a rotated Secret is used without a
//     restart.
//
// # Why minio-go
//
// minio-go (Apache-2.0) is one module written for S3-compatible servers:
// path-style addressing, a custom CA, a credentials provider interface (for
// the files above) and ranged GETs, with signing done for us. The AWS SDK
// for Go v2 does the same across a dozen modules and, by default, sends
// trailing checksums with aws-chunked bodies that several S3-compatible
// servers refuse; nothing here needs what it adds.
package tier
