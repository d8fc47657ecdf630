package ownership

import (
	"fmt"
	"slices"
	"testing"
)

// Shares add up to the slots and differ by at most one; lower ranks get
// the remainder; a member not live gets none.
func TestTargetShare(t *testing.T) {
	for slots := 1; slots <= 70; slots++ {
		for n := 1; n <= 7; n++ {
			var live []string
			for i := range n {
				live = append(live, fmt.Sprintf("demo-%d/x", (i*7)%11))
			}
			sum, lo, hi := 0, slots, 0
			for _, id := range live {
				s := targetShare(id, live, slots)
				sum += s
				lo, hi = min(lo, s), max(hi, s)
			}
			if sum != slots || hi-lo > 1 {
				t.Fatalf("slots %d members %d: sum %d range %d..%d", slots, n, sum, lo, hi)
			}
		}
	}
	live := []string{"c", "a", "b"}
	if got := []int{targetShare("a", live, 16), targetShare("b", live, 16), targetShare("c", live, 16)}; !slices.Equal(got, []int{6, 5, 5}) {
		t.Errorf("16 over a,b,c = %v, want 6 5 5", got)
	}
	if targetShare("d", live, 16) != 0 {
		t.Error("a member not live has a share")
	}
}

// Rendezvous: removing a member moves only the slots it preferred.
func TestPreferredMovesOnlyTheRemovedMembersSlots(t *testing.T) {
	all := []string{"demo-0/a", "demo-1/b", "demo-2/c", "demo-3/d"}
	less := all[:3]
	counts := map[string]int{}
	for s := range 256 {
		p := preferred(all, s)
		counts[p]++
		if q := preferred(less, s); p != all[3] && q != p {
			t.Fatalf("slot %d moved from %s to %s though %s stayed", s, p, q, p)
		}
		if rank(p, all, s) != 0 {
			t.Fatalf("slot %d: preferred %s has rank %d", s, p, rank(p, all, s))
		}
	}
	for _, id := range all {
		if counts[id] < 32 { // 64 expected each
			t.Errorf("rendezvous is lopsided: %v", counts)
		}
	}
}

// Hand-offs give up first the slots someone else prefers.
func TestOrderToReleasePrefersOthersSlots(t *testing.T) {
	live := []string{"a", "b", "c"}
	held := []int{}
	for s := range 30 {
		held = append(held, s)
	}
	orderToRelease("a", live, held)
	seenMine := false
	for _, s := range held {
		mine := preferred(live, s) == "a"
		if !mine && seenMine {
			t.Fatalf("slot %d preferred elsewhere comes after one a prefers: %v", s, held)
		}
		seenMine = seenMine || mine
	}
}

func TestLeaseNames(t *testing.T) {
	if n, ok := slotOfLease("demo", 64, "demo-slot-63"); !ok || n != 63 {
		t.Error("demo-slot-63")
	}
	for _, bad := range []string{"demo-slot-64", "demo-slot-", "demo-slot-01", "demo-slot--1", "other-slot-1", "demo-member-demo-0"} {
		if _, ok := slotOfLease("demo", 64, bad); ok {
			t.Errorf("%s read as a slot", bad)
		}
	}
	if n, ok := nodeOfMemberLease("demo", MemberLeaseName("demo", "demo-2")); !ok || n != "demo-2" {
		t.Error("member name")
	}
}
