package replication

import "github.com/prometheus/client_golang/prometheus"

// Metrics are replication's Prometheus measurements.
type Metrics struct {
	// Copies counts copies made durable on a peer; CopyBytes their bytes;
	// CopySeconds the time from the copy's start to the peer's answer.
	Copies      prometheus.Counter
	CopyBytes   prometheus.Counter
	CopySeconds prometheus.Histogram
	// CopyFailures counts failed copies (and Syncs short of live peers) by
	// reason: unreachable, timeout, refused (the peer answered 4xx),
	// peer_error (5xx), too_few_peers.
	CopyFailures *prometheus.CounterVec
	// Fetches counts frames fetched from a replica; FetchFailures the
	// replicas that did not give one, by reason: not_found, corrupt,
	// unreachable, down (not a live member), peer_error.
	Fetches       prometheus.Counter
	FetchFailures *prometheus.CounterVec
	// UnderReplicated is how many committed objects have fewer than R
	// replicas among the current members (set by whoever counts them, see
	// UnderReplicated).
	UnderReplicated prometheus.Gauge
}

// Reasons of CopyFailures and FetchFailures.
const (
	reasonUnreachable = "unreachable"
	reasonTimeout     = "timeout"
	reasonRefused     = "refused"
	reasonPeerError   = "peer_error"
	reasonTooFew      = "too_few_peers"
	reasonNotFound    = "not_found"
	reasonCorrupt     = "corrupt"
	reasonDown        = "down"
)

// NewMetrics creates replication's metrics and registers them with reg
// (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Copies:      prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replica_copies_total", Help: "Object copies made durable on a peer before their commit."}),
		CopyBytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replica_copy_bytes_total", Help: "Bytes of object copies made durable on peers."}),
		CopySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "picomq_replica_copy_seconds", Help: "One object copy to one peer, until the peer answered that it is durable.", Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)}),
		CopyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_replica_copy_failures_total", Help: "Object copies that failed, and Syncs that found too few live peers, by reason."},
			[]string{"reason"}),
		Fetches: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replica_fetches_total", Help: "Frames fetched from another member's copy of an object this member holds no file of."}),
		FetchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_replica_fetch_failures_total", Help: "Replicas that did not give a fetched frame, by reason."},
			[]string{"reason"}),
		UnderReplicated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_objects_under_replicated", Help: "Committed objects with fewer than R replicas among the cluster's current members."}),
	}
	for _, r := range []string{reasonUnreachable, reasonTimeout, reasonRefused, reasonPeerError, reasonTooFew} {
		m.CopyFailures.WithLabelValues(r)
	}
	for _, r := range []string{reasonNotFound, reasonCorrupt, reasonUnreachable, reasonTimeout, reasonDown, reasonPeerError} {
		m.FetchFailures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Copies, m.CopyBytes, m.CopySeconds, m.CopyFailures, m.Fetches, m.FetchFailures, m.UnderReplicated)
	}
	return m
}
