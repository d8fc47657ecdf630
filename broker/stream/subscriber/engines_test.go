package subscriber_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/embedded"
	"github.com/picomq/picomq/broker/httpapi"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/memory"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/sqlstream/sqltest"
	"github.com/picomq/picomq/broker/stream/subscriber"
)

// store is one engine's storage, which a test opens — again, as a
// restarted process would — and a child process can open too.
type store struct {
	kind   string // memory, sqlite, postgres, embedded, remote
	dsn    string // SQLite path, PostgreSQL URL, embedded directory, broker URL
	table  string // SQL engines: the table; remote: the stream's name
	policy stream.PolicyValue
	db     *sqltest.DB // SQL engines: the test's own handle

	mu  sync.Mutex
	mem stream.Stream    // memory: the one value, kept across "restarts"
	cur *embedded.Stream // embedded: the open one (one process at a time)
	t   testing.TB
}

// engines are the kinds of store the subscriber is tested against: the
// memory, SQL (both dialects) and embedded engines, and the remote one — a
// client of a broker served over HTTP.
var engines = []string{"memory", "sqlite", "postgres", "embedded", "remote"}

// durable are the kinds a child process can open.
var durable = []string{"sqlite", "postgres", "embedded", "remote"}

func newStore(t *testing.T, kind string, p stream.PolicyValue) *store {
	t.Helper()
	st := &store{kind: kind, policy: p, t: t}
	switch kind {
	case "memory":
		s, err := memory.New(p, memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st.mem = s
	case "sqlite":
		st.dsn = t.TempDir() + "/stream.db"
		st.db = sqltest.SQLiteAt(t, st.dsn)
		st.table = "events"
	case "postgres":
		st.dsn = sqltest.PostgresURL(t)
		st.db = sqltest.Postgres(t)
		st.table = st.db.Table("events")
	case "embedded":
		st.dsn = t.TempDir()
		t.Cleanup(st.close)
	case "remote":
		// A broker of the test's own, on a directory of its own, served on
		// a loopback port: the subscriber's process — this one, or a
		// child — reaches it over HTTP.
		b, err := core.Open(core.Config{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(httpapi.New(b, nil, httpapi.Options{}))
		t.Cleanup(func() {
			srv.Close()
			if err := b.Close(); err != nil {
				t.Errorf("close broker: %v", err)
			}
		})
		st.dsn, st.table = srv.URL, "shop/events"
	default:
		t.Fatalf("no engine %q", kind)
	}
	return st
}

// open returns a stream value over the store: a new one for the durable
// engines (closing the embedded one open before), the same one for memory.
func (st *store) open(t testing.TB) stream.Stream {
	t.Helper()
	s, err := st.openErr(t.Context())
	if err != nil {
		t.Fatalf("open %s: %v", st.kind, err)
	}
	return s
}

func (st *store) openErr(ctx context.Context) (stream.Stream, error) {
	switch st.kind {
	case "memory":
		return st.mem, nil
	case "sqlite", "postgres":
		return sqlstream.New(ctx, sqlstream.Options{DB: st.db.DB, Table: st.table, Policy: st.policy})
	case "remote":
		return client.Open(ctx, st.dsn, st.table, st.policy)
	}
	st.close()
	s, err := embedded.Open(st.dsn, embedded.Options{Policy: st.policy})
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	st.cur = s
	st.mu.Unlock()
	return s, nil
}

// close closes the open embedded stream, so that another process may open
// its directory.
func (st *store) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cur != nil {
		if err := st.cur.Close(); err != nil {
			st.t.Errorf("close: %v", err)
		}
		st.cur = nil
	}
}

// appendN appends n records to each partition of s, keyed so that each
// partition's payloads read "p<partition>-<i>".
func appendN(t testing.TB, s stream.Stream, n int) {
	t.Helper()
	parts := s.Partitions()
	for p := range parts {
		key := keyIn(p, parts)
		for range n {
			b, err := s.Bounds(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			payload := fmt.Sprintf("p%d-%d", p, b.Next)
			if _, err := s.Append(t.Context(), []stream.RecordValue{{Key: []byte(key), Payload: []byte(payload)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// keyIn returns a key PartitionOf places on partition p of n.
func keyIn(p, n int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		if stream.PartitionOf([]byte(k), n) == p {
			return k
		}
	}
}

// delivery is one call of a handler.
type delivery struct {
	partition int
	offset    stream.Offset
	payload   string
}

// recorder is a handler that records its deliveries.
type recorder struct {
	mu   sync.Mutex
	got  []delivery
	fail func(e stream.EntryValue) error // nil: succeed
}

func (r *recorder) handle(ctx context.Context, e stream.EntryValue) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		if err := fail(e); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, delivery{e.Partition, e.Offset, string(e.Record.Payload)})
	return nil
}

func (r *recorder) setFail(f func(e stream.EntryValue) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = f
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// count returns how many times each (partition, offset) was delivered.
func (r *recorder) count() map[[2]int]int {
	out := map[[2]int]int{}
	for _, d := range r.deliveries() {
		out[[2]int{d.partition, int(d.offset)}]++
	}
	return out
}

// running is a subscriber's Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, sub *subscriber.Subscriber) *running {
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- sub.Run(ctx) }()
	t.Cleanup(func() { r.cancel(); <-r.done })
	return r
}

// stop cancels the run and returns what Run returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
		return nil
	}
}

// wait returns what Run returned on its own.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// fast are options that keep the tests' waits short.
func fast(group string, h subscriber.Handler) subscriber.Options {
	return subscriber.Options{
		Group:        group,
		Handler:      h,
		Idempotent:   true,
		PollInterval: 20 * time.Millisecond,
		MinBackoff:   5 * time.Millisecond,
		MaxBackoff:   20 * time.Millisecond,
		MaxBatch:     7,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// debugLogger logs at debug level to w (a syncbuf.Buffer the test reads).
func debugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// metric returns the value of the metric name labelled group and
// partition in reg, and whether there is one.
func metric(t *testing.T, reg *prometheus.Registry, name, group string, partition int) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsAre(m, group, partition) {
				if m.Counter != nil {
					return m.Counter.GetValue(), true
				}
				return m.Gauge.GetValue(), true
			}
		}
	}
	return 0, false
}

func labelsAre(m *dto.Metric, group string, partition int) bool {
	var g, p string
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "group":
			g = l.GetValue()
		case "partition":
			p = l.GetValue()
		}
	}
	return g == group && p == fmt.Sprint(partition)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
