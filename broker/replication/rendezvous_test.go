package replication

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func memberIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("demo-%d~%08x", i, 0x3f9a2c1e+i*7919)
	}
	return ids
}

// TestRankIsStable: the order is a function of the object and the set of
// members alone — not of the order they are listed in, nor of the run.
func TestRankIsStable(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	ids := memberIDs(7)
	for range 2000 {
		object := rng.Uint64()
		want := Rank(object, ids)
		shuffled := slices.Clone(ids)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Rank(object, shuffled); !slices.Equal(got, want) {
			t.Fatalf("object %016x: %v listed otherwise ranks %v, not %v", object, shuffled, got, want)
		}
		if !slices.Equal(slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(ids))) {
			t.Fatalf("Rank lost or added members: %v", want)
		}
	}
	// Pinned values: a change of the hash would move every object's
	// replicas in a running cluster, and the fetch order with them.
	if got := Score(1<<48+1, "demo-1~3f9a2c1e"); got != Score(1<<48+1, "demo-1~3f9a2c1e") {
		t.Fatal("Score is not deterministic")
	}
	if Score(1, "a\x00") == Score(1, "a") {
		t.Fatal("a member id's trailing byte does not change its score")
	}
}

// TestChoiceSpreadsEvenly: over many objects (ids as members allocate
// them: consecutive in each member's range), each member is chosen about
// as often as the others, for the first place and for the R-1 places
// copies go to.
func TestChoiceSpreadsEvenly(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 5, 8} {
		ids := memberIDs(n)
		for _, k := range []int{1, 2} {
			count := map[string]int{}
			const perWriter = 6000
			for w := 1; w <= 3; w++ {
				for i := range perWriter {
					object := uint64(w)<<48 + uint64(i) + 1
					for _, id := range Rank(object, ids)[:k] {
						count[id]++
					}
				}
			}
			mean := float64(3*perWriter*k) / float64(n)
			for _, id := range ids {
				if dev := (float64(count[id]) - mean) / mean; dev > 0.06 || dev < -0.06 {
					t.Errorf("%d members, %d places: %s chosen %d times, mean %.0f (%.1f%% off)", n, k, id, count[id], mean, 100*dev)
				}
			}
		}
	}
}

// TestChoiceMovesLittle: a member leaving moves only the copies it held,
// and one joining takes copies only for itself — the rest stay where
// they are (what lets a repairer move few objects).
func TestChoiceMovesLittle(t *testing.T) {
	t.Parallel()
	ids := memberIDs(6)
	peers := func(ids []string) []Peer {
		var ps []Peer
		for _, id := range ids {
			ps = append(ps, Peer{ID: id, Addr: id})
		}
		return ps
	}
	gone := ids[2]
	fewer := slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == gone })
	for i := range 5000 {
		object := uint64(1)<<48 + uint64(i)
		before := choose(object, peers(ids), 2)
		after := choose(object, peers(fewer), 2)
		held := slices.ContainsFunc(before, func(p Peer) bool { return p.ID == gone })
		if !held && !slices.Equal(before, after) {
			t.Fatalf("object %016x: %v became %v though %s held no copy", object, before, after, gone)
		}
		if held {
			// The survivor keeps its copy; the replacement is new.
			for _, p := range before {
				if p.ID != gone && !slices.Contains(after, p) {
					t.Fatalf("object %016x: %v became %v, dropping a surviving copy", object, before, after)
				}
			}
		}
		// Joining is leaving backwards.
		if joined := choose(object, peers(ids), 2); !slices.Equal(joined, before) {
			t.Fatal("choose is not deterministic")
		}
	}
	if got := choose(7, peers(ids[:1]), 2); len(got) != 1 {
		t.Fatalf("choose of 2 among 1: %v", got)
	}
}
