package routing

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	proxied  *prometheus.CounterVec // by result
	retried  prometheus.Counter
	local    prometheus.Counter
	rerouted prometheus.Counter
	waited   *prometheus.CounterVec // by result
	catchups *prometheus.CounterVec // by result
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		proxied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_routed_requests_total", Help: "Requests proxied to the broker owning their partition, by outcome."}, []string{"outcome"}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_routed_retries_total", Help: "Proxied requests sent again after the owner refused them or could not be reached."}),
		local:   prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_routed_local_total", Help: "Partition requests served by this broker, their owner."}),
		rerouted: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_routed_rerouted_total",
			Help: "Writes served here, refused before anything was written because their slot left this broker meanwhile (a hand-off), and sent to its next owner."}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_routed_owner_waits_total",
			Help: "Requests that met their partition's slot between two owners (handed off, being taken) and waited for the next one: found (an owner served it) or none (NO_SLOT_OWNER after the wait)."}, []string{"result"}),
		catchups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_routed_catchups_total",
			Help: "Catch-ups with the metadata leader before an answer from this broker's copy: ok, or failed (the request refused with METADATA_CATCHING_UP)."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.proxied, m.retried, m.local, m.rerouted, m.waited, m.catchups)
	}
	return m
}
