package ownership

import (
	"strconv"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// TestOwnAnswerAfterANewerWrite: a broker hands a slot off (clears its
// holder) and the taker's write reaches its cache before it handles the
// answer to its own clear. The taker's version is the newer one: the
// broker must see the slot held by the taker, then and at every later
// look of a cache still behind — not free for as long as the taker holds
// it (no renewal rewrites a slot Lease, so nothing would correct it: a
// cordoned broker answered NO_SLOT_OWNER for the slot while another
// served it).
func TestOwnAnswerAfterANewerWrite(t *testing.T) {
	s := newTimingSim(t, 4)
	a := s.start("demo-0", "")
	b := s.start("demo-1", "")
	s.settle()
	held := a.m.Held()
	if len(held) == 0 {
		t.Fatal("a holds no slot")
	}
	slot := held[0]
	var cur *coordinationv1.Lease
	for _, l := range s.api.snapshot(simNS) {
		if l.Name == SlotLeaseName("demo", slot) {
			cur = l
		}
	}
	if cur == nil || holderOf(cur) != a.id {
		t.Fatalf("slot %d's Lease %+v, want it held by %s", slot, cur, a.id)
	}
	rv, err := strconv.ParseInt(cur.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	version := func(n int64, holder string) *coordinationv1.Lease {
		l := cur.DeepCopy()
		l.ResourceVersion = strconv.FormatInt(rv+n, 10)
		l.Spec.HolderIdentity = nil
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	cleared, taken := version(1000, ""), version(1001, b.id)

	a.m.observeLease(taken) // the cache, first
	a.m.mu.Lock()           // then the answer to the clear, as clear() handles it
	delete(a.m.held, slot)
	a.m.observeOwnLocked(cleared, cur.ResourceVersion, a.clk.Now())
	a.m.mu.Unlock()
	if id, live := a.m.Owner(slot); id != b.id || !live {
		t.Fatalf("after its clear's answer, a sees slot %d held by %q (live %v), want %s, who took it after", slot, id, live, b.id)
	}
	// A cache still behind (showing the clear, or the version before it)
	// changes nothing; the taker's Lease as it is does not either.
	for _, l := range []*coordinationv1.Lease{cleared, cur, taken} {
		a.m.observeLease(l)
		if id, _ := a.m.Owner(slot); id != b.id {
			t.Fatalf("a cache showing version %s: a sees slot %d held by %q, want %s", l.ResourceVersion, slot, id, b.id)
		}
	}
	// A write newer than all of them is taken as it comes.
	next := version(1002, "")
	a.m.observeLease(next)
	if id, _ := a.m.Owner(slot); id != "" {
		t.Fatalf("after the taker cleared it, a sees slot %d held by %q", slot, id)
	}
}
