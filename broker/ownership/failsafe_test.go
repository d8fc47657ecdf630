package ownership

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// apiDown sets the API server down (or up) for the given brokers.
func apiDown(s *sim, on bool, nodes ...*simNode) {
	for _, n := range nodes {
		n.down.Store(on)
	}
	s.logf("api down=%v for %d brokers", on, len(nodes))
}

// TestFailsafeServesThroughAnOutageOfEveryBroker: with the API server down
// for every broker, each holder's failsafe rounds are confirmed by the
// others, and every slot stays served by its holder through a 60 s outage
// and after it, without a move.
func TestFailsafeServesThroughAnOutageOfEveryBroker(t *testing.T) {
	s := newTimingSim(t, 12)
	a, b, c := s.start("demo-0", ""), s.start("demo-1", ""), s.start("demo-2", "")
	s.settle()
	before := map[*simNode]int{a: served(a, 12), b: served(b, 12), c: served(c, 12)}
	moves := s.api.takes
	apiDown(s, true, a, b, c)
	for range 120 {
		s.advance(500 * time.Millisecond)
		for n, k := range before {
			if got := served(n, 12); got != k {
				t.Fatalf("%v into the outage %s serves %d slots, want %d", s.now.Sub(time.Unix(1_700_000_000, 0)), n.id, got, k)
			}
		}
	}
	if got := testutil.ToFloat64(a.m.met.failsafeActive); got != 1 {
		t.Errorf("picomq_failsafe_active = %v during the outage, want 1", got)
	}
	if st := a.m.Status(); st.FailsafeSince.IsZero() || st.FailsafeRounds == 0 {
		t.Errorf("Status during the outage: failsafeSince %v, rounds %d; want both set", st.FailsafeSince, st.FailsafeRounds)
	}
	apiDown(s, false, a, b, c)
	s.advance(3 * s.ld)
	for n, k := range before {
		if got := served(n, 12); got != k {
			t.Errorf("after the outage %s serves %d slots, want %d", n.id, got, k)
		}
	}
	if s.api.takes != moves {
		t.Errorf("%d slots moved through the outage, want none", s.api.takes-moves)
	}
	if got := testutil.ToFloat64(a.m.met.failsafeActive); got != 0 {
		t.Errorf("picomq_failsafe_active = %v after the outage, want 0", got)
	}
	if st := a.m.Status(); !st.FailsafeSince.IsZero() {
		t.Errorf("Status after the outage still in failsafe since %v", st.FailsafeSince)
	}
}

// TestFailsafeRefusedByAMemberThatReachesTheAPIServer: a holder cut from
// the API server alone is refused by members that still reach it: it stops
// at its renew deadline, and they take its slots after LeaseDuration.
func TestFailsafeRefusedByAMemberThatReachesTheAPIServer(t *testing.T) {
	s := newTimingSim(t, 12)
	a, b, c := s.start("demo-0", ""), s.start("demo-1", ""), s.start("demo-2", "")
	s.settle()
	apiDown(s, true, a)
	cut := s.now
	for served(a, 12) > 0 {
		s.advance(10 * time.Millisecond)
	}
	if stopped := s.now.Sub(cut); stopped > s.rd+10*time.Millisecond {
		t.Errorf("a stopped %v after its cut, want within RenewDeadline %v", stopped, s.rd)
	}
	for served(b, 12)+served(c, 12) != 12 {
		s.advance(10 * time.Millisecond)
		if s.now.Sub(cut) > 3*s.ld {
			t.Fatalf("b and c serve %d slots %v after a's cut", served(b, 12)+served(c, 12), s.now.Sub(cut))
		}
	}
	if got := testutil.ToFloat64(a.m.met.failsafeRounds.WithLabelValues(roundConfirmed)); got != 0 {
		t.Errorf("%v failsafe rounds confirmed for a cut holder, want 0", got)
	}
	if got := testutil.ToFloat64(a.m.met.failsafeRounds.WithLabelValues(roundRefused)); got == 0 {
		t.Errorf("no failsafe round refused for a cut holder")
	}
}

// TestFailsafeStopsWhenAMemberIsDown: an outage together with a crashed
// member: the member cannot answer (it might be one that reaches the API
// server), so every holder stops at its renew deadline and the slots wait
// for the API server; once it is back they are all served again, the
// crashed member's after LeaseDuration.
func TestFailsafeStopsWhenAMemberIsDown(t *testing.T) {
	s := newTimingSim(t, 12)
	a, b, c := s.start("demo-0", ""), s.start("demo-1", ""), s.start("demo-2", "")
	s.settle()
	apiDown(s, true, a, b, c)
	s.advance(2 * s.rp) // failsafe rounds confirmed meanwhile
	if served(a, 12)+served(b, 12)+served(c, 12) != 12 {
		t.Fatalf("slots stopped while every member answers")
	}
	s.crash(c)
	crashed := s.now
	for served(a, 12)+served(b, 12) > 0 {
		s.advance(10 * time.Millisecond)
		if s.now.Sub(crashed) > s.rd+s.rp {
			t.Fatalf("a and b still serve %d slots %v after c crashed in the outage", served(a, 12)+served(b, 12), s.now.Sub(crashed))
		}
	}
	s.advance(10 * time.Second)
	apiDown(s, false, a, b)
	up := s.now
	for served(a, 12)+served(b, 12) != 12 {
		s.advance(10 * time.Millisecond)
		if s.now.Sub(up) > 2*s.ld+s.rp {
			t.Fatalf("a and b serve %d slots %v after the API server came back", served(a, 12)+served(b, 12), s.now.Sub(up))
		}
	}
}

// TestFailsafePromiseHoldsTheTakerBack: members that confirmed a holder's
// rounds and then reach the API server again, while the holder still
// cannot, take its slots only LeaseDuration after their last answer (and
// first contact), never while it may still serve on the rounds they
// confirmed; the holder stops at its last confirmed round plus
// RenewDeadline.
func TestFailsafePromiseHoldsTheTakerBack(t *testing.T) {
	s := newTimingSim(t, 12)
	a, b, c := s.start("demo-0", ""), s.start("demo-1", ""), s.start("demo-2", "")
	s.settle()
	held := served(a, 12)
	apiDown(s, true, a, b, c)
	s.advance(5 * time.Second)
	if served(a, 12) != held {
		t.Fatalf("a serves %d of its %d slots on failsafe", served(a, 12), held)
	}
	apiDown(s, false, b, c)
	back := s.now
	for served(a, 12) > 0 {
		s.advance(10 * time.Millisecond)
		if s.now.Sub(back) > s.rd+s.rp {
			t.Fatalf("a still serves %d slots %v after b and c reach the API server", served(a, 12), s.now.Sub(back))
		}
	}
	for served(b, 12)+served(c, 12) != 12 {
		s.advance(10 * time.Millisecond)
		if s.now.Sub(back) > 3*s.ld {
			t.Fatalf("b and c serve %d slots %v after reaching the API server", served(b, 12)+served(c, 12), s.now.Sub(back))
		}
	}
	// The check after every step (s.check) already refused two servers;
	// the takes came no sooner than the promise allows.
	if took := s.now.Sub(back); took < s.ld-s.rp {
		t.Errorf("a's slots were all served by b and c %v after they reached the API server, before their promise (LeaseDuration %v after the last answer) ran out", took, s.ld)
	}
}

// TestAnswerFailsafeRefusesWhileReachingTheAPIServer: a broker confirms a
// round only while its own renewals cannot reach the API server, never its
// own round.
func TestAnswerFailsafeRefusesWhileReachingTheAPIServer(t *testing.T) {
	s := newTimingSim(t, 4)
	a, b := s.start("demo-0", ""), s.start("demo-1", "")
	s.settle()
	if err := b.m.AnswerFailsafe(a.id); !errors.Is(err, FailsafeRefused) {
		t.Fatalf("AnswerFailsafe while reaching the API server = %v, want FAILSAFE_REFUSED", err)
	}
	// A renewal under way: refused while it is young, confirmed once it
	// has hung for half a retry period (an API server that hangs).
	b.m.mu.Lock()
	b.m.writingSince = b.clk.Now().Add(-s.rp / 4)
	b.m.mu.Unlock()
	if err := b.m.AnswerFailsafe(a.id); !errors.Is(err, FailsafeRefused) {
		t.Fatalf("AnswerFailsafe with a renewal out for a quarter period = %v, want FAILSAFE_REFUSED", err)
	}
	b.m.mu.Lock()
	b.m.writingSince = b.clk.Now().Add(-s.rp / 2)
	b.m.mu.Unlock()
	if err := b.m.AnswerFailsafe(a.id); err != nil {
		t.Fatalf("AnswerFailsafe with a renewal hung for half a period = %v, want nil", err)
	}
	b.m.mu.Lock()
	b.m.writingSince = time.Time{}
	delete(b.m.promised, a.id)
	b.m.mu.Unlock()
	apiDown(s, true, b)
	s.advance(2 * s.rp)
	if err := b.m.AnswerFailsafe(a.id); err != nil {
		t.Fatalf("AnswerFailsafe while the API server is unreachable = %v, want nil", err)
	}
	if err := b.m.AnswerFailsafe(b.id); err == nil {
		t.Fatalf("AnswerFailsafe of its own round = nil, want a refusal")
	}
}
