package repair

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func members(ms ...Member) []Member { return ms }

func live(id string) Member { return Member{ID: id, Live: true} }

func TestPlan(t *testing.T) {
	grace := 5 * time.Minute
	obj := Object{ID: 7, Size: 100, Replicas: []string{"a", "b", "c"}}
	cases := []struct {
		name    string
		members []Member
		objects []Object
		want    []Move
		stuck   int
	}{{
		name:    "every copy counts: nothing to do",
		members: members(live("a"), live("b"), live("c"), live("d")),
		objects: []Object{obj},
	}, {
		name:    "a member down within the grace still counts",
		members: members(live("a"), live("b"), Member{ID: "c", DownFor: time.Minute}, live("d")),
		objects: []Object{obj},
	}, {
		name:    "a member down past the grace: copy to d, drop c",
		members: members(live("a"), live("b"), Member{ID: "c", DownFor: 10 * time.Minute}, live("d")),
		objects: []Object{obj},
		want:    []Move{{Object: 7, Size: 100, From: "a", To: "d", Old: obj.Replicas, New: []string{"a", "b", "d"}}},
	}, {
		name:    "a removed member's copy is lost: copy from a live holder",
		members: members(Member{ID: "a", Removed: true}, live("b"), live("c"), live("d")),
		objects: []Object{obj},
		want:    []Move{{Object: 7, Size: 100, From: "b", To: "d", Old: obj.Replicas, New: []string{"b", "c", "d"}}},
	}, {
		name:    "a draining member's copy moves; it may be the source when it is the only live one",
		members: members(Member{ID: "a", Live: true, Draining: true, Leaving: true}, Member{ID: "b", DownFor: time.Minute}, Member{ID: "c", DownFor: time.Minute}, live("d")),
		objects: []Object{obj},
		want:    []Move{{Object: 7, Size: 100, From: "a", To: "d", Old: obj.Replicas, New: []string{"b", "c", "d"}}},
	}, {
		name:    "more copies than R that count: the set drops the departing one without a copy",
		members: members(live("a"), live("b"), live("c"), Member{ID: "x", Live: true, Draining: true, Leaving: true}),
		objects: []Object{{ID: 9, Size: 5, Replicas: []string{"x", "a", "b", "c"}}},
		want:    []Move{{Object: 9, Size: 5, Old: []string{"x", "a", "b", "c"}, New: []string{"a", "b", "c"}}},
	}, {
		name:    "two copies short: one copy a round, the departing copies kept until enough count",
		members: members(live("a"), Member{ID: "b", Removed: true}, Member{ID: "c", Removed: true}, live("d"), live("e")),
		objects: []Object{obj},
		want:    []Move{{Object: 7, Size: 100, From: "a", Old: obj.Replicas}},
	}, {
		name:    "no live holder: stuck",
		members: members(Member{ID: "a", Removed: true}, Member{ID: "b", DownFor: time.Hour}, Member{ID: "c", Removed: true}, live("d")),
		objects: []Object{obj},
		stuck:   1,
	}, {
		name:    "no member to copy to: stuck",
		members: members(live("a"), live("b"), Member{ID: "c", Removed: true}),
		objects: []Object{obj},
		stuck:   1,
	}, {
		name:    "a member that only hands its slots off (a graceful stop) keeps its copies, and gets no new one",
		members: members(live("a"), Member{ID: "b", Live: true, Draining: true}, Member{ID: "c", Removed: true}, Member{ID: "d", Live: true, Draining: true}, live("e")),
		objects: []Object{obj},
		want:    []Move{{Object: 7, Size: 100, From: "a", To: "e", Old: obj.Replicas, New: []string{"a", "b", "e"}}},
	}, {
		name:    "objects without a replica set are not moved",
		members: members(live("a")),
		objects: []Object{{ID: 3, Size: 1}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, sum := Plan(Input{Objects: c.objects, Members: c.members, R: 3, DownGrace: grace})
			if c.name == "two copies short: one copy a round, the departing copies kept until enough count" {
				// The target is the rendezvous pick among d and e.
				if len(got) != 1 || (got[0].To != "d" && got[0].To != "e") || !slices.Equal(got[0].New, append(slices.Clone(obj.Replicas), got[0].To)) {
					t.Fatalf("moves %+v", got)
				}
				return
			}
			if !slices.EqualFunc(got, c.want, equalMove) {
				t.Fatalf("moves %+v, want %+v", got, c.want)
			}
			if sum.Stuck != c.stuck {
				t.Errorf("stuck %d, want %d", sum.Stuck, c.stuck)
			}
		})
	}
}

func equalMove(a, b Move) bool {
	return a.Object == b.Object && a.Size == b.Size && a.From == b.From && a.To == b.To &&
		slices.Equal(a.Old, b.Old) && slices.Equal(a.New, b.New)
}

// TestPlanConverges runs rounds on random clusters, applying each round's
// moves as the log would: every object ends with R copies on members that
// count, a move never leaves fewer copies that count than before it, and
// the summary ends with nothing pending and each departing member holding
// nothing.
func TestPlanConverges(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 4 + rng.IntN(5)
		var ms []Member
		var ids []string
		for i := range n {
			id := string(rune('a' + i))
			ids = append(ids, id)
			ms = append(ms, live(id))
		}
		r := 1 + rng.IntN(3)
		var objs []Object
		for o := range 30 {
			perm := rng.Perm(n)
			set := make([]string, 0, r)
			for _, i := range perm[:r] {
				set = append(set, ids[i])
			}
			objs = append(objs, Object{ID: uint64(o + 1), Size: int64(rng.IntN(1000)), Replicas: set})
		}
		// Some members leave; at least R live ones stay and at least one
		// live holder of every object remains (else nothing can repair).
		departing := map[string]bool{}
		for i := range ms {
			if n-len(departing) > r && rng.IntN(3) == 0 {
				switch rng.IntN(2) {
				case 0:
					ms[i].Draining, ms[i].Leaving = true, true
				case 1:
					ms[i].Removed, ms[i].Live = true, false
				}
				departing[ms[i].ID] = true
			}
		}
		countsOf := func(o Object) int {
			k := 0
			for _, id := range o.Replicas {
				if !departing[id] {
					k++
				}
			}
			return k
		}
		recoverable := func(o Object) bool {
			for _, id := range o.Replicas {
				for _, m := range ms {
					if m.ID == id && m.Live {
						return true
					}
				}
			}
			return false
		}
		for round := 0; ; round++ {
			moves, sum := Plan(Input{Objects: objs, Members: ms, R: r, DownGrace: time.Minute, Max: 7})
			if len(moves) == 0 {
				for _, o := range objs {
					if recoverable(o) && countsOf(o) != r {
						t.Fatalf("seed %d: object %d ends with %v (%d that count), want %d", seed, o.ID, o.Replicas, countsOf(o), r)
					}
					for _, id := range o.Replicas {
						if departing[id] && recoverable(o) {
							t.Fatalf("seed %d: object %d still names departing %s: %v", seed, o.ID, id, o.Replicas)
						}
					}
				}
				if sum.Pending != sum.Stuck {
					t.Fatalf("seed %d: no move but %d pending, %d stuck", seed, sum.Pending, sum.Stuck)
				}
				break
			}
			if round > 100 {
				t.Fatalf("seed %d: no convergence after 100 rounds", seed)
			}
			for _, mv := range moves {
				i := int(mv.Object - 1)
				if !slices.Equal(objs[i].Replicas, mv.Old) {
					t.Fatalf("seed %d: move planned on %v, set is %v", seed, mv.Old, objs[i].Replicas)
				}
				before := countsOf(objs[i])
				objs[i].Replicas = mv.New
				if after := countsOf(objs[i]); after < before {
					t.Fatalf("seed %d: move %+v left %d copies that count, %d before", seed, mv, after, before)
				}
				if mv.To != "" && departing[mv.To] {
					t.Fatalf("seed %d: copy to departing %s", seed, mv.To)
				}
			}
		}
	}
}
