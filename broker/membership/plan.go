package membership

import (
	"maps"
	"slices"
	"strings"
)

// The leader's membership duties are planned by a pure function from what
// it sees — the configuration's servers, what the state machine records of
// them, which non-voters have caught up — to the next changes, one at a
// time (raft applies one configuration change at a time). The rules:
//
//   - a server whose member the state machine removed, or whose node has a
//     newer incarnation in the configuration (its directory was wiped and
//     it joined anew), goes;
//   - the cluster keeps an odd number of voters: 1 for one or two members,
//     3 for three or four, 5 from five on;
//   - voters are the lowest ordinals among the voters and the non-voters
//     that have caught up — a non-voter is promoted only once it has the
//     log, so that promoting it never stalls commits;
//   - add before remove: promotions come before demotions and removals,
//     and the leader is never demoted or removed without first handing its
//     leadership to a voter that stays;
//   - a voter is removed or demoted only while the voters left have a
//     majority that answers the leader.

// seen is one server of the configuration as the planner sees it.
type seen struct {
	ID       string
	Node     string
	Ordinal  int
	Number   int  // the member's number (0: not recorded)
	Voter    bool // votes now
	CaughtUp bool // a non-voter that has the log
	Removed  bool // the state machine removed its member for good
	// Answers: the server answered the leader this round (the leader
	// itself always does). Leadership is handed only to one that answers:
	// a transfer to a server that is down blocks every change until it
	// times out, and the next round would pick the same heir again.
	Answers bool
}

// step is one membership change.
type step struct {
	Kind stepKind
	ID   string // the server changed, or the leadership's new holder
}

type stepKind int

const (
	stepPromote stepKind = iota + 1
	stepDemote
	stepRemove
	stepTransfer
)

func (k stepKind) String() string {
	switch k {
	case stepPromote:
		return "promote"
	case stepDemote:
		return "demote"
	case stepRemove:
		return "remove"
	case stepTransfer:
		return "transfer leadership"
	}
	return "?"
}

// voterTarget is how many voters n members keep.
func voterTarget(n int) int {
	switch {
	case n >= 5:
		return 5
	case n >= 3:
		return 3
	case n >= 1:
		return 1
	}
	return 0
}

// planSteps returns the changes that bring the configuration to what the
// rules want, in the order to make them (the first is the next one), seen
// from the leader leader.
func planSteps(servers []seen, leader string) []step {
	// The newest incarnation of each node stays; the others go.
	newest := map[string]int{}
	for _, s := range servers {
		if !s.Removed && s.Number > newest[s.Node] {
			newest[s.Node] = s.Number
		}
	}
	var keep, gone []seen
	for _, s := range servers {
		superseded := s.Number > 0 && s.Number < newest[s.Node]
		if s.Removed || superseded {
			gone = append(gone, s)
		} else {
			keep = append(keep, s)
		}
	}
	slices.SortFunc(keep, func(a, b seen) int {
		if a.Ordinal != b.Ordinal {
			return a.Ordinal - b.Ordinal
		}
		return strings.Compare(a.ID, b.ID)
	})
	target := voterTarget(len(keep))
	want := map[string]bool{}
	for _, s := range keep {
		if len(want) == target {
			break
		}
		if s.Voter || s.CaughtUp {
			want[s.ID] = true
		}
	}

	var steps []step
	voters := 0
	for _, s := range keep {
		if s.Voter {
			voters++
		}
		if want[s.ID] && !s.Voter {
			steps = append(steps, step{stepPromote, s.ID})
			voters++
		}
	}
	// Whoever leaves the voters or the configuration must not be the
	// leader when it does: hand over first, to a voter that stays and
	// answers.
	heir := ""
	for _, s := range keep {
		if want[s.ID] && s.Voter && s.ID != leader && s.Answers {
			heir = s.ID
			break
		}
	}
	leaving := func(id string) []step {
		if id != leader {
			return nil
		}
		if heir == "" {
			return []step{} // nobody to hand over to yet: wait
		}
		return []step{{stepTransfer, heir}}
	}
	// A vote is taken away only while the voters left keep a majority
	// that answers: removing or demoting a voter while another voter is
	// down could leave no majority able to commit until that one is back
	// (etcd's strict reconfiguration check refuses the same).
	voting := map[string]bool{}
	for _, s := range servers {
		if s.Voter {
			voting[s.ID] = true
		}
	}
	for _, st := range steps {
		voting[st.ID] = true // promotions come first
	}
	answers := map[string]bool{}
	for _, s := range servers {
		answers[s.ID] = s.Answers || s.ID == leader
	}
	keepsMajority := func(id string) bool {
		_, _, ok := majorityWithout(slices.Collect(maps.Keys(voting)), func(v string) bool { return answers[v] }, id)
		return ok
	}
	for _, s := range gone {
		if voting[s.ID] && !keepsMajority(s.ID) {
			continue // wait until enough voters answer
		}
		if hand := leaving(s.ID); hand != nil {
			return append(steps, hand...)
		}
		steps = append(steps, step{stepRemove, s.ID})
		delete(voting, s.ID)
	}
	// Demote the extra voters, highest ordinals first, while more than the
	// target vote.
	for i := len(keep) - 1; i >= 0 && voters > target; i-- {
		s := keep[i]
		if !s.Voter || want[s.ID] || !keepsMajority(s.ID) {
			continue
		}
		if hand := leaving(s.ID); hand != nil {
			return append(steps, hand...)
		}
		steps = append(steps, step{stepDemote, s.ID})
		delete(voting, s.ID)
		voters--
	}
	return steps
}
