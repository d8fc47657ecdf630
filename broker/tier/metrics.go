package tier

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the tier's own; core counts uploads, evictions and deletes
// (it decides them), this package the reads and the cache.
type Metrics struct {
	ReadSeconds  prometheus.Histogram
	ReadBytes    prometheus.Counter
	CacheHits    prometheus.Counter
	CacheMisses  prometheus.Counter
	CacheBytes   prometheus.Gauge
	CorruptReads prometheus.Counter
}

// NewMetrics registers the metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ReadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "picomq_tier_read_seconds",
			Help:    "Latency of ranged GETs of tiered segments from object storage (cache misses and prefetches).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		ReadBytes:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_read_bytes_total", Help: "Bytes read from object storage into the tier cache."}),
		CacheHits:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_cache_hits_total", Help: "Chunks of tiered segments served from the local tier cache."}),
		CacheMisses:  prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_cache_misses_total", Help: "Chunks of tiered segments a read had to fetch from object storage."}),
		CacheBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_tier_cache_bytes", Help: "Bytes held by the local tier cache (bounded by --tier-cache-bytes)."}),
		CorruptReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_tier_corrupt_reads_total", Help: "Chunks read from the cache or object storage that failed their checksum."}),
	}
	if reg != nil {
		reg.MustRegister(m.ReadSeconds, m.ReadBytes, m.CacheHits, m.CacheMisses, m.CacheBytes, m.CorruptReads)
	}
	return m
}
