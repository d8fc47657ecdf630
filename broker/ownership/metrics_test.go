package ownership

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The metrics are registered and follow what happens: slots held, members
// live, takes, hand-offs, losses and failed renewals.
func TestMetricsMove(t *testing.T) {
	s := newTimingSim(t, 16)
	regA := prometheus.NewRegistry()
	a := s.startWith("demo-0", "", func(c *Config) { c.Metrics = regA })
	s.settle()
	if n, err := testutil.GatherAndCount(regA, "picomq_slots_held", "picomq_slot_handoffs_total",
		"picomq_slot_lease_renew_failures_total", "picomq_members_live"); err != nil || n != 6 {
		t.Fatalf("registered series: %d, %v (want 6: three handoff events)", n, err)
	}
	met := a.m.met
	if v := testutil.ToFloat64(met.slotsHeld); v != 16 {
		t.Errorf("slots held %v", v)
	}
	if v := testutil.ToFloat64(met.handoffs.WithLabelValues(eventTaken)); v != 16 {
		t.Errorf("taken %v", v)
	}
	if v := testutil.ToFloat64(met.membersLive); v != 1 {
		t.Errorf("members live %v", v)
	}

	b := s.start("demo-1", "")
	s.settle()
	if v := testutil.ToFloat64(met.slotsHeld); v != 8 {
		t.Errorf("slots held after a hand-off %v", v)
	}
	if v := testutil.ToFloat64(met.handoffs.WithLabelValues(eventReleased)); v != 8 {
		t.Errorf("released %v", v)
	}
	if v := testutil.ToFloat64(met.membersLive); v != 2 {
		t.Errorf("members live %v", v)
	}

	// a is cut off from the API server: its renewals fail, b takes its
	// slots after they expire, and a learns it lost them when it is back.
	a.down.Store(true)
	s.advance(s.ld + 2*s.rp)
	if v := testutil.ToFloat64(met.renewFailures); v == 0 {
		t.Error("no renew failures counted while the API server was down")
	}
	if got := len(b.m.Held()); got != 16 {
		t.Fatalf("b holds %d, want all 16", got)
	}
	a.down.Store(false)
	s.settle()
	if v := testutil.ToFloat64(met.handoffs.WithLabelValues(eventLost)); v != 8 {
		t.Errorf("lost %v, want 8", v)
	}
}
