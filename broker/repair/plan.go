// Package repair keeps every committed object at R copies on members that
// stay: when a replica sits on a member that was removed, that leaves, or
// that has been down longer than a grace (Kafka's and Redpanda's
// "wait before re-replicating"), the metadata leader copies the object
// from a live holder to another member and commits the new replica set
// (meta's replicas command, refused unless the set is still the one the
// move was planned on). A copy leaves a replica set only in the command
// that names its replacement, so an object never has fewer durable copies
// than before a move; the file the set no longer names becomes an orphan
// on its member, collected after the orphan grace.
//
// Plan is a pure function from what the leader sees to the moves of one
// round; Runner runs rounds on the leader.
package repair

import (
	"slices"
	"time"

	"github.com/picomq/picomq/broker/replication"
)

// Member is a member of the cluster as a round sees it.
type Member struct {
	ID string
	// Live: its member Lease is current (it serves copies and takes them).
	Live bool
	// Draining: it hands its slots off (a graceful stop, or a drain): it
	// takes no new copy, but the copies it holds still count.
	Draining bool
	// Leaving: it drains to leave the cluster: its copies move to members
	// that stay.
	Leaving bool
	// Removed: removed for good; its copies are lost.
	Removed bool
	// DownFor is how long it has not been live (0 when live).
	DownFor time.Duration
}

// Object is a committed object with a replica set.
type Object struct {
	ID       uint64
	Size     int64
	Replicas []string
}

// Input is what a round plans from.
type Input struct {
	Objects []Object
	Members []Member
	// R is how many copies each object keeps (at most the members that
	// stay).
	R int
	// DownGrace is how long a member may be down before its copies are
	// made again elsewhere; until then it keeps counting as a copy.
	DownGrace time.Duration
	// Max bounds the moves of one round (0: no bound).
	Max int
}

// Move is one change of an object's replica set: copy the object from
// From to To (none when To is empty: the set only drops copies it no
// longer needs), then commit New in place of Old.
type Move struct {
	Object   uint64
	Size     int64
	From, To string
	Old, New []string
	// Others are the live holders to copy from, in order, when From
	// holds no copy after all: the runner then drops each that answered
	// so from New (a set names copies, and repair counts each name as
	// one).
	Others []string
}

// Summary is what is left to do, for status and metrics.
type Summary struct {
	// Pending objects need a move; PendingBytes their size.
	Pending      int
	PendingBytes int64
	// Stuck objects need a move no member can make now: no live holder
	// (every copy is down or lost), or no member to copy to.
	Stuck int
	// StuckExamples are the first few stuck objects, for the logs.
	StuckExamples []Object
	// Held counts, per member, the objects whose replica set names it.
	Held map[string]int
	// HeldBytes is the size of those objects, per member.
	HeldBytes map[string]int64
}

// maxStuckExamples bounds Summary.StuckExamples.
const maxStuckExamples = 3

// Plan returns the moves of one round, in object order, at most one per
// object (each makes one copy: an object short of several copies gets
// them over several rounds), and the summary of what is left.
//
// For each object, the copies that count are those on members that are
// neither removed nor leaving, and are live or down for less than the
// grace. With R of them, the set drops the others (no copy). With fewer,
// one more copy is made from a live holder — one that stays first, in the
// set's order; the runner tries the others (Move.Others) when one answers
// it holds no copy — to a live member that stays and holds none, picked by
// rendezvous hashing (every leader picks the same), and the set keeps its
// departing copies until enough copies that count exist.
func Plan(in Input) ([]Move, Summary) {
	byID := make(map[string]Member, len(in.Members))
	for _, m := range in.Members {
		byID[m.ID] = m
	}
	counts := func(id string) bool {
		m, ok := byID[id]
		return ok && !m.Removed && !m.Leaving && (m.Live || m.DownFor < in.DownGrace)
	}
	live := func(id string) bool {
		m, ok := byID[id]
		return ok && !m.Removed && m.Live
	}
	var targets []string
	for _, m := range in.Members {
		if m.Live && !m.Removed && !m.Draining && !m.Leaving {
			targets = append(targets, m.ID)
		}
	}
	sum := Summary{Held: map[string]int{}, HeldBytes: map[string]int64{}}
	var moves []Move
	for _, o := range in.Objects {
		if len(o.Replicas) == 0 {
			continue
		}
		for _, id := range o.Replicas {
			sum.Held[id]++
			sum.HeldBytes[id] += o.Size
		}
		var stay, leave []string
		for _, id := range o.Replicas {
			if slices.Contains(stay, id) || slices.Contains(leave, id) {
				continue // a set names each member once; be safe
			}
			if counts(id) {
				stay = append(stay, id)
			} else {
				leave = append(leave, id)
			}
		}
		if len(leave) == 0 && len(stay) >= in.R {
			continue
		}
		sum.Pending++
		sum.PendingBytes += o.Size
		if in.Max > 0 && len(moves) >= in.Max {
			continue
		}
		if len(stay) >= in.R {
			moves = append(moves, Move{Object: o.ID, Size: o.Size, Old: o.Replicas, New: stay})
			continue
		}
		var sources []string
		for _, id := range append(slices.Clone(stay), leave...) {
			if live(id) {
				sources = append(sources, id)
			}
		}
		from := ""
		if len(sources) > 0 {
			from = sources[0]
		}
		to := ""
		for _, id := range replication.Rank(o.ID, targets) {
			if !slices.Contains(o.Replicas, id) {
				to = id
				break
			}
		}
		if from == "" || to == "" {
			sum.Stuck++
			if len(sum.StuckExamples) < maxStuckExamples {
				sum.StuckExamples = append(sum.StuckExamples, o)
			}
			continue
		}
		var next []string
		if len(stay)+1 >= in.R {
			next = append(slices.Clone(stay), to)
		} else {
			next = append(slices.Clone(o.Replicas), to)
		}
		moves = append(moves, Move{Object: o.ID, Size: o.Size, From: from, To: to, Old: o.Replicas, New: next, Others: sources[1:]})
	}
	return moves, sum
}
