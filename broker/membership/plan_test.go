package membership

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestVoterTarget(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{0: 0, 1: 1, 2: 1, 3: 3, 4: 3, 5: 5, 6: 5, 9: 5} {
		if got := voterTarget(n); got != want {
			t.Errorf("voterTarget(%d) = %d, want %d", n, got, want)
		}
	}
}

func srv(i int, voter, caughtUp bool) seen {
	return seen{ID: fmt.Sprintf("b-%d~x", i), Node: fmt.Sprintf("b-%d", i), Ordinal: i, Number: i + 1, Voter: voter, CaughtUp: caughtUp, Answers: true}
}

func down(s seen) seen { s.Answers = false; return s }

func TestPlanSteps(t *testing.T) {
	t.Parallel()
	wiped := seen{ID: "b-2~new", Node: "b-2", Ordinal: 2, Number: 9, CaughtUp: true}
	for _, c := range []struct {
		name    string
		servers []seen
		leader  string
		want    []step
	}{
		{"a lone voter", []seen{srv(0, true, false)}, "b-0~x", nil},
		{"two members keep one voter", []seen{srv(0, true, false), srv(1, false, true)}, "b-0~x", nil},
		{"the third caught up is promoted", []seen{srv(0, true, false), srv(1, false, true), srv(2, false, true)}, "b-0~x",
			[]step{{stepPromote, "b-1~x"}, {stepPromote, "b-2~x"}}},
		{"one not caught up waits", []seen{srv(0, true, false), srv(1, false, true), srv(2, false, false)}, "b-0~x",
			[]step{{stepPromote, "b-1~x"}}},
		{"four keep three voters, lowest ordinals", []seen{srv(0, true, false), srv(1, true, false), srv(2, true, false), srv(3, false, true)}, "b-0~x", nil},
		{"a lower ordinal caught up replaces a higher voter, added before removed",
			[]seen{srv(0, false, true), srv(1, true, false), srv(2, true, false), srv(3, true, false)}, "b-1~x",
			[]step{{stepPromote, "b-0~x"}, {stepDemote, "b-3~x"}}},
		{"a wiped broker's old incarnation goes after the new one is promoted",
			[]seen{srv(0, true, false), srv(1, true, false), srv(2, true, false), wiped}, "b-0~x",
			[]step{{stepPromote, "b-2~new"}, {stepRemove, "b-2~x"}}},
		{"a removed member goes", []seen{srv(0, true, false), {ID: "b-1~x", Node: "b-1", Ordinal: 1, Number: 2, Voter: true, Removed: true}}, "b-0~x",
			[]step{{stepRemove, "b-1~x"}}},
		{"the leader hands over before it is demoted",
			[]seen{srv(0, false, true), srv(1, true, false), srv(2, true, false), srv(3, true, false)}, "b-3~x",
			[]step{{stepPromote, "b-0~x"}, {stepTransfer, "b-1~x"}}},
		{"the leader hands over to a voter that answers, not to one that is down",
			[]seen{down(srv(0, true, false)), srv(1, true, false), srv(2, true, false), {ID: "b-2~old", Node: "b-2", Ordinal: 2, Number: 1, Voter: true, Removed: true, Answers: true}}, "b-2~old",
			[]step{{stepTransfer, "b-1~x"}}},
		{"a removed voter stays while the voters left would have no majority that answers",
			[]seen{srv(0, true, false), down(srv(1, true, false)), down(srv(2, true, false)), {ID: "b-3~x", Node: "b-3", Ordinal: 3, Number: 4, Voter: true, Removed: true, Answers: true}}, "b-0~x",
			nil},
		{"an extra voter is not demoted while the voters left would have no majority that answers",
			[]seen{srv(0, true, false), down(srv(1, true, false)), down(srv(2, true, false)), srv(3, true, false)}, "b-0~x",
			nil},
		{"with the others answering, the extra voter is demoted",
			[]seen{srv(0, true, false), down(srv(1, true, false)), srv(2, true, false), srv(3, true, false)}, "b-0~x",
			[]step{{stepDemote, "b-3~x"}}},
		{"with no voter that answers to hand over to, the leader waits",
			[]seen{down(srv(0, true, false)), down(srv(1, true, false)), {ID: "b-2~x", Node: "b-2", Ordinal: 2, Number: 3, Voter: true, Removed: true, Answers: true}}, "b-2~x",
			[]step{}},
	} {
		if got := planSteps(c.servers, c.leader); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPlanStepsConverge: from random configurations, making the planned
// steps one by one ends with an odd number of voters — the target, lowest
// ordinals, when enough have caught up — never demoting or removing the
// leader, never promoting a server that has not caught up.
func TestPlanStepsConverge(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 2000 {
		n := 1 + r.IntN(7)
		var servers []seen
		for i := range n {
			servers = append(servers, srv(i, r.IntN(2) == 0, r.IntN(3) > 0))
		}
		servers[0].Voter = true // someone leads
		leader := servers[r.IntN(n)]
		if !leader.Voter {
			leader = servers[0]
		}
		lead := leader.ID
		for round := 0; ; round++ {
			if round > 50 {
				t.Fatalf("trial %d: no convergence: %+v", trial, servers)
			}
			steps := planSteps(servers, lead)
			if len(steps) == 0 {
				break
			}
			s := steps[0]
			i := slices.IndexFunc(servers, func(x seen) bool { return x.ID == s.ID })
			switch s.Kind {
			case stepPromote:
				if !servers[i].CaughtUp {
					t.Fatalf("trial %d: promoted %s, not caught up", trial, s.ID)
				}
				servers[i].Voter = true
			case stepDemote:
				if s.ID == lead {
					t.Fatalf("trial %d: demoted the leader", trial)
				}
				servers[i].Voter = false
			case stepRemove:
				if s.ID == lead {
					t.Fatalf("trial %d: removed the leader", trial)
				}
				servers = slices.Delete(servers, i, i+1)
			case stepTransfer:
				if !servers[i].Voter {
					t.Fatalf("trial %d: leadership to a non-voter", trial)
				}
				lead = s.ID
			}
		}
		voters, eligible := 0, 0
		for _, s := range servers {
			if s.Voter {
				voters++
			}
			if s.Voter || s.CaughtUp {
				eligible++
			}
		}
		if want := min(voterTarget(len(servers)), eligible); voters != want && voters > voterTarget(len(servers)) {
			t.Fatalf("trial %d: %d voters of %d servers, want %d: %+v", trial, voters, len(servers), want, servers)
		}
		if voters > voterTarget(len(servers)) || voters%2 == 0 && eligible >= voterTarget(len(servers)) {
			t.Fatalf("trial %d: %d voters of %d servers (target %d): %+v", trial, voters, len(servers), voterTarget(len(servers)), servers)
		}
	}
}
