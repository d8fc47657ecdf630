// Package httpapi is the broker's HTTP API over one node.Broker: the
// partitioned-log API the Go client (broker/client) speaks, with binary
// batch framing and long-poll reads; the admin API (streams, node status);
// /healthz, /readyz and Prometheus /metrics. The URL scheme, the framing
// and the JSON shapes are documented in package wire.
//
// Every refusal is a coded problem (errs.Marshal) with the status
// errs.HTTPStatus gives it, and a refused request writes nothing.
package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// Defaults of Options.
const (
	DefaultMaxBatchRecords = 100_000
	DefaultMaxReadBytes    = 4 << 20
	maxAdminBodyBytes      = 1 << 20
)

// Options tune a Server; zero values take the defaults.
type Options struct {
	// Options are the settings the front ends share. A read with wait=
	// waits at most LongPollTimeout (a longer wait asked is clamped to it,
	// and wait with no value waits this long); a body above MaxBodyBytes
	// is refused with 413 BODY_TOO_LARGE before anything is written.
	frontend.Options
	// MaxBatchRecords bounds the records of one append (default 100,000),
	// so that a body of empty records cannot make the server allocate a
	// record header for each of millions of them.
	MaxBatchRecords int
	// MaxReadBytes bounds the key+payload bytes of one read answer (default
	// 4 MiB); a read always answers at least one record. maxBytes= may ask
	// for less.
	MaxReadBytes int64
	// Registerer, when set, receives the HTTP request metrics and the
	// metadata log's state (picomq_raft_*, picomq_streams).
	Registerer prometheus.Registerer
	// Cluster, when set, adds a clustered broker's view of its cluster to
	// GET /v1/admin/node.
	Cluster func(*wire.NodeInfo)
	// Drain, when set, serves wire.DrainPath (a clustered broker); without
	// it the path answers 501 NOT_CLUSTERED.
	Drain Drainer
	// Tier, when set, answers GET /v1/admin/tier (object storage as this
	// broker sees it); without it the path answers enabled: false.
	Tier func() wire.TierStatus
	// DefaultPolicy, when set, is the policy of a stream created through
	// the admin API without one (an empty "policy" member).
	DefaultPolicy *stream.PolicyValue
	// TestClock, when set, is the broker's clock and GET/PUT
	// /v1/admin/clock read and set it. Only tests set it (cmd/broker
	// --test-clock): a production broker runs on the real clock and serves
	// no clock endpoint.
	TestClock *ManualClock
}

func (o Options) withDefaults() Options {
	o.Options = o.Options.WithDefaults()
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	return o
}

// Server is the HTTP API of one broker. It is an http.Handler.
type Server struct {
	b    node.Broker
	log  *slog.Logger
	opts Options
	mux  *http.ServeMux

	draining  atomic.Bool
	drain     chan struct{}
	drainOnce sync.Once
	waiting   atomic.Int64 // reads with wait= waiting for records

	metrics *httpMetrics
}

// New returns the API of b; gatherer is what /metrics serves (nil: no
// /metrics route).
func New(b node.Broker, gatherer prometheus.Gatherer, opts Options) *Server {
	opts = opts.withDefaults()
	s := &Server{b: b, log: opts.Logger, opts: opts, mux: http.NewServeMux(), drain: make(chan struct{})}
	if s.opts.Registerer != nil {
		s.metrics = newHTTPMetrics(s.opts.Registerer)
		s.opts.Registerer.MustRegister(&brokerCollector{b: b, waiting: s.Waiting})
	}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET "+wire.NodePath, s.node)
	s.mux.HandleFunc(wire.DrainPath, s.serveDrain)
	s.mux.HandleFunc("GET "+wire.TierPath, func(w http.ResponseWriter, r *http.Request) {
		st := wire.TierStatus{}
		if s.opts.Tier != nil {
			st = s.opts.Tier()
		}
		s.writeJSON(w, http.StatusOK, st)
	})
	if gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}}))
	}
	if s.opts.TestClock != nil {
		s.mux.HandleFunc("GET "+wire.ClockPath, s.getClock)
		s.mux.HandleFunc("PUT "+wire.ClockPath, s.setClock)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, wire.RouteNotFound.With("path", r.URL.Path))
	})
	return s
}

// Waiting reports how many reads with wait= are waiting for records at
// this moment.
func (s *Server) Waiting() int64 { return s.waiting.Load() }

// Handle registers another route beside the API's (the Durable Streams
// protocol under /v1/stream/, say). It must be called before serving, and
// cannot take over /v1/log/ or /v1/admin/streams.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Drain makes /readyz answer 503 and ends every long-poll wait at once: call
// it before shutting the HTTP server down.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		s.draining.Store(true)
		close(s.drain)
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	route := s.dispatch(rec, r)
	if s.metrics != nil {
		s.metrics.observe(route, r.Method, rec.status, time.Since(start))
	}
}

// dispatch routes a request and returns its route's label. Routes whose
// path carries a stream name are matched here rather than by the ServeMux,
// which would redirect a path holding "..", "." or "//" instead of refusing
// it.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) string {
	path := r.URL.Path
	if strings.HasPrefix(path, wire.LogPrefix) || strings.HasPrefix(path, "/v1/admin/") || path == wire.AppendsPath {
		if err := checkRequest(r); err != nil {
			s.fail(w, r, err)
			return "malformed"
		}
	}
	switch {
	case strings.HasPrefix(path, wire.LogPrefix):
		name, op, err := s.name(r, wire.LogPrefix, true)
		if err != nil {
			s.fail(w, r, err)
			return "log.badname"
		}
		return s.serveLog(w, r, name, op)
	case path == wire.AppendsPath:
		s.appends(w, r)
		return "log.appends"
	case path == wire.StreamsPath:
		if r.Method != http.MethodGet {
			s.notAllowed(w, r, "GET")
			return "admin.list"
		}
		s.listStreams(w, r)
		return "admin.list"
	case strings.HasPrefix(path, wire.StreamsPrefix):
		name, _, err := s.name(r, wire.StreamsPrefix, false)
		if err != nil {
			s.fail(w, r, err)
			return "admin.badname"
		}
		return s.serveStream(w, r, name)
	}
	if hasDotSegment(r.URL.EscapedPath()) {
		s.fail(w, r, wire.RouteNotFound.With("path", r.URL.Path, "reason", "empty, '.' or '..' path segment"))
		return "notfound"
	}
	_, pattern := s.mux.Handler(r)
	s.mux.ServeHTTP(w, r)
	if pattern == "/" || pattern == "" {
		return "notfound"
	}
	return pattern
}

// hasDotSegment reports a "." or ".." segment, or an empty one other than
// a trailing slash, in an escaped path.
func hasDotSegment(p string) bool {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, seg := range segs {
		if seg == "." || seg == ".." || (seg == "" && i < len(segs)-1) {
			return true
		}
	}
	return false
}

func (s *Server) notAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	s.fail(w, r, wire.MethodNotAllowed.With("method", r.Method, "allow", allow))
}

// recorder keeps the status written, for the metrics.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// slogPrinter lets promhttp log through slog.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	p.l.Error("serving metrics failed", "err", errors.New(strings.TrimSpace(fmt.Sprintln(v...))))
}
