package ownership

import (
	"testing"
	"time"
)

// counts reads the fake server's counters under its lock.
func (a *fakeAPI) counts() (slotWrites, memberWrites, fences int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slotWrites, a.memberWrites, a.fences
}

// TestRenewalsWriteOnlyMemberLeases: in a settled cluster the API server
// takes one write per broker per RetryPeriod — its member Lease — however
// many slots it holds; slot Leases are written when their holder changes.
func TestRenewalsWriteOnlyMemberLeases(t *testing.T) {
	s := newTimingSim(t, 64)
	for i := range 3 {
		s.start("demo-"+string(rune('0'+i)), "")
	}
	s.settle()
	slot0, member0, _ := s.api.counts()
	const periods = 20
	s.advance(periods * s.rp)
	slot1, member1, _ := s.api.counts()
	if n := slot1 - slot0; n != 0 {
		t.Errorf("%d slot Lease writes in %d quiet periods, want 0", n, periods)
	}
	// Each broker renews once per period (its phase decides whether the
	// first and last fall inside the window).
	if n := member1 - member0; n < 3*(periods-1) || n > 3*(periods+1) {
		t.Errorf("%d member Lease writes in %d periods by 3 brokers, want about %d", n, periods, 3*periods)
	}
	for _, n := range s.nodes {
		if got := served(n, 64); got < 21 || got > 22 {
			t.Errorf("%s serves %d slots, want its share of 64", n.id, got)
		}
	}
}

// TestTakeFencesTheHoldersMemberLease: a holder paused past LeaseDuration
// has its member Lease written naming nobody by the broker that takes its
// slots (one fence for all of them), and once resumed it serves none of
// them again: its renewal finds the Lease not its own, so it must write
// each slot's Lease again, and those writes fail against the takes. It is
// live again at once and gets its share back by hand-offs.
func TestTakeFencesTheHoldersMemberLease(t *testing.T) {
	s := newTimingSim(t, 8)
	a := s.start("demo-0", "")
	b := s.start("demo-1", "")
	s.settle()
	aSlots := a.m.Held()
	if len(aSlots) != 4 {
		t.Fatalf("a holds %v, want 4 slots", aSlots)
	}
	_, _, fences0 := s.api.counts()
	s.pause(a)
	s.advance(s.ld + 3*s.rp)
	if got := served(b, 8); got != 8 {
		t.Fatalf("b serves %d slots LeaseDuration after a stopped, want 8", got)
	}
	if _, _, fences := s.api.counts(); fences-fences0 != 1 {
		t.Fatalf("%d fences for one holder's %d slots, want 1", fences-fences0, len(aSlots))
	}
	if h := s.api.holder(simNS, MemberLeaseName("demo", a.name)); h != "" {
		t.Fatalf("a's member Lease names %q after the takes, want nobody", h)
	}
	revokes := a.revokes
	s.resume(a) // wakes it once, and checks that it revoked what b acquired meanwhile
	if held := a.m.Held(); len(held) != 0 || served(a, 8) != 0 {
		t.Fatalf("a resumed holding %v, serving %d: its slot writes should have failed against b's takes", held, served(a, 8))
	}
	if a.revokes != revokes+4 {
		t.Fatalf("a revoked %d slots on resuming, want 4", a.revokes-revokes)
	}
	if h := s.api.holder(simNS, MemberLeaseName("demo", a.name)); h != a.id {
		t.Fatalf("a's member Lease names %q after it resumed, want %s", h, a.id)
	}
	s.settle()
	if served(a, 8) != 4 || served(b, 8) != 4 {
		t.Fatalf("after settling: a serves %d, b %d; want 4 and 4", served(a, 8), served(b, 8))
	}
}

// TestMemberLeaseRecreatedRewritesSlots: a holder whose member Lease
// vanished (deleted by hand) creates it again; that write continues no
// version naming it — a broker that saw no Lease naming it may be taking
// its slots — so it stops serving them until it has written each slot's
// Lease again, and serves them after that.
func TestMemberLeaseRecreatedRewritesSlots(t *testing.T) {
	s := newTimingSim(t, 2)
	a := s.start("demo-0", "")
	s.settle()
	versions := map[int]string{}
	for _, l := range s.api.snapshot(simNS) {
		if slot, ok := slotOfLease("demo", 2, l.Name); ok {
			versions[slot] = l.ResourceVersion
		}
	}
	s.api.mu.Lock()
	if err := s.api.tracker.Delete(leaseGVR, simNS, MemberLeaseName("demo", a.name)); err != nil {
		t.Fatal(err)
	}
	s.api.mu.Unlock()
	revokes, acquires := a.revokes, a.acquires
	s.advance(s.rp + time.Millisecond)
	if a.revokes != revokes+2 {
		t.Fatalf("a revoked %d slots after recreating its member Lease, want 2", a.revokes-revokes)
	}
	for _, l := range s.api.snapshot(simNS) {
		if slot, ok := slotOfLease("demo", 2, l.Name); ok && l.ResourceVersion == versions[slot] {
			t.Fatalf("slot %d's Lease was not written again", slot)
		}
	}
	s.advance(2 * s.rp)
	if served(a, 2) != 2 || a.acquires != acquires+2 {
		t.Fatalf("a serves %d slots (acquired %d again), want both", served(a, 2), a.acquires-acquires)
	}
}

// TestFailoverWithinLeaseDurationAndAPeriod: a holder killed at any phase
// of its period has every slot served by the survivors within
// LeaseDuration plus RetryPeriod (plus the fence and takes, which the
// fake server answers at once) — both survivors, not only the one that
// fenced: the others take at once what a fence left.
func TestFailoverWithinLeaseDurationAndAPeriod(t *testing.T) {
	for phase := range 5 {
		s := newTimingSim(t, 24)
		a := s.start("demo-0", "")
		b := s.start("demo-1", "")
		c := s.start("demo-2", "")
		s.settle()
		s.advance(time.Duration(phase) * s.rp / 5)
		s.crash(a)
		died := s.now
		for served(b, 24)+served(c, 24) != 24 {
			s.advance(10 * time.Millisecond)
			if s.now.Sub(died) > 2*s.ld {
				t.Fatalf("phase %d: b and c serve %d and %d slots %v after a died", phase, served(b, 24), served(c, 24), s.now.Sub(died))
			}
		}
		if took := s.now.Sub(died); took > s.ld+s.rp+10*time.Millisecond {
			t.Errorf("phase %d: failover took %v, want at most LeaseDuration + RetryPeriod = %v", phase, took, s.ld+s.rp)
		}
		if served(b, 24) != 12 || served(c, 24) != 12 {
			t.Errorf("phase %d: b serves %d, c %d; want 12 each", phase, served(b, 24), served(c, 24))
		}
	}
}

// TestTakeSurvivesACacheBehindIt: a broker whose cache has not yet seen
// its own takes (an informer that lags) keeps the slots it took: the
// version its take wrote over, naming the holder before it, is no sign
// that another took them since.
func TestTakeSurvivesACacheBehindIt(t *testing.T) {
	s := newTimingSim(t, 4)
	a := s.start("demo-0", "")
	b := s.start("demo-1", "")
	s.settle()
	s.crash(a)
	died := s.now
	for served(b, 4) != 4 {
		s.advance(10 * time.Millisecond)
		if s.now.Sub(died) > 2*s.ld {
			t.Fatalf("b serves %d slots %v after a died", served(b, 4), s.now.Sub(died))
		}
	}
	s.refresh = 0 // b's view stays the one it decided its takes from
	lost := b.revokes
	s.advance(4 * s.rp)
	if served(b, 4) != 4 || b.revokes != lost {
		t.Fatalf("b serves %d slots and revoked %d with a cache behind its takes, want 4 and none", served(b, 4), b.revokes-lost)
	}
}

// TestSettledOnceServingItsShare: a broker that joins is Settled only once
// it serves its fair share — the others handed it slots, so they count it
// live — and stays so while shares change.
func TestSettledOnceServingItsShare(t *testing.T) {
	s := newTimingSim(t, 12)
	a := s.start("demo-0", "")
	s.settle()
	if !a.m.Settled() {
		t.Fatal("a lone broker serving every slot is not Settled")
	}
	b := s.start("demo-1", "")
	if b.m.Settled() {
		t.Fatal("a broker that has not woken yet is Settled")
	}
	for !b.m.Settled() {
		if served(b, 12) >= 6 {
			t.Fatalf("b serves %d slots, its share, and is not Settled", served(b, 12))
		}
		s.advance(10 * time.Millisecond)
		if s.now.Sub(time.Unix(1_700_000_000, 0)) > time.Hour {
			t.Fatal("b never settled")
		}
		if b.m.Settled() && served(b, 12) < 6 {
			t.Fatalf("b Settled while serving %d of its 6 slots", served(b, 12))
		}
	}
	c := s.start("demo-2", "")
	s.settle()
	if !c.m.Settled() || !b.m.Settled() {
		t.Fatalf("after a third joined: b settled %v, c settled %v", b.m.Settled(), c.m.Settled())
	}
}
