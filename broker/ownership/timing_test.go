package ownership

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/picomq/picomq/broker/errs"
)

// Short timings for the targeted tests: LeaseDuration 3s, RenewDeadline
// 2s, RetryPeriod 500ms.
func newTimingSim(t *testing.T, slots int) *sim {
	s := newSim(t, 7, slots, 3*time.Second, 2*time.Second, 500*time.Millisecond)
	s.refresh = 1 // every broker sees every change at its next wake
	return s
}

func served(n *simNode, slots int) int {
	k := 0
	for s := range slots {
		if n.m.Serving(s) {
			k++
		}
	}
	return k
}

// The timing rule: a holder serves until the send time of its last
// successful renew plus RenewDeadline, measured by MayOpen itself (the
// loop need not run), and the loop calls Revoke once per slot then, with
// the API server unreachable. Sent, not answered: a renew that takes long
// to answer does not extend serving by its latency.
func TestTimingRuleStopsAtSentPlusRenewDeadline(t *testing.T) {
	s := newTimingSim(t, 1)
	a := s.start("demo-0", "")
	s.settle()

	// The next renewal (of the member Lease, which keeps the slots) is
	// slow: 300ms pass on a's clock before it applies.
	s.api.beforeUpdate = func(writer, name string) {
		if writer == a.id && name == MemberLeaseName("demo", a.name) {
			a.clk.Step(300 * time.Millisecond)
		}
	}
	sentAt := a.next // a's next wake is its next period
	s.advance(a.next.Add(-a.offset).Sub(s.now))
	s.api.beforeUpdate = nil
	if got := a.m.Status().LastRenew; !got.Equal(sentAt) {
		t.Fatalf("last renew %v, want the send time %v", got, sentAt)
	}
	a.clk.Step(-300 * time.Millisecond) // back in step with global time
	a.down.Store(true)

	deadline := sentAt.Add(s.rd)
	toGlobal := func(own time.Time) time.Time { return own.Add(-a.offset) }
	// Move time without waking a: MayOpen must decide alone.
	s.setNow(toGlobal(deadline).Add(-time.Nanosecond))
	if !a.m.Serving(0) || a.m.MayOpen(42) != nil {
		t.Fatalf("not serving 1ns before the deadline: %v", a.m.MayOpen(42))
	}
	s.setNow(toGlobal(deadline))
	err := a.m.MayOpen(42)
	if a.m.Serving(0) || !errors.Is(err, NotSlotOwner) {
		t.Fatalf("still serving at the deadline: MayOpen = %v", err)
	}
	if r, _ := errs.FieldOf(err, "reason"); r != "renew deadline passed" {
		t.Errorf("reason %v", r)
	}
	if errs.HTTPStatus(err) != 503 || errs.ExitCode(err) != 75 {
		t.Errorf("status %d exit %d, want 503/75", errs.HTTPStatus(err), errs.ExitCode(err))
	}
	if a.revokes != 0 {
		t.Fatalf("Revoke before the loop ran: %d", a.revokes)
	}
	s.wake(a)
	if a.revokes != 1 {
		t.Fatalf("revokes after the deadline's wake: %d, want 1", a.revokes)
	}
	s.advance(5 * s.rp)
	if a.revokes != 1 || a.m.Serving(0) {
		t.Fatalf("revokes %d serving %v while the API server is down", a.revokes, a.m.Serving(0))
	}
	if st := a.m.Status(); st.LastRenewError == "" || st.SlotsHeld != 1 || st.Serving != 0 {
		t.Errorf("status while down: %+v", st)
	}

	// The API server comes back before anyone else took the slot: a's
	// renew succeeds, so it holds the slot again and serves after Acquire.
	a.down.Store(false)
	s.advance(2 * s.rp)
	if !a.m.Serving(0) || a.acquires != 2 {
		t.Fatalf("serving %v after the API server came back, acquires %d", a.m.Serving(0), a.acquires)
	}
	if st := a.m.Status(); st.LastRenewError != "" {
		t.Errorf("renew error kept after a successful period: %q", st.LastRenewError)
	}
}

// A broker takes a slot another holds only LeaseDuration after it first
// saw the Lease's current version, on its own clock, wherever its clock
// stands against the holder's (hours ahead or behind: renewTime is never
// compared with it).
func TestTakeWaitsLeaseDurationOfTakersClock(t *testing.T) {
	for _, offset := range []time.Duration{5 * time.Hour, -5 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			s := newTimingSim(t, 16)
			a := s.start("demo-0", "")
			s.settle()
			s.pause(a) // a's Leases stop changing now
			s.advance(700 * time.Millisecond)

			b := s.start("demo-1", "")
			s.setOffset(b, offset)
			firstSeen := s.now
			s.advance(s.ld - time.Nanosecond)
			if h := len(b.m.Held()); h != 0 {
				t.Fatalf("b holds %d slots %v after it first saw them, before LeaseDuration", h, s.now.Sub(firstSeen))
			}
			s.advance(time.Nanosecond)
			if h := served(b, 16); h != 16 {
				t.Fatalf("b serves %d slots at LeaseDuration after it first saw them, want 16", h)
			}
			// a wakes: its first act is to Revoke all it served.
			s.resume(a)
			if a.revokes != 16 || len(a.m.Held()) != 0 {
				t.Fatalf("a resumed: revokes %d held %v", a.revokes, a.m.Held())
			}
			s.settle()
		})
	}
}

// A hand-off between live brokers: the holder stops serving the slot,
// Releases it while its Lease still names it, then clears the holder, and
// the newcomer takes it free — within a few periods, never waiting for an
// expiry, and with no Revoke.
func TestHandOffReleasesBeforeClearing(t *testing.T) {
	s := newTimingSim(t, 16)
	a := s.start("demo-0", "")
	s.settle()
	a.onRelease = func(slot int) {
		if h := s.api.holder(simNS, SlotLeaseName("demo", slot)); h != a.id {
			t.Errorf("Release(%d) called after the holder changed to %q", slot, h)
		}
		if err := a.m.MayOpen(uint64(slot)); !errors.Is(err, NotSlotOwner) {
			t.Errorf("MayOpen(%d) during its Release: %v", slot, err)
		}
	}
	start := s.now
	s.start("demo-1", "")
	for s.converged() != "" {
		s.advance(s.rp)
		if s.now.Sub(start) > s.ld {
			t.Fatalf("hand-off not done within LeaseDuration: %s", s.converged())
		}
	}
	b := s.nodes[1]
	if a.releases != 8 || a.revokes != 0 || b.acquires != 8 || s.api.takes != 0 {
		t.Fatalf("a released %d revoked %d; b acquired %d; %d taken from a holder", a.releases, a.revokes, b.acquires, s.api.takes)
	}
	t.Logf("hand-off of 8 slots done in %v", s.now.Sub(start))

	// Both see one owner per slot, live; a refusal names it.
	for slot := range 16 {
		ida, la := a.m.Owner(slot)
		idb, lb := b.m.Owner(slot)
		if ida != idb || !la || !lb || (ida != a.id && ida != b.id) {
			t.Fatalf("slot %d: a sees %q live=%v, b sees %q live=%v", slot, ida, la, idb, lb)
		}
		if ida == b.id {
			err := a.m.MayOpen(uint64(slot + 16*1000))
			if o, _ := errs.FieldOf(err, "owner"); o != b.id {
				t.Fatalf("refusal on a for b's slot %d: %v", slot, err)
			}
		}
	}
	if ms := a.m.Members(); len(ms) != 2 || ms[0].Identity > ms[1].Identity {
		t.Errorf("members %+v", ms)
	}
}

// The shape the broker core's Ownership seam asks for.
var _ interface{ MayOpen(id uint64) error } = (*Manager)(nil)

// A Release that fails keeps the slot held and not served, and it is tried
// again each period until it succeeds.
func TestReleaseErrorKeepsSlotAndRetries(t *testing.T) {
	s := newTimingSim(t, 4)
	a := s.start("demo-0", "")
	s.settle()
	a.failRelease = true
	s.start("demo-1", "")
	s.advance(4 * s.rp)
	if got := len(a.m.Held()); got != 4 {
		t.Fatalf("a holds %d slots while its Release fails, want 4", got)
	}
	if got := served(a, 4); got != 2 {
		t.Fatalf("a serves %d slots while handing 2 off, want 2", got)
	}
	for _, slot := range a.m.Held() {
		if !a.m.Serving(slot) {
			if r, _ := errs.FieldOf(a.m.MayOpen(uint64(slot)), "reason"); r != "handing off" {
				t.Errorf("slot %d reason %v", slot, r)
			}
		}
	}
	a.failRelease = false
	s.settle()
	if a.releases != 2 || a.revokes != 0 {
		t.Fatalf("releases %d revokes %d", a.releases, a.revokes)
	}
}

// Draining hands every slot off and keeps taking none; the member Lease
// says so, and the others count the drainer out at once.
func TestDrainingHandsEverythingOff(t *testing.T) {
	s := newTimingSim(t, 16)
	a := s.start("demo-0", "")
	b := s.start("demo-1", "")
	s.settle()
	if err := a.m.SetDraining(s.ctx, true); err != nil {
		t.Fatal(err)
	}
	lease, err := s.api.tracker.Get(leaseGVR, simNS, MemberLeaseName("demo", "demo-0"))
	if err != nil || !isDraining(lease.(*coordinationv1.Lease)) {
		t.Fatalf("member Lease not annotated: %v", err)
	}
	start := s.now
	for len(b.m.Held()) != 16 || served(b, 16) != 16 {
		s.advance(s.rp)
		if s.now.Sub(start) > s.ld {
			t.Fatalf("drain not done within LeaseDuration: a %v b %v", a.m.Held(), b.m.Held())
		}
	}
	if len(a.m.Held()) != 0 || a.revokes != 0 || a.releases != 8 {
		t.Fatalf("a held %v revokes %d releases %d", a.m.Held(), a.revokes, a.releases)
	}
	if st := a.m.Status(); !st.Draining || st.Target != 0 {
		t.Errorf("drainer status %+v", st)
	}
	for _, mi := range b.m.Members() {
		if mi.Identity == a.id && !mi.Draining {
			t.Errorf("b sees a not draining: %+v", mi)
		}
	}
	s.advance(5 * s.rp)
	if len(a.m.Held()) != 0 {
		t.Fatalf("a took slots while draining: %v", a.m.Held())
	}
	// Drain off: shares even out again.
	if err := a.m.SetDraining(s.ctx, false); err != nil {
		t.Fatal(err)
	}
	s.settle()
}

// A broker restarted on its data directory (same identity) takes back at
// once the slots that still name it; one restarted on a wiped directory (a
// new incarnation) waits for them to expire.
func TestRestartSameIdentityAdoptsNewIncarnationWaits(t *testing.T) {
	for _, same := range []bool{true, false} {
		name := "new-incarnation"
		if same {
			name = "same-identity"
		}
		t.Run(name, func(t *testing.T) {
			s := newTimingSim(t, 8)
			a := s.start("demo-0", "")
			s.settle()
			s.crash(a)
			id := ""
			if same {
				id = a.id
			}
			s.advance(s.rp)
			a2 := s.start("demo-0", id)
			s.advance(s.rp)
			if got := served(a2, 8); same && got != 8 {
				t.Fatalf("same identity serves %d slots one period after its restart, want 8", got)
			} else if !same && got != 0 {
				t.Fatalf("new incarnation serves %d slots before they expired", got)
			}
			s.settle()
		})
	}
}

// A broker cut from its peers but not from the API server (InContact
// false) renews and takes nothing: it stops serving its slots by the
// timing rule, and another broker takes them LeaseDuration later — its
// commits would fail anyway. Back in contact, it takes its share again.
func TestOutOfContactGivesSlotsUp(t *testing.T) {
	s := newTimingSim(t, 4)
	var contact atomic.Bool
	contact.Store(true)
	a := s.startWith("demo-0", "", func(c *Config) { c.InContact = contact.Load })
	b := s.start("demo-1", "")
	s.settle()
	if served(a, 4)+served(b, 4) != 4 || served(a, 4) == 0 {
		t.Fatalf("before: a serves %d, b %d", served(a, 4), served(b, 4))
	}
	contact.Store(false)
	s.advance(s.rd + s.rp)
	if n := served(a, 4); n != 0 {
		t.Fatalf("out of contact past the renew deadline, a still serves %d slots", n)
	}
	s.advance(s.ld + 2*s.rp)
	if n := served(b, 4); n != 4 {
		t.Fatalf("b serves %d slots after a's Leases ran out, want 4", n)
	}
	contact.Store(true)
	s.settle()
	if served(a, 4) != 2 || served(b, 4) != 2 {
		t.Fatalf("back in contact: a serves %d, b %d; want 2 and 2", served(a, 4), served(b, 4))
	}
}
