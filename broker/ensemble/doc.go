// Package ensemble holds the rules of the data path's replication, with no
// I/O (DESIGN.md, "Ensembles", "Recovery on open"): who holds an owner's
// objects, when an append is acknowledged, and what a recovery adopts. The
// owner, the replicas and the simulation tier all decide through these
// functions, so that the rules are written once and tested alone.
//
// # Who: Choose
//
// An owner's ensemble is R brokers: itself, then the R-1 live members
// ranked highest by rendezvous hashing on the owner's name. Every broker
// computes the same ensemble from the same live set, one owner's streams
// all share it (one group-commit object goes to one set of peers), and a
// member joining or leaving moves only the owners it ranks high for. The
// ensemble is recorded in the metadata log with each open; this is only
// how a new one is proposed.
//
// # When: the ack rule (ack.go)
//
// An object's part of a stream is acknowledged once a write quorum — a
// majority of R: 1 of 1, 2 of 2, 2 of 3, 3 of 5 — of every ensemble the
// object must reach has it durable, and every earlier part of that stream
// is acknowledged: a stream's appends are acknowledged in order, so an
// acknowledged offset never sits above one that may be lost. While an
// ensemble change is pending an object must reach a quorum of both the old
// and the new ensemble — every object not yet acknowledged, those that
// have their quorum and wait for an earlier part included: the change
// records the acknowledged end as of its proposal, and once it applies
// only the new ensemble is read. A member that answers is counted once; a
// member of neither ensemble is not counted.
//
// # What: the recovery chain (recovery.go)
//
// A new owner fences and reads, for every ensemble recorded since the
// stream's last checkpoint (those of opens whose recovery never committed
// included; an ensemble change is such a record, and checkpoints the end
// it names), at least R - Qw + 1 intact members of the recorded
// incarnation: then no write quorum of that ensemble is left unfenced, so
// every object acknowledged in it is among what was read (any write quorum
// meets any such set). From the checkpointed end it takes objects by
// epoch, oldest first: an epoch's objects count only below the start the
// log records for the next recovered epoch (that recovery adopted exactly
// what lay below it, and what lay above was never acknowledged: a dead
// tail that can never compete with a live one at one offset), and the
// last epoch's as far as they run contiguously. Objects of epochs older
// than the checkpoint's owner's are dead past the checkpoint (that owner
// recovered every acknowledged one below its own start), so a checkpoint
// lets go of the records before it — an ensemble change's included,
// whose old ensemble may never answer again. A gap below a recorded
// start, or two different objects at one offset of one epoch, is an error,
// not a choice: nothing is adopted from a read that contradicts the log.
package ensemble
