package ownership

import "github.com/prometheus/client_golang/prometheus"

// metrics are the manager's Prometheus measurements.
type metrics struct {
	slotsHeld     prometheus.Gauge
	handoffs      *prometheus.CounterVec
	renewFailures prometheus.Counter
	membersLive   prometheus.Gauge
	fences        prometheus.Counter
	// Failsafe (failsafe.go).
	failsafeActive  prometheus.Gauge
	failsafeRounds  *prometheus.CounterVec
	failsafeAnswers prometheus.Counter
}

// The values of picomq_failsafe_rounds_total's "result" label.
const (
	roundConfirmed = "confirmed" // every member confirmed: the slots were extended
	roundRefused   = "refused"   // a member refused or did not answer: the slots stop at their deadline
)

// The values of picomq_slot_handoffs_total's "event" label.
const (
	eventTaken    = "taken"    // this broker took a slot (free, expired, or its own after a restart)
	eventReleased = "released" // this broker handed a slot off: Release, then the holder cleared
	eventLost     = "lost"     // this broker lost a slot: another holder, or the Lease is gone
)

// newMetrics creates the metrics and registers them with reg (nil: kept
// unregistered, for tests and embedded use). A registry that already has
// them (a second manager in one process) is refused, not panicked on.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		slotsHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_slots_held",
			Help: "Slot Leases this broker holds (served or being handed off)."}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_slot_handoffs_total",
			Help: "Slot ownership changes seen by this broker: event=taken (it took a slot), released (it handed one off), lost (another broker took it, or its Lease vanished)."},
			[]string{"event"}),
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_slot_lease_renew_failures_total",
			Help: "Renewals of the member Lease, or writes of a held slot Lease after its deadline passed, that failed (API server unreachable or refusing)."}),
		fences: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_member_fences_total",
			Help: "Member Leases of expired brokers this broker wrote naming nobody before taking their slots."}),
		failsafeActive: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_failsafe_active",
			Help: "1 while this broker serves its slots through an API server outage on failsafe rounds every member confirmed, else 0."}),
		failsafeRounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_failsafe_rounds_total",
			Help: "Failsafe rounds this broker sent after failing to renew its member Lease: result=confirmed (every member confirmed; slots extended) or refused (one did not; slots stop at their renew deadline)."},
			[]string{"result"}),
		failsafeAnswers: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_failsafe_promises_total",
			Help: "Failsafe rounds of other brokers this broker confirmed, each a promise to take none of their slots for a lease duration."}),
		membersLive: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_members_live",
			Help: "Brokers this broker counts live for fair shares (itself included unless draining)."}),
	}
	for _, e := range []string{eventTaken, eventReleased, eventLost} {
		m.handoffs.WithLabelValues(e) // present at 0 from the start
	}
	for _, r := range []string{roundConfirmed, roundRefused} {
		m.failsafeRounds.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.slotsHeld, m.handoffs, m.renewFailures, m.membersLive, m.fences, m.failsafeActive, m.failsafeRounds, m.failsafeAnswers} {
			if err := reg.Register(c); err != nil {
				return nil, BadConfig.Wrap(err, "field", "Metrics", "rule", "the registry must not hold ownership's metrics already")
			}
		}
	}
	return m, nil
}
