// Package metalog is the replicated metadata log of a PicoMQ broker: the
// wiring of a hashicorp/raft node — a raft-wal log store, a file snapshot
// store, a transport — around a state machine it knows nothing about.
//
// The state machine is any raft.FSM. metalog never looks inside a command:
// it proposes the bytes it is given, waits until raft has committed them and
// the FSM has applied them, and hands back what the FSM returned. Streams,
// HTTP and Kubernetes live elsewhere (see DESIGN.md, "Metadata log").
//
// A single broker is a one-voter cluster. It goes through exactly the code
// path a multi-node cluster does — bootstrap, election, commit, apply —,
// only the quorum is itself, so a later cluster can grow from it by
// membership changes (AddNonvoter, then Promote) without a migration.
//
//	l, err := metalog.Open(metalog.Config{Dir: dir, NodeID: "broker-0", Bootstrap: true}, fsm)
//	resp, err := l.Apply(ctx, cmd)
//	defer l.Close()
//
// # Membership
//
// The configuration — which servers there are, at which address, and which
// of them vote — is itself replicated in the log. On the leader,
// AddNonvoter, AddVoter, Promote, DemoteVoter, RemoveServer and
// TransferLeadership change it (elsewhere they fail with ErrNotLeader);
// Configuration reads it, with the index of the entry that set it, on any
// node. These are the seam the cluster code builds on; nothing in metalog
// decides when to call them.
//
// # Files
//
// Config.Dir holds wal/, hashicorp/raft-wal's segment files (raft's
// LogStore) and its wal-meta.db (a small bbolt file: the StableStore's term
// and vote, and the segment index); snapshots/, raft's FileSnapshotStore
// keeping the two newest snapshots; and LOCK, flocked while a Log is open.
// A directory from before the WAL (a raft-boltdb raft.db) is migrated on
// Open and its raft.db renamed raft.db.migrated.
//
// # Latency and durability
//
// Every Apply is durable before it returns: the entry is fsynced to the WAL
// (one fsync of a preallocated segment per batch) before it counts towards
// the quorum. What keeps this cheap under load is group commit: the leader
// drains every proposal waiting in its apply channel (up to
// MaxAppendEntries) into ONE StoreLogs call, so N concurrent Apply calls
// share one fsync.
// Nothing on the commit path sleeps or waits for a timer; on a one-voter
// cluster an entry is committed as soon as the local write returns.
//
// If the FSM also implements raft.BatchingFSM, raft applies committed entries
// to it in batches as well.
package metalog
