package httpapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/node"
)

// httpMetrics count and time requests by route (a fixed label, never the
// stream name), method and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "picomq_http_request_seconds", Help: "HTTP request latency by route (long-poll reads include their wait).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16),
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.seconds)
	return m
}

func (m *httpMetrics) observe(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.seconds.WithLabelValues(route).Observe(d.Seconds())
}

// brokerCollector reports the metadata log's state and the waiting reads
// at each scrape.
type brokerCollector struct {
	b       node.Broker
	waiting func() int64
}

var (
	raftStateDesc = prometheus.NewDesc("picomq_raft_state",
		"The metadata log's role on this node: 1 for the current state.", []string{"state"}, nil)
	raftLeaderDesc = prometheus.NewDesc("picomq_raft_has_leader",
		"1 when the metadata log knows a leader.", nil, nil)
	raftAppliedDesc = prometheus.NewDesc("picomq_raft_applied_index",
		"Last metadata log index applied to the state machine.", nil, nil)
	raftLastDesc = prometheus.NewDesc("picomq_raft_last_index",
		"Last metadata log index stored.", nil, nil)
	streamsDesc = prometheus.NewDesc("picomq_streams",
		"Live named streams.", nil, nil)
	waitingDesc = prometheus.NewDesc("picomq_reads_waiting",
		"Long-poll reads of the partitioned-log API waiting for records now.", nil, nil)
)

var raftStates = []string{"Follower", "Candidate", "Leader", "Shutdown"}

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- raftStateDesc
	ch <- raftLeaderDesc
	ch <- raftAppliedDesc
	ch <- raftLastDesc
	ch <- streamsDesc
	ch <- waitingDesc
}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Status()
	for _, s := range raftStates {
		v := 0.0
		if s == st.LogState {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(raftStateDesc, prometheus.GaugeValue, v, s)
	}
	has := 0.0
	if st.Leader != "" {
		has = 1
	}
	ch <- prometheus.MustNewConstMetric(raftLeaderDesc, prometheus.GaugeValue, has)
	ch <- prometheus.MustNewConstMetric(raftAppliedDesc, prometheus.GaugeValue, float64(st.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(raftLastDesc, prometheus.GaugeValue, float64(st.LastIndex))
	ch <- prometheus.MustNewConstMetric(streamsDesc, prometheus.GaugeValue, float64(len(c.b.List())))
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(c.waiting()))
}
