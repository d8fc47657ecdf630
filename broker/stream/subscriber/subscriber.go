// Package subscriber runs a handler over every record of a stream for a
// named consumer group: each partition in offset order, committing the
// group's next offset through stream.Committer once the handler succeeds.
//
// Delivery is at least once. A crash between the handler's success and the
// commit delivers the record again at the next start, never loses it — so
// the handler must be idempotent, and New refuses one whose author has not
// said it is (Options.Idempotent). When the engine can commit in a
// transaction of its own database (the SQL engine: Transactional), the
// subscriber runs the handler inside that transaction and commits the offset
// in it too: a handler that makes its writes through the transaction in its
// ctx (sqlstream.TxFrom) is exactly-once in effect.
//
// A record whose handler fails stays where it is: its partition PARKS — it
// retries the record with a capped exponential backoff, and says so in the
// logs, the metrics and Status — while every other partition goes on.
//
//	sub, err := subscriber.New(s, subscriber.Options{
//		Group:      "billing",
//		Idempotent: true, // a record may be handled twice
//		Handler: func(ctx context.Context, e stream.EntryValue) error {
//			return bill(ctx, e.Record.Payload)
//		},
//	})
//	err = sub.Run(ctx) // until ctx ends
package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// Handler handles one record. It returns nil once the record's effects are
// done; an error — or a panic — leaves the record where it is and parks its
// partition until a retry succeeds. The record may have been handled before:
// delivery is at least once.
type Handler func(ctx context.Context, e stream.EntryValue) error

// Transactional is an engine that can run a function in a transaction of
// its own storage, carried by the ctx it passes, which its Commit (and
// Append) then join. *sqlstream.Stream is one. The subscriber runs the
// handler and the commit of its offset in one such transaction.
type Transactional interface {
	InTx(ctx context.Context, fn func(ctx context.Context) error) error
}

// Start is where a group that never committed on a partition starts
// (its Committed is UNKNOWN_GROUP).
type Start struct {
	kind startKind
	at   time.Time
}

type startKind int

const (
	earliest startKind = iota
	latest
	atTime
)

var (
	// Earliest starts at the partition's first retained record: every
	// record still kept is handled. It is the zero Start.
	Earliest = Start{kind: earliest}
	// Latest starts at the partition's next offset: only records appended
	// from now on are handled. The position is committed at once, so a
	// restart before the first record resumes there rather than at a later
	// "latest".
	Latest = Start{kind: latest}
)

// At starts at the first record appended at or after t (stream.Seeker).
func At(t time.Time) Start { return Start{kind: atTime, at: t} }

func (s Start) String() string {
	switch s.kind {
	case latest:
		return "latest"
	case atTime:
		return "at " + s.at.Format(time.RFC3339Nano)
	}
	return "earliest"
}

// OnTrimmed is what a partition does when the offset it resumes from is no
// longer retained (OFFSET_TRIMMED): the records between it and the first
// retained one were trimmed before the group handled them. Either way it is
// logged, counted and shown in Status; it is never skipped silently.
type OnTrimmed int

const (
	// TrimmedFail stops the subscriber: Run returns the OFFSET_TRIMMED
	// error, and an operator decides. It is the zero value.
	TrimmedFail OnTrimmed = iota
	// TrimmedSkipToFirst commits the first retained offset and goes on from
	// there.
	TrimmedSkipToFirst
)

func (o OnTrimmed) String() string {
	if o == TrimmedSkipToFirst {
		return "skip-to-first"
	}
	return "fail"
}

// Options configure a Subscriber. Group, Handler and Idempotent are
// required; every other zero value has a default.
type Options struct {
	// Group names the consumer group whose offsets are committed.
	Group string
	// Handler handles each record.
	Handler Handler
	// Idempotent is the handler author's assertion that handling a record
	// twice does no harm: a crash between the handler and the commit
	// delivers the record again. New refuses a false one.
	Idempotent bool
	// Start is where a partition the group never committed on starts
	// (Earliest when zero).
	Start Start
	// OnTrimmed is what a partition does when its offset was trimmed
	// (TrimmedFail when zero).
	OnTrimmed OnTrimmed
	// Partitions lists the partitions to handle; nil means every one.
	Partitions []int
	// MaxBatch is how many records one Read asks for (default 100).
	MaxBatch int
	// PollInterval is how long an idle partition waits before it reads
	// again (default 1s). With a stream.Waker, an append through the same
	// stream value wakes it at once; the interval bounds the latency of
	// appends from other processes.
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait before a failed record is
	// tried again: MinBackoff, doubling per failure, capped at MaxBackoff,
	// with ±20% jitter (defaults 100ms and 30s).
	MinBackoff, MaxBackoff time.Duration
	// CommitTimeout bounds the commit of a record the handler finished just
	// as ctx ended (default 10s): the subscriber stops after that commit,
	// not before it, so the record is not delivered again needlessly.
	CommitTimeout time.Duration
	// Logger receives parked and resumed partitions, trimmed offsets and
	// read failures (default slog.Default()).
	Logger *slog.Logger
	// Registerer, when set, receives the subscriber's Prometheus metrics
	// (labelled by group and partition).
	Registerer prometheus.Registerer
	// NoTransaction runs the handler outside the engine's transaction even
	// when the engine is Transactional, committing after it as on the other
	// engines: for a handler that calls other systems and should not hold a
	// database transaction — on SQLite, the database's write lock — open
	// while it does.
	NoTransaction bool
}

// Subscriber runs a handler over a stream for a consumer group.
type Subscriber struct {
	s         stream.Stream
	committer stream.Committer
	seeker    stream.Seeker
	waker     stream.Waker
	tx        Transactional
	o         Options
	log       *slog.Logger
	m         *metrics
	parts     []int

	mu      sync.Mutex
	running bool
	status  map[int]*PartitionStatus

	// beforeCommit, set by tests only (before Run), runs between a
	// handler's success and the commit of its offset: the window a crash
	// leaves a record handled and not committed. A field of the
	// subscriber, not of the package, so that tests of several subscribers
	// run in parallel.
	beforeCommit func(partition int, e stream.EntryValue) error
}

func misconfigured(field string, value any, reason string) error {
	return stream.SubscriberMisconfigured.With("field", field, "value", value, "reason", reason)
}

// New returns a subscriber of s, or SUBSCRIBER_MISCONFIGURED naming the
// field it refuses: Stream (none, or an engine with no stream.Committer to
// keep the group's offsets), Handler (none), Group (empty), Idempotent (not
// asserted), Start (a time, on an engine with no stream.Seeker), Partitions
// (one outside the stream, or twice), and a negative MaxBatch, PollInterval,
// MinBackoff, MaxBackoff or CommitTimeout.
func New(s stream.Stream, o Options) (*Subscriber, error) {
	if s == nil {
		return nil, misconfigured("Stream", nil, "no stream")
	}
	committer, ok := s.(stream.Committer)
	if !ok {
		return nil, misconfigured("Stream", fmt.Sprintf("%T", s), "the engine keeps no group offsets (no stream.Committer)")
	}
	if o.Handler == nil {
		return nil, misconfigured("Handler", nil, "no handler")
	}
	if o.Group == "" {
		return nil, misconfigured("Group", "", "no consumer group")
	}
	if !o.Idempotent {
		return nil, misconfigured("Idempotent", false,
			"delivery is at least once: a crash between the handler and the commit delivers the record again; "+
				"set Idempotent once the handler tolerates that")
	}
	seeker, _ := s.(stream.Seeker)
	if o.Start.kind == atTime && seeker == nil {
		return nil, misconfigured("Start", o.Start.String(), "a time needs an engine with a stream.Seeker")
	}
	if o.OnTrimmed != TrimmedFail && o.OnTrimmed != TrimmedSkipToFirst {
		return nil, misconfigured("OnTrimmed", int(o.OnTrimmed), "neither TrimmedFail nor TrimmedSkipToFirst")
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"PollInterval", o.PollInterval}, {"MinBackoff", o.MinBackoff}, {"MaxBackoff", o.MaxBackoff}, {"CommitTimeout", o.CommitTimeout},
	} {
		if d.value < 0 {
			return nil, misconfigured(d.field, d.value, "negative")
		}
	}
	if o.MaxBatch < 0 {
		return nil, misconfigured("MaxBatch", o.MaxBatch, "negative")
	}
	parts := o.Partitions
	if parts == nil {
		for p := range s.Partitions() {
			parts = append(parts, p)
		}
	} else {
		seen := map[int]bool{}
		for _, p := range parts {
			if p < 0 || p >= s.Partitions() {
				return nil, misconfigured("Partitions", p, fmt.Sprintf("outside [0, %d)", s.Partitions()))
			}
			if seen[p] {
				return nil, misconfigured("Partitions", p, "listed twice")
			}
			seen[p] = true
		}
		parts = slices.Clone(parts)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 100
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 30 * time.Second
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if o.CommitTimeout == 0 {
		o.CommitTimeout = 10 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	sub := &Subscriber{
		s:         s,
		committer: committer,
		seeker:    seeker,
		o:         o,
		log:       log.With("group", o.Group),
		m:         newMetrics(o.Registerer),
		parts:     parts,
		status:    make(map[int]*PartitionStatus, len(parts)),
	}
	sub.waker, _ = s.(stream.Waker)
	if !o.NoTransaction {
		sub.tx, _ = s.(Transactional)
	}
	for _, p := range parts {
		sub.status[p] = &PartitionStatus{Partition: p, State: Stopped}
	}
	return sub, nil
}

// errRunning refuses a second Run of one Subscriber while the first runs:
// two would handle every record twice.
var errRunning = errors.New("subscriber: already running")

// Run handles records until ctx ends, then returns nil once every
// partition has stopped — after the commit of a record whose handler had
// finished, never between a record and the next. It returns early, with
// the error, when a partition cannot go on: OFFSET_TRIMMED under
// TrimmedFail, or OFFSET_AHEAD (the group's offset is past the partition's
// end: a cursor of another stream). Failures of the handler, and of the
// engine, are retried, not returned.
func (s *Subscriber) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errRunning
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		fatal error
	)
	for _, p := range s.parts {
		wg.Go(func() {
			err := s.partition(ctx, p)
			s.update(p, func(st *PartitionStatus) {
				if err != nil {
					st.State, st.LastError = Failed, err.Error()
				} else {
					st.State = Stopped
				}
			})
			if err != nil {
				once.Do(func() { fatal = err })
				cancel(err)
			}
		})
	}
	wg.Wait()
	return fatal
}

// partition handles partition p until ctx ends (nil) or it cannot go on.
func (s *Subscriber) partition(ctx context.Context, p int) error {
	s.update(p, func(st *PartitionStatus) { st.State, st.LastError = Starting, "" })
	next, err := s.resume(ctx, p)
	if err != nil || ctx.Err() != nil {
		return err
	}
	s.setNext(p, next)
	failures := 0
	for ctx.Err() == nil {
		var wake <-chan struct{}
		if s.waker != nil {
			wake = s.waker.Wake() // before the Read that may come back empty
		}
		es, err := s.s.Read(ctx, p, next, s.o.MaxBatch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			switch {
			case errors.Is(err, stream.OffsetTrimmed):
				if next, err = s.trimmed(ctx, p, next, err); err != nil {
					return err
				}
				s.setNext(p, next)
				continue
			case errors.Is(err, stream.OffsetAhead):
				s.log.Error("stream subscriber: the group's offset is past the partition's end", "partition", p, "offset", next, "error", err)
				return err
			}
			failures++
			s.stall(ctx, p, "read", next, failures, err)
			continue
		}
		failures = 0
		s.update(p, func(st *PartitionStatus) {
			if st.State != Parked {
				st.State, st.LastError = Running, ""
			}
		})
		if len(es) == 0 {
			t := time.NewTimer(s.o.PollInterval)
			select {
			case <-ctx.Done():
			case <-wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		for _, e := range es {
			if ctx.Err() != nil {
				return nil
			}
			if err := s.deliver(ctx, p, e); err != nil || ctx.Err() != nil {
				return err
			}
			next = e.Offset + 1
		}
	}
	return nil
}

// resume returns where partition p starts: the group's committed offset,
// or Options.Start when it never committed there.
func (s *Subscriber) resume(ctx context.Context, p int) (stream.Offset, error) {
	for failures := 1; ; failures++ {
		next, err := s.committer.Committed(ctx, s.o.Group, p)
		if err == nil {
			s.log.Debug("stream subscriber: resuming", "partition", p, "offset", next)
			return next, nil
		}
		if errors.Is(err, stream.UnknownGroup) {
			next, err = s.start(ctx, p)
			if err == nil {
				s.log.Info("stream subscriber: the group never committed here: starting", "partition", p, "start", s.o.Start.String(), "offset", next)
				return next, nil
			}
		}
		if ctx.Err() != nil {
			return 0, nil
		}
		s.stall(ctx, p, "resume", 0, failures, err)
		if ctx.Err() != nil {
			return 0, nil
		}
	}
}

func (s *Subscriber) start(ctx context.Context, p int) (stream.Offset, error) {
	switch s.o.Start.kind {
	case latest:
		b, err := s.s.Bounds(ctx, p)
		if err != nil {
			return 0, err
		}
		// Committed at once: a restart before the first record must not
		// move "latest" past records appended in between.
		if err := s.committer.Commit(ctx, s.o.Group, p, b.Next); err != nil {
			return 0, err
		}
		return b.Next, nil
	case atTime:
		return s.seeker.OffsetAt(ctx, p, s.o.Start.at)
	default:
		b, err := s.s.Bounds(ctx, p)
		return b.First, err
	}
}

// trimmed reports that partition p's offset next was trimmed and applies
// Options.OnTrimmed: the error under TrimmedFail, the first retained offset
// — committed — under TrimmedSkipToFirst.
func (s *Subscriber) trimmed(ctx context.Context, p int, next stream.Offset, cause error) (stream.Offset, error) {
	b, err := s.s.Bounds(ctx, p)
	if err != nil {
		s.stall(ctx, p, "bounds", next, 1, err)
		return next, nil // read again, and meet the refusal again
	}
	s.m.trimmed.WithLabelValues(s.o.Group, label(p)).Inc()
	s.update(p, func(st *PartitionStatus) {
		st.Trimmed++
		st.SkippedTo, st.SkippedFrom = b.First, next
		st.LastError = cause.Error()
	})
	attrs := []any{"partition", p, "offset", next, "first", b.First, "lost", uint64(b.First - next), "policy", s.o.OnTrimmed.String()}
	if s.o.OnTrimmed == TrimmedFail {
		s.log.Error("stream subscriber: the group's offset was trimmed before it was handled; stopping", append(attrs, "error", cause)...)
		return next, cause
	}
	s.log.Warn("stream subscriber: the group's offset was trimmed before it was handled; skipping to the first retained record", attrs...)
	for failures := 1; ; failures++ {
		err := s.committer.Commit(ctx, s.o.Group, p, b.First)
		if err == nil || ctx.Err() != nil {
			return b.First, nil
		}
		s.stall(ctx, p, "commit", next, failures, err)
	}
}

// deliver handles e until the handler succeeds and its offset is
// committed, parking the partition while it fails. It returns early, with
// nil, when ctx ends.
func (s *Subscriber) deliver(ctx context.Context, p int, e stream.EntryValue) error {
	for attempt := 1; ; attempt++ {
		err := s.handle(ctx, p, e)
		if err == nil {
			s.m.handled.WithLabelValues(s.o.Group, label(p)).Inc()
			s.m.next.WithLabelValues(s.o.Group, label(p)).Set(float64(e.Offset + 1))
			s.update(p, func(st *PartitionStatus) {
				if st.State == Parked {
					s.log.Info("stream subscriber: partition resumed", "partition", p, "offset", e.Offset, "attempts", attempt)
					s.m.parked.WithLabelValues(s.o.Group, label(p)).Set(0)
				}
				st.State, st.Next, st.Handled = Running, e.Offset+1, st.Handled+1
				st.Attempts, st.ParkedSince, st.RetryAt, st.LastError = 0, time.Time{}, time.Time{}, ""
			})
			return nil
		}
		if errors.Is(err, errCrash) {
			return err // a test's simulated crash: stop here, nothing committed
		}
		if ctx.Err() != nil {
			return nil // stopping: the record is not at fault
		}
		wait := s.backoff(attempt)
		s.m.failures.WithLabelValues(s.o.Group, label(p)).Inc()
		s.update(p, func(st *PartitionStatus) {
			if st.State != Parked {
				st.ParkedSince = time.Now()
				s.m.parked.WithLabelValues(s.o.Group, label(p)).Set(1)
			}
			st.State, st.Attempts, st.LastError, st.RetryAt = Parked, attempt, err.Error(), time.Now().Add(wait)
		})
		s.log.Warn("stream subscriber: partition parked: the record's handler failed; retrying it",
			"partition", p, "offset", e.Offset, "attempt", attempt, "retry_in", wait, "error", err)
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// handle runs the handler on e and commits e's next offset: in one
// transaction of the engine's when it is Transactional, the commit
// outliving ctx's end otherwise.
func (s *Subscriber) handle(ctx context.Context, p int, e stream.EntryValue) error {
	if s.tx != nil {
		// The transaction is not bound to ctx: a handler that finished as
		// ctx ended is committed with its offset. The handler's own ctx
		// still ends with ctx.
		return s.tx.InTx(context.WithoutCancel(ctx), func(txCtx context.Context) error {
			hctx, cancel := context.WithCancelCause(txCtx)
			defer cancel(nil)
			stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
			defer stop()
			if err := s.call(hctx, e); err != nil {
				return err
			}
			if err := s.crash(p, e); err != nil {
				return err
			}
			commitCtx, cancelCommit := context.WithTimeout(txCtx, s.o.CommitTimeout)
			defer cancelCommit()
			if err := s.committer.Commit(commitCtx, s.o.Group, p, e.Offset+1); err != nil {
				return fmt.Errorf("commit offset %d: %w", e.Offset+1, err)
			}
			return nil
		})
	}
	if err := s.call(ctx, e); err != nil {
		return err
	}
	if err := s.crash(p, e); err != nil {
		return err
	}
	// Only the commit is retried from here: the handler succeeded, and
	// running it again would deliver the record twice for nothing.
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.CommitTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := s.committer.Commit(commitCtx, s.o.Group, p, e.Offset+1)
		if err == nil {
			return nil
		}
		if commitCtx.Err() != nil || ctx.Err() != nil {
			// Given up: the record is delivered again at the next start.
			return fmt.Errorf("commit offset %d: %w", e.Offset+1, err)
		}
		s.stall(commitCtx, p, "commit", e.Offset, attempt, err)
	}
}

// call runs the handler, turning a panic into an error: a record whose
// handler panics parks its partition, as one whose handler fails.
func (s *Subscriber) call(ctx context.Context, e stream.EntryValue) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("stream subscriber: handler panicked", "partition", e.Partition, "offset", e.Offset, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return s.o.Handler(ctx, e)
}

// stall reports a failure of the engine (not of a record) and waits
// before the partition tries again.
func (s *Subscriber) stall(ctx context.Context, p int, what string, at stream.Offset, failures int, err error) {
	wait := s.backoff(failures)
	s.m.stalls.WithLabelValues(s.o.Group, label(p)).Inc()
	s.update(p, func(st *PartitionStatus) {
		st.LastError = what + ": " + err.Error()
		st.RetryAt = time.Now().Add(wait)
	})
	attrs := []any{"partition", p, "offset", at, "attempt", failures, "retry_in", wait, "error", err}
	if e, ok := errs.As(err); ok {
		attrs = append(attrs, "code", e.Code().String())
	}
	s.log.Warn("stream subscriber: "+what+" failed", attrs...)
	sleep(ctx, wait)
}

// backoff is the wait before attempt+1: MinBackoff doubled per failure,
// capped at MaxBackoff, with ±20% jitter.
func (s *Subscriber) backoff(failures int) time.Duration {
	d := s.o.MinBackoff
	for i := 1; i < failures && d < s.o.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.o.MaxBackoff)
	jitter := time.Duration(float64(d) * 0.2 * (2*rand.Float64() - 1))
	return max(d+jitter, time.Millisecond)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// State is what a partition is doing.
type State string

const (
	// Stopped: not running (before Run, after it).
	Stopped State = "stopped"
	// Starting: finding the group's offset.
	Starting State = "starting"
	// Running: handling records, or waiting for some.
	Running State = "running"
	// Parked: the record at Next failed and is being retried.
	Parked State = "parked"
	// Failed: the partition cannot go on (OFFSET_TRIMMED under
	// TrimmedFail, OFFSET_AHEAD); Run returned the error.
	Failed State = "failed"
)

// PartitionStatus is one partition's progress.
type PartitionStatus struct {
	Partition int
	State     State
	// Next is the offset the partition handles next: the group's committed
	// offset once it is running.
	Next stream.Offset
	// Handled counts the records handled and committed by this Subscriber.
	Handled uint64
	// Attempts is how many times the record at Next failed in a row.
	Attempts int
	// ParkedSince is when the record at Next first failed (zero unless
	// parked).
	ParkedSince time.Time
	// RetryAt is when a failed record, or a failed read, is tried again.
	RetryAt time.Time
	// LastError is the last failure, handler's or engine's, not yet
	// followed by a success.
	LastError string
	// Trimmed counts the OFFSET_TRIMMED refusals met; SkippedFrom and
	// SkippedTo are the offsets of the last one.
	Trimmed                uint64
	SkippedFrom, SkippedTo stream.Offset
}

// Status is the subscriber's progress, for a health endpoint or an operator.
type Status struct {
	Group      string
	Running    bool
	Partitions []PartitionStatus // by partition
}

// Parked lists the parked partitions.
func (st Status) Parked() []int {
	var out []int
	for _, p := range st.Partitions {
		if p.State == Parked {
			out = append(out, p.Partition)
		}
	}
	return out
}

// Status returns the subscriber's progress.
func (s *Subscriber) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Group: s.o.Group, Running: s.running}
	for _, p := range s.parts {
		st.Partitions = append(st.Partitions, *s.status[p])
	}
	slices.SortFunc(st.Partitions, func(a, b PartitionStatus) int { return a.Partition - b.Partition })
	return st
}

func (s *Subscriber) update(p int, f func(*PartitionStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.status[p])
}

func (s *Subscriber) setNext(p int, next stream.Offset) {
	s.m.next.WithLabelValues(s.o.Group, label(p)).Set(float64(next))
	s.update(p, func(st *PartitionStatus) { st.Next = next })
}

// errCrash is what the crash test hook returns to stop the subscriber
// there, as a crash would: Run returns it, nothing committed.
var errCrash = errors.New("subscriber: simulated crash")

// crash runs the test hook beforeCommit, if any.
func (s *Subscriber) crash(p int, e stream.EntryValue) error {
	if s.beforeCommit == nil {
		return nil
	}
	return s.beforeCommit(p, e)
}

type metrics struct {
	handled, failures, stalls, trimmed *prometheus.CounterVec
	parked, next                       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	labels := []string{"group", "partition"}
	m := &metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_subscriber_handled_total",
			Help: "Records handled and committed by stream subscribers."}, labels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_subscriber_handler_failures_total",
			Help: "Handler failures (each one parks the partition until a retry succeeds)."}, labels),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_subscriber_engine_failures_total",
			Help: "Failed reads, resumes and commits of the engine (retried with backoff; the handler is not at fault)."}, labels),
		trimmed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_subscriber_trimmed_total",
			Help: "OFFSET_TRIMMED met on resume: records trimmed before the group handled them."}, labels),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picomq_subscriber_parked",
			Help: "1 while the partition's next record fails and is retried."}, labels),
		next: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picomq_subscriber_next_offset",
			Help: "The offset the partition handles next."}, labels),
	}
	if reg != nil {
		m.handled = register(reg, m.handled)
		m.failures = register(reg, m.failures)
		m.stalls = register(reg, m.stalls)
		m.trimmed = register(reg, m.trimmed)
		m.parked = register(reg, m.parked)
		m.next = register(reg, m.next)
	}
	return m
}

// register registers c, or returns the collector registered already under
// its name: every subscriber of a process shares one of each, told apart by
// their labels.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

func label(p int) string { return fmt.Sprint(p) }
