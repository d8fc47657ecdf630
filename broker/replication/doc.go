// Package replication copies a cluster member's object files to R-1 other
// members before the descriptor naming them is journaled, and reads frames of
// objects a member holds no file of from the members that do.
//
// # Nothing is acknowledged before a write quorum of R copies
//
// An append in an object file (a group commit above core's InlineBytes) is
// acknowledged only after the writer's Sync returned nil and the object's
// descriptor, naming its replica set, is durable in a write quorum of its
// owner's ensemble's journals (on the older log path: after the commit
// naming the set applied). Sync returns nil only when a write quorum of R (a majority:
// 2 of 3) is durable, this member's copy among them — the journals'
// acknowledgement rule, so that one member restarting, draining or dead
// stalls no append (a planned restart of a broker takes it out of the live
// members for seconds):
//
//  1. Create picks R for the object (R = 0: min(3, live members)) and
//     starts it in this member's store, keeping what the peers must
//     receive: the header, each frame's header and its payload (a copy
//     for AppendFrame; the caller's bytes for AppendFrameRef, valid until
//     Sync returns).
//  2. Sync chooses up to R-1 peers among the live members other than this
//     one, by rendezvous hashing on (object id, member id) — every member
//     would choose the same from the same live set. Fewer live peers than
//     a write quorum needs fails the Sync (REPLICATION_FAILED): no object
//     is ever committed with fewer copies than a write quorum.
//  3. The local fdatasync and the copies run at once. Each peer receives
//     the object's bytes (PUT ObjectsPath{id}), checks every frame's CRC
//     as they stream in, writes them to a file aside, fdatasyncs it,
//     renames it to the object's name and fsyncs the directory — and only
//     then answers 204 (objstore.Store.WriteReplica).
//  4. Sync waits for every copy's answer, and returns nil when the local
//     Sync succeeded and, with it, a write quorum of copies; Replicas
//     then names this member first, then the peers whose copy is durable,
//     for the commit (package repair makes the missing copies, as for a
//     member lost: UnderReplicated counts the object meanwhile). A local
//     failure, or fewer durable copies, is the Sync's error: the caller
//     aborts the object, nothing is committed, and the copies some peers
//     made are orphans there, collected after the orphan grace.
//
// A copy's bytes may come from the caller's memory: the request body stops
// reading it once the copy is over (answered, failed or timed out), so
// nothing is read after Sync returned, even from a transport that writes a
// body after its request failed.
//
// Objects whose frames travel in the journal (core's inline objects; on
// the log path, inside their commit) never come here: the ensemble's
// journals (or the metadata log) replicate them.
//
// # Reading from a replica
//
// Fetcher.FetchFrame asks the replicas a commit named (this member left
// out) in rendezvous order for the frame, header included (GET
// ObjectsPath{id}/frame?pos=P&len=N), checks its length and CRC itself,
// and moves on to the next replica when the bytes fail or the replica
// cannot answer. It never returns bytes it could not check.
//
// # Under-replication
//
// UnderReplicated counts committed objects with fewer than R replicas
// among the current members (a member that is down but not removed still
// holds its copy); Metrics.UnderReplicated is the gauge for it.
package replication
