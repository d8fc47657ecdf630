package subscriber_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/stream/memory"
	"github.com/picomq/picomq/broker/stream/sqlstream"
	"github.com/picomq/picomq/broker/stream/subscriber"
	"github.com/picomq/picomq/internal/syncbuf"
	"github.com/picomq/picomq/internal/testwait"
)

// eachEngine runs f against each kind of engine, in parallel: the durable
// engines spend their time waiting for fsync.
func eachEngine(t *testing.T, kinds []string, f func(t *testing.T, kind string)) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// only wraps a stream hiding every sibling: an engine with none.
type only struct{ stream.Stream }

// noWaker hides the Waker only.
type noWaker struct {
	stream.Stream
	stream.Committer
}

func TestRefusedByField(t *testing.T) {
	t.Parallel()
	s, err := memory.New(stream.PolicyValue{Partitions: 2}, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, stream.EntryValue) error { return nil }
	good := subscriber.Options{Group: "g", Handler: ok, Idempotent: true}
	with := func(f func(o *subscriber.Options)) subscriber.Options { o := good; f(&o); return o }
	for _, c := range []struct {
		name  string
		s     stream.Stream
		o     subscriber.Options
		field string
	}{
		{"no stream", nil, good, "Stream"},
		{"no Committer", only{s}, good, "Stream"},
		{"no handler", s, with(func(o *subscriber.Options) { o.Handler = nil }), "Handler"},
		{"no group", s, with(func(o *subscriber.Options) { o.Group = "" }), "Group"},
		{"not asserted idempotent", s, with(func(o *subscriber.Options) { o.Idempotent = false }), "Idempotent"},
		{"a time with no Seeker", noWaker{s, s.(stream.Committer)}, with(func(o *subscriber.Options) { o.Start = subscriber.At(time.Now()) }), "Start"},
		{"unknown OnTrimmed", s, with(func(o *subscriber.Options) { o.OnTrimmed = 7 }), "OnTrimmed"},
		{"partition outside", s, with(func(o *subscriber.Options) { o.Partitions = []int{0, 2} }), "Partitions"},
		{"partition twice", s, with(func(o *subscriber.Options) { o.Partitions = []int{1, 1} }), "Partitions"},
		{"negative poll", s, with(func(o *subscriber.Options) { o.PollInterval = -1 }), "PollInterval"},
		{"negative backoff", s, with(func(o *subscriber.Options) { o.MaxBackoff = -1 }), "MaxBackoff"},
		{"negative batch", s, with(func(o *subscriber.Options) { o.MaxBatch = -1 }), "MaxBatch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub, err := subscriber.New(c.s, c.o)
			if sub != nil || !errors.Is(err, stream.SubscriberMisconfigured) {
				t.Fatalf("New = %v, %v; want SUBSCRIBER_MISCONFIGURED", sub, err)
			}
			if f, _ := errs.FieldOf(err, "field"); f != c.field {
				t.Fatalf("field = %v, want %s: %v", f, c.field, err)
			}
			if errs.ExitCode(err) != 78 {
				t.Fatalf("exit code %d", errs.ExitCode(err))
			}
		})
	}
	if _, err := subscriber.New(s, good); err != nil {
		t.Fatalf("New refused good options: %v", err)
	}
}

// TestDeliversInOrderAndResumes handles every record of every partition in
// offset order, exactly once across a clean stop, and resumes where the
// group committed.
func TestDeliversInOrderAndResumes(t *testing.T) {
	eachEngine(t, engines, func(t *testing.T, kind string) {
		const parts, n = 3, 8
		st := newStore(t, kind, stream.PolicyValue{Partitions: parts})
		s := st.open(t)
		appendN(t, s, n)
		rec := &recorder{}
		sub, err := subscriber.New(s, fast("g", rec.handle))
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, sub)
		testwait.Until(t, 20*time.Second, "every record is handled", func() bool { return len(rec.deliveries()) == parts*n })
		if err := r.stop(t); err != nil {
			t.Fatalf("Run = %v after a clean stop", err)
		}
		next := map[int]stream.Offset{}
		for _, d := range rec.deliveries() {
			if d.offset != next[d.partition] || d.payload != fmt.Sprintf("p%d-%d", d.partition, d.offset) {
				t.Fatalf("partition %d delivered offset %d (%s), want %d: not in order", d.partition, d.offset, d.payload, next[d.partition])
			}
			next[d.partition]++
		}
		st0 := sub.Status()
		for p := range parts {
			got, err := s.(stream.Committer).Committed(t.Context(), "g", p)
			if err != nil || got != n {
				t.Fatalf("partition %d committed %d, %v; want %d", p, got, err, n)
			}
			if ps := st0.Partitions[p]; ps.Next != n || ps.Handled != n || ps.State != subscriber.Stopped {
				t.Fatalf("status of partition %d = %+v", p, ps)
			}
		}

		// A restart — a new stream value over the same storage — handles
		// the records appended since, and only those.
		s = st.open(t)
		appendN(t, s, 2)
		rec2 := &recorder{}
		sub, err = subscriber.New(s, fast("g", rec2.handle))
		if err != nil {
			t.Fatal(err)
		}
		r = start(t, sub)
		testwait.Until(t, 20*time.Second, "the new records are handled", func() bool { return len(rec2.deliveries()) == parts*2 })
		// A sleep that measures: nothing more is delivered for a while.
		time.Sleep(50 * time.Millisecond)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		for _, d := range rec2.deliveries() {
			if d.offset < n {
				t.Fatalf("the restarted group delivered %d/%d again", d.partition, d.offset)
			}
		}
		if got := len(rec2.deliveries()); got != parts*2 {
			t.Fatalf("%d deliveries after the restart, want %d", got, parts*2)
		}
	})
}

// TestCrashBetweenHandleAndCommit stops the subscriber, as a crash would,
// after a handler succeeded and before its offset was committed: the next
// run delivers that record again, and loses none.
func TestCrashBetweenHandleAndCommit(t *testing.T) {
	eachEngine(t, engines, func(t *testing.T, kind string) {
		const parts, n, at = 2, 8, 5
		st := newStore(t, kind, stream.PolicyValue{Partitions: parts})
		s := st.open(t)
		appendN(t, s, n)
		rec := &recorder{}
		crashed := atomic.Bool{}
		sub, err := subscriber.New(s, fast("g", rec.handle))
		if err != nil {
			t.Fatal(err)
		}
		subscriber.SetCrashBeforeCommit(sub, func(p int, e stream.EntryValue) error {
			if p == 0 && e.Offset == at && crashed.CompareAndSwap(false, true) {
				return subscriber.ErrCrash
			}
			return nil
		})
		if err := start(t, sub).wait(t); !errors.Is(err, subscriber.ErrCrash) {
			t.Fatalf("Run = %v, want the simulated crash", err)
		}
		got, err := s.(stream.Committer).Committed(t.Context(), "g", 0)
		if err != nil || got != at {
			t.Fatalf("partition 0 committed %d, %v; want %d: the crashed record's offset is not committed", got, err, at)
		}
		if rec.count()[[2]int{0, at}] != 1 {
			t.Fatalf("the record was handled %d times before the crash", rec.count()[[2]int{0, at}])
		}

		s = st.open(t) // the restarted process
		sub, err = subscriber.New(s, fast("g", rec.handle))
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, sub)
		testwait.Until(t, 20*time.Second, "every record is handled", func() bool { return len(rec.count()) == parts*n })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		counts := rec.count()
		if counts[[2]int{0, at}] != 2 {
			t.Fatalf("the crashed record was delivered %d times, want twice (redelivery)", counts[[2]int{0, at}])
		}
		for p := range parts {
			for o := range n {
				if counts[[2]int{p, o}] == 0 {
					t.Fatalf("record %d/%d was never delivered: lost", p, o)
				}
			}
		}
	})
}

// TestPoisonParksOnlyItsPartition fails one record's handler: its
// partition parks on it — retrying, in the status, metrics and logs —
// while the other goes on, and resumes once the handler succeeds.
func TestPoisonParksOnlyItsPartition(t *testing.T) {
	eachEngine(t, engines, func(t *testing.T, kind string) {
		const parts, n, poison = 2, 6, 2
		st := newStore(t, kind, stream.PolicyValue{Partitions: parts})
		s := st.open(t)
		appendN(t, s, n)
		rec := &recorder{}
		rec.setFail(func(e stream.EntryValue) error {
			if e.Partition == 0 && e.Offset == poison {
				return errors.New("cannot parse the order")
			}
			return nil
		})
		reg := prometheus.NewRegistry()
		var logs syncbuf.Buffer
		o := fast("g", rec.handle)
		o.Registerer, o.Logger = reg, debugLogger(&logs)
		sub, err := subscriber.New(s, o)
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, sub)
		testwait.Until(t, 20*time.Second, "partition 1 is handled and partition 0 parked and retried", func() bool {
			st := sub.Status()
			return st.Partitions[1].Next == n && st.Partitions[0].State == subscriber.Parked && st.Partitions[0].Attempts >= 3
		})
		status := sub.Status()
		if fmt.Sprint(status.Parked()) != "[0]" {
			t.Fatalf("parked partitions %v, want [0]", status.Parked())
		}
		ps := status.Partitions[0]
		if ps.Next != poison || ps.LastError != "cannot parse the order" || ps.ParkedSince.IsZero() || ps.RetryAt.IsZero() {
			t.Fatalf("status of the parked partition = %+v", ps)
		}
		if status.Partitions[1].State != subscriber.Running || status.Partitions[1].Next != n {
			t.Fatalf("status of the other partition = %+v", status.Partitions[1])
		}
		for o := poison + 1; o < n; o++ {
			if rec.count()[[2]int{0, o}] != 0 {
				t.Fatalf("record 0/%d, behind the poison, was delivered", o)
			}
		}
		if v, _ := metric(t, reg, "picomq_subscriber_parked", "g", 0); v != 1 {
			t.Fatalf("parked gauge of partition 0 = %v", v)
		}
		if v, _ := metric(t, reg, "picomq_subscriber_parked", "g", 1); v != 0 {
			t.Fatalf("parked gauge of partition 1 = %v", v)
		}
		if v, _ := metric(t, reg, "picomq_subscriber_handler_failures_total", "g", 0); v < 3 {
			t.Fatalf("failures of partition 0 = %v", v)
		}
		if v, _ := metric(t, reg, "picomq_subscriber_handled_total", "g", 1); v != n {
			t.Fatalf("handled of partition 1 = %v", v)
		}
		if l := logs.String(); !contains(l, "partition parked") || !contains(l, "cannot parse the order") || !contains(l, "offset=2") {
			t.Fatalf("the logs do not report the parked partition:\n%s", l)
		}

		rec.setFail(nil) // the handler is fixed
		testwait.Until(t, 20*time.Second, "partition 0 resumes", func() bool { return sub.Status().Partitions[0].Next == n })
		if v, _ := metric(t, reg, "picomq_subscriber_parked", "g", 0); v != 0 {
			t.Fatalf("parked gauge after resuming = %v", v)
		}
		if ps := sub.Status().Partitions[0]; ps.State != subscriber.Running || ps.Attempts != 0 || ps.LastError != "" {
			t.Fatalf("status after resuming = %+v", ps)
		}
		if !contains(logs.String(), "partition resumed") {
			t.Fatal("the logs do not report the resumption")
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPanickingHandlerParks: a panic is a failure of the record, not of
// the process.
func TestPanickingHandlerParks(t *testing.T) {
	t.Parallel()
	st := newStore(t, "memory", stream.PolicyValue{Partitions: 2})
	s := st.open(t)
	appendN(t, s, 3)
	var logs syncbuf.Buffer
	rec := &recorder{}
	rec.setFail(func(e stream.EntryValue) error {
		if e.Partition == 1 && e.Offset == 1 {
			panic("nil map")
		}
		return nil
	})
	o := fast("g", rec.handle)
	o.Logger = debugLogger(&logs)
	sub, err := subscriber.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, sub)
	testwait.Until(t, 20*time.Second, "partition 1 parks", func() bool {
		st := sub.Status()
		return st.Partitions[1].State == subscriber.Parked && st.Partitions[1].Attempts >= 2 && st.Partitions[0].Next == 3
	})
	if !contains(logs.String(), "handler panicked") || !contains(sub.Status().Partitions[1].LastError, "nil map") {
		t.Fatalf("the panic is not reported: %+v\n%s", sub.Status().Partitions[1], logs.String())
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestTrimmedOnResume trims records the group has not handled: the
// configured policy decides, and either way it is reported.
func TestTrimmedOnResume(t *testing.T) {
	eachEngine(t, engines, func(t *testing.T, kind string) {
		for _, policy := range []subscriber.OnTrimmed{subscriber.TrimmedFail, subscriber.TrimmedSkipToFirst} {
			t.Run(policy.String(), func(t *testing.T) {
				st := newStore(t, kind, stream.PolicyValue{})
				s := st.open(t)
				appendN(t, s, 10)
				if err := s.(stream.Committer).Commit(t.Context(), "g", 0, 2); err != nil {
					t.Fatal(err)
				}
				if err := s.(stream.Trimmer).Trim(t.Context(), 0, 5); err != nil {
					t.Fatal(err)
				}
				rec := &recorder{}
				reg := prometheus.NewRegistry()
				var logs syncbuf.Buffer
				o := fast("g", rec.handle)
				o.OnTrimmed, o.Registerer, o.Logger = policy, reg, debugLogger(&logs)
				sub, err := subscriber.New(s, o)
				if err != nil {
					t.Fatal(err)
				}
				r := start(t, sub)
				if policy == subscriber.TrimmedFail {
					err := r.wait(t)
					if !errors.Is(err, stream.OffsetTrimmed) {
						t.Fatalf("Run = %v, want OFFSET_TRIMMED", err)
					}
					if len(rec.deliveries()) != 0 {
						t.Fatalf("records were delivered: %v", rec.deliveries())
					}
					if ps := sub.Status().Partitions[0]; ps.State != subscriber.Failed || ps.Trimmed != 1 || ps.SkippedFrom != 2 || ps.SkippedTo != 5 {
						t.Fatalf("status = %+v", ps)
					}
					if got, _ := s.(stream.Committer).Committed(t.Context(), "g", 0); got != 2 {
						t.Fatalf("committed moved to %d under TrimmedFail", got)
					}
				} else {
					testwait.Until(t, 20*time.Second, "the retained records are handled", func() bool { return len(rec.deliveries()) == 5 })
					if err := r.stop(t); err != nil {
						t.Fatal(err)
					}
					if d := rec.deliveries(); d[0].offset != 5 || d[4].offset != 9 {
						t.Fatalf("delivered %v, want 5..9", d)
					}
					if ps := sub.Status().Partitions[0]; ps.Trimmed != 1 || ps.SkippedFrom != 2 || ps.SkippedTo != 5 || ps.Next != 10 {
						t.Fatalf("status = %+v", ps)
					}
				}
				if v, _ := metric(t, reg, "picomq_subscriber_trimmed_total", "g", 0); v != 1 {
					t.Fatalf("trimmed counter = %v", v)
				}
				if l := logs.String(); !contains(l, "trimmed") || !contains(l, "offset=2") || !contains(l, "first=5") || !contains(l, "policy="+policy.String()) {
					t.Fatalf("the logs do not report the trimmed offsets:\n%s", l)
				}
			})
		}
	})
}

// TestStartPositions starts a group that never committed where Start says.
func TestStartPositions(t *testing.T) {
	eachEngine(t, []string{"memory", "sqlite"}, func(t *testing.T, kind string) {
		st := newStore(t, kind, stream.PolicyValue{})
		s := st.open(t)
		appendN(t, s, 3)
		// mid is an instant after the first three records were appended and
		// before the next two are: the clock is read until it has moved past
		// the third record's instant, and then past mid (both engines keep
		// nanoseconds).
		third, err := s.Read(t.Context(), 0, 2, 1)
		if err != nil || len(third) != 1 {
			t.Fatalf("read offset 2: %v, %v", third, err)
		}
		testwait.Until(t, 20*time.Second, "the clock passes the third record's instant", func() bool { return time.Now().After(third[0].AppendedAt) })
		mid := time.Now()
		testwait.Until(t, 20*time.Second, "the clock passes mid", func() bool { return time.Now().After(mid) })
		appendN(t, s, 2) // offsets 3 and 4, after mid
		for _, c := range []struct {
			group string
			start subscriber.Start
			first stream.Offset
			count int
		}{
			// Each group appends one record once it runs: 5, 6 and 7.
			{"earliest", subscriber.Earliest, 0, 6},
			{"latest", subscriber.Latest, 6, 1},
			{"at", subscriber.At(mid), 3, 5},
		} {
			rec := &recorder{}
			o := fast(c.group, rec.handle)
			o.Start = c.start
			sub, err := subscriber.New(s, o)
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, sub)
			testwait.Until(t, 20*time.Second, c.group+" starts", func() bool { return sub.Status().Partitions[0].State == subscriber.Running })
			if _, err := s.Append(t.Context(), []stream.RecordValue{{Payload: []byte("new")}}); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, 20*time.Second, c.group+" handles", func() bool { return len(rec.deliveries()) == c.count })
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if d := rec.deliveries(); d[0].offset != c.first {
				t.Fatalf("%s started at %d, want %d", c.group, d[0].offset, c.first)
			}
		}
	})
}

// TestStopsCleanlyWithoutLossOrSkip stops and restarts a subscriber again
// and again while a producer appends: every record is delivered exactly
// once — a clean stop commits what was handled and handles nothing more.
func TestStopsCleanlyWithoutLossOrSkip(t *testing.T) {
	eachEngine(t, engines, func(t *testing.T, kind string) {
		const parts, total = 2, 80
		st := newStore(t, kind, stream.PolicyValue{Partitions: parts})
		s := st.open(t)
		produced := make(chan error, 1)
		go func() {
			for i := range total {
				if _, err := s.Append(t.Context(), []stream.RecordValue{{Key: fmt.Appendf(nil, "k%d", i%5), Payload: fmt.Appendf(nil, "%d", i)}}); err != nil {
					produced <- err
					return
				}
				// Pacing, not a wait: the producer spreads its appends
				// over the subscriber's many runs.
				time.Sleep(time.Millisecond)
			}
			produced <- nil
		}()
		rec := &recorder{}
		for run := 0; ; run++ {
			sub, err := subscriber.New(s, fast("g", rec.handle))
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, sub)
			before := len(rec.deliveries())
			testwait.Until(t, 20*time.Second, "progress", func() bool { return len(rec.deliveries()) > before || before == total })
			// Not a wait either: each run stops at a different moment
			// after its first delivery, 0 to 21ms later.
			time.Sleep(time.Duration(run%4) * 7 * time.Millisecond)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if len(rec.deliveries()) == total {
				break
			}
			if run > 500 {
				t.Fatalf("only %d of %d records after %d runs", len(rec.deliveries()), total, run)
			}
		}
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		for key, n := range rec.count() {
			if n != 1 {
				t.Fatalf("record %v delivered %d times across clean stops", key, n)
			}
		}
		next := map[int]stream.Offset{}
		for _, d := range rec.deliveries() {
			if d.offset != next[d.partition] {
				t.Fatalf("partition %d delivered %d after %d: skipped", d.partition, d.offset, next[d.partition])
			}
			next[d.partition]++
		}
	})
}

// TestPollsWithoutWaker: an engine with no Waker is read at PollInterval.
func TestPollsWithoutWaker(t *testing.T) {
	t.Parallel()
	st := newStore(t, "memory", stream.PolicyValue{})
	s := st.open(t)
	rec := &recorder{}
	sub, err := subscriber.New(noWaker{s, s.(stream.Committer)}, fast("g", rec.handle))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, sub)
	testwait.Until(t, 20*time.Second, "running", func() bool { return sub.Status().Partitions[0].State == subscriber.Running })
	appendN(t, s, 3)
	testwait.Until(t, 20*time.Second, "polled", func() bool { return len(rec.deliveries()) == 3 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// idleWatch counts the Reads of a stream that come back empty: after one,
// the partition is in its wait (or about to be, holding the Wake channel it
// took before the Read).
type idleWatch struct {
	stream.Stream
	stream.Committer
	stream.Waker
	empty atomic.Int32
}

func (w *idleWatch) Read(ctx context.Context, p int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	es, err := w.Stream.Read(ctx, p, from, max)
	if err == nil && len(es) == 0 {
		w.empty.Add(1)
	}
	return es, err
}

// TestWakerWakesIdlePartition: with a Waker, an append is handled at once
// however long PollInterval is.
func TestWakerWakesIdlePartition(t *testing.T) {
	t.Parallel()
	st := newStore(t, "memory", stream.PolicyValue{})
	s := st.open(t)
	w := &idleWatch{Stream: s, Committer: s.(stream.Committer), Waker: s.(stream.Waker)}
	rec := &recorder{}
	o := fast("g", rec.handle)
	o.PollInterval = time.Hour
	sub, err := subscriber.New(w, o)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, sub)
	testwait.Until(t, 20*time.Second, "the partition is idle, in its wait", func() bool { return w.empty.Load() > 0 })
	appendN(t, s, 1)
	testwait.Until(t, 20*time.Second, "woken", func() bool { return len(rec.deliveries()) == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestRunOnceAtATime(t *testing.T) {
	t.Parallel()
	st := newStore(t, "memory", stream.PolicyValue{})
	s := st.open(t)
	sub, err := subscriber.New(s, fast("g", (&recorder{}).handle))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, sub)
	testwait.Until(t, 20*time.Second, "running", func() bool { return sub.Status().Running })
	if err := sub.Run(t.Context()); err == nil {
		t.Fatal("a second Run ran")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if sub.Status().Running {
		t.Fatal("still running after Run returned")
	}
}

// flaky is a memory stream whose first reads fail as a broken database
// would, and whose Committed can be made to answer an offset of its choice.
type flaky struct {
	stream.Stream
	stream.Committer
	failReads atomic.Int32
	committed atomic.Int64 // > 0: Committed answers committed-1
}

func (f *flaky) Read(ctx context.Context, p int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	if f.failReads.Add(-1) >= 0 {
		return nil, stream.StreamBackendFailed.Wrap(errors.New("connection reset"), "operation", "Read")
	}
	return f.Stream.Read(ctx, p, from, max)
}

func (f *flaky) Committed(ctx context.Context, group string, p int) (stream.Offset, error) {
	if c := f.committed.Load(); c > 0 {
		return stream.Offset(c - 1), nil
	}
	return f.Committer.Committed(ctx, group, p)
}

// TestEngineFailureRetried: a failing engine is retried with backoff and
// reported — status, metric, log — without parking or losing a record.
func TestEngineFailureRetried(t *testing.T) {
	t.Parallel()
	s, _ := memory.New(stream.PolicyValue{}, memory.Options{})
	f := &flaky{Stream: s, Committer: s.(stream.Committer)}
	f.failReads.Store(4)
	appendN(t, s, 3)
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	var logs syncbuf.Buffer
	o := fast("g", rec.handle)
	o.Registerer, o.Logger = reg, debugLogger(&logs)
	sub, err := subscriber.New(f, o)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, sub)
	testwait.Until(t, 20*time.Second, "delivered after the failures", func() bool { return sub.Status().Partitions[0].Next == 3 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if v, _ := metric(t, reg, "picomq_subscriber_engine_failures_total", "g", 0); v != 4 {
		t.Fatalf("engine failures = %v, want 4", v)
	}
	if v, _ := metric(t, reg, "picomq_subscriber_handler_failures_total", "g", 0); v != 0 {
		t.Fatalf("handler failures = %v: the engine's failures are not the record's", v)
	}
	if l := logs.String(); !contains(l, "read failed") || !contains(l, "connection reset") || !contains(l, "code=0.3.94.1") {
		t.Fatalf("the logs do not report the failed reads:\n%s", l)
	}
	if len(rec.deliveries()) != 3 {
		t.Fatalf("delivered %v", rec.deliveries())
	}
}

// TestOffsetAheadStops: a group offset past the partition's end — a cursor
// of another stream — stops the subscriber rather than waiting forever.
func TestOffsetAheadStops(t *testing.T) {
	t.Parallel()
	s, _ := memory.New(stream.PolicyValue{}, memory.Options{})
	f := &flaky{Stream: s, Committer: s.(stream.Committer)}
	appendN(t, s, 2)
	f.committed.Store(10 + 1)
	sub, err := subscriber.New(f, fast("g", (&recorder{}).handle))
	if err != nil {
		t.Fatal(err)
	}
	if err := start(t, sub).wait(t); !errors.Is(err, stream.OffsetAhead) {
		t.Fatalf("Run = %v, want OFFSET_AHEAD", err)
	}
	if ps := sub.Status().Partitions[0]; ps.State != subscriber.Failed || !contains(ps.LastError, "OFFSET_AHEAD") {
		t.Fatalf("status = %+v", ps)
	}
}

// TestHandlerTransaction: on the SQL engine the handler runs in the
// transaction its offset commits in, unless NoTransaction.
func TestHandlerTransaction(t *testing.T) {
	t.Parallel()
	for _, noTx := range []bool{false, true} {
		t.Run(fmt.Sprint("NoTransaction=", noTx), func(t *testing.T) {
			st := newStore(t, "sqlite", stream.PolicyValue{})
			s := st.open(t)
			appendN(t, s, 1)
			var sawTx atomic.Int32 // 1: no, 2: yes
			o := fast("g", func(ctx context.Context, e stream.EntryValue) error {
				if sqlstream.TxFrom(ctx, st.db.DB) != nil {
					sawTx.Store(2)
				} else {
					sawTx.Store(1)
				}
				return nil
			})
			o.NoTransaction = noTx
			sub, err := subscriber.New(s, o)
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, sub)
			testwait.Until(t, 20*time.Second, "handled", func() bool { return sub.Status().Partitions[0].Next == 1 })
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int32{false: 2, true: 1}[noTx]; sawTx.Load() != want {
				t.Fatalf("the handler saw a transaction: %v, want %v", sawTx.Load() == 2, want == 2)
			}
		})
	}
}

// TestSharedRegistry: subscribers of one process share a registry, told
// apart by their group label.
func TestSharedRegistry(t *testing.T) {
	t.Parallel()
	s, _ := memory.New(stream.PolicyValue{}, memory.Options{})
	appendN(t, s, 2)
	reg := prometheus.NewRegistry()
	var subs []*subscriber.Subscriber
	for _, g := range []string{"a", "b"} {
		o := fast(g, (&recorder{}).handle)
		o.Registerer = reg
		sub, err := subscriber.New(s, o)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	for _, sub := range subs {
		r := start(t, sub)
		testwait.Until(t, 20*time.Second, "handled", func() bool { return sub.Status().Partitions[0].Next == 2 })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"a", "b"} {
		if v, _ := metric(t, reg, "picomq_subscriber_handled_total", g, 0); v != 2 {
			t.Fatalf("group %s handled %v", g, v)
		}
	}
}

// TestPartitionsSubset handles only the partitions listed.
func TestPartitionsSubset(t *testing.T) {
	t.Parallel()
	s, _ := memory.New(stream.PolicyValue{Partitions: 3}, memory.Options{})
	appendN(t, s, 2)
	rec := &recorder{}
	o := fast("g", rec.handle)
	o.Partitions = []int{2, 0}
	sub, err := subscriber.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, sub)
	testwait.Until(t, 20*time.Second, "handled", func() bool { return len(rec.deliveries()) == 4 })
	// A sleep that measures: partition 1 stays unhandled for a while.
	time.Sleep(30 * time.Millisecond)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, d := range rec.deliveries() {
		if d.partition == 1 {
			t.Fatalf("partition 1, not listed, was delivered: %v", rec.deliveries())
		}
	}
	if st := sub.Status(); len(st.Partitions) != 2 || st.Partitions[0].Partition != 0 || st.Partitions[1].Partition != 2 {
		t.Fatalf("status lists %+v", st.Partitions)
	}
}
