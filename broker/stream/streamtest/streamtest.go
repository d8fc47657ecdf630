package streamtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// Clock is the time source the suite hands an engine. The engine must read
// every instant it records (EntryValue.AppendedAt) and every age it measures
// (retention, compaction) from it. Waits — BlockTimeout, ctx deadlines — run
// on real time.
type Clock interface {
	Now() time.Time
}

// Engine is what a Factory builds: a fresh, empty stream over fresh storage.
type Engine struct {
	// Stream is the engine under test. The suite reaches its siblings by
	// type assertion, and skips a sibling's tests only when the assertion
	// fails.
	Stream stream.Stream
	// Reopen, when not nil, closes the engine and opens its storage again
	// under the same policy and clock, dropping everything the process held
	// (wakers, caches, open files), and returns the new stream value. The
	// suite uses it to check that what was acknowledged survives. An engine
	// that keeps nothing across a close leaves it nil, and the tests that need
	// it are skipped.
	Reopen func(t *testing.T) stream.Stream
}

// Factory builds an engine under policy, dating its records with clock. It
// returns the engine's constructor error unchanged when the engine refuses
// the policy, so that the suite can check the refusal is the one
// PolicyValue.Validate gives. It registers whatever must be released when the
// test ends with t.Cleanup, and fails t itself on any other set-up failure.
//
// Each call must give a new, empty stream: the suite calls it once or more
// per subtest and assumes nothing was appended before.
type Factory func(t *testing.T, policy stream.PolicyValue, clock Clock) (Engine, error)

// Run checks the engine Factory builds against every guarantee of package
// stream. Its subtests are listed in the package documentation with the
// sentence each covers.
func Run(t *testing.T, factory Factory) {
	for _, g := range []struct {
		name  string
		tests []test
	}{
		{"Policy", policyTests},
		{"Append", appendTests},
		{"Read", readTests},
		{"Retention", retentionTests},
		{"Backpressure", backpressureTests},
		{"Waker", wakerTests},
		{"Seeker", seekerTests},
		{"Trimmer", trimmerTests},
		{"Compactor", compactorTests},
		{"Committer", committerTests},
		{"Reopen", reopenTests},
	} {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, factory) })
			}
		})
	}
}

type test struct {
	name string
	run  func(t *testing.T, f Factory)
}

// Epoch is where the suite's clocks start: a fixed instant, so that failures
// read the same on every run.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// FakeClock is a Clock that moves only when told. It is safe for concurrent
// use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a FakeClock reading start.
func NewClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the clock's instant.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// h is one subtest's engine with its clock, and the helpers that fail the
// test on an unexpected error.
type h struct {
	t      *testing.T
	ctx    context.Context
	clock  *FakeClock
	engine Engine
	s      stream.Stream
}

func open(t *testing.T, f Factory, p stream.PolicyValue) *h {
	t.Helper()
	clock := NewClock(Epoch)
	e, err := f(t, p, clock)
	if err != nil {
		t.Fatalf("factory refused %+v: %v", p, err)
	}
	if e.Stream == nil {
		t.Fatal("factory returned no stream")
	}
	return &h{t: t, ctx: t.Context(), clock: clock, engine: e, s: e.Stream}
}

func (h *h) append(records ...stream.RecordValue) stream.AppendValue {
	h.t.Helper()
	v, err := h.s.Append(h.ctx, records)
	if err != nil {
		h.t.Fatalf("Append(%d records): %v", len(records), err)
	}
	if got := v.Last - v.First + 1; int(got) != len(records) {
		h.t.Fatalf("Append(%d records) = %+v: spans %d offsets", len(records), v, got)
	}
	return v
}

func (h *h) bounds(partition int) stream.BoundsValue {
	h.t.Helper()
	b, err := h.s.Bounds(h.ctx, partition)
	if err != nil {
		h.t.Fatalf("Bounds(%d): %v", partition, err)
	}
	return b
}

func (h *h) read(partition int, from stream.Offset, max int) []stream.EntryValue {
	h.t.Helper()
	es, err := h.s.Read(h.ctx, partition, from, max)
	if err != nil {
		h.t.Fatalf("Read(%d, %d, %d): %v", partition, from, max, err)
	}
	if len(es) > max {
		h.t.Fatalf("Read(%d, %d, %d) = %d entries, more than max", partition, from, max, len(es))
	}
	return es
}

// readAll reads partition from from to its next offset, in reads of 7 so
// that paging is exercised too.
func (h *h) readAll(partition int, from stream.Offset) []stream.EntryValue {
	h.t.Helper()
	var all []stream.EntryValue
	for {
		es := h.read(partition, from, 7)
		if len(es) == 0 {
			return all
		}
		all = append(all, es...)
		from = es[len(es)-1].Offset + 1
	}
}

// wantBounds fails when any partition's bounds differ from before: used
// after a refusal, which must write nothing.
func (h *h) wantBounds(before []stream.BoundsValue) {
	h.t.Helper()
	for p, b := range before {
		if got := h.bounds(p); got != b {
			h.t.Fatalf("partition %d bounds = %+v, want %+v: something was written", p, got, b)
		}
	}
}

func (h *h) allBounds() []stream.BoundsValue {
	h.t.Helper()
	out := make([]stream.BoundsValue, h.s.Partitions())
	for p := range out {
		out[p] = h.bounds(p)
	}
	return out
}

// wantErr fails unless err matches static under errors.Is and carries the
// fields given as alternating keys and values, compared as text so that an
// int, an int64 and an Offset of one value are equal, as they are once a
// problem has crossed HTTP.
func wantErr(t *testing.T, err error, static *errs.Error, kv ...any) {
	t.Helper()
	if !errors.Is(err, static) {
		t.Fatalf("error = %v, want %s", err, static.Name())
	}
	for i := 0; i+1 < len(kv); i += 2 {
		key := kv[i].(string)
		got, ok := errs.FieldOf(err, key)
		if !ok || fmt.Sprint(got) != fmt.Sprint(kv[i+1]) {
			t.Errorf("%s field %q = %v (set %v), want %v; error: %v", static.Name(), key, got, ok, kv[i+1], err)
		}
	}
}

// rec builds a record; an empty string is an empty key or payload.
func rec(key, payload string) stream.RecordValue {
	r := stream.RecordValue{}
	if key != "" {
		r.Key = []byte(key)
	}
	if payload != "" {
		r.Payload = []byte(payload)
	}
	return r
}

// keyIn returns a key, distinct for each salt, that PartitionOf places on
// partition p of n.
func keyIn(p, n int, salt string) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s-%d", salt, i)
		if stream.PartitionOf([]byte(k), n) == p {
			return k
		}
	}
}

func sameRecord(a, b stream.RecordValue) bool {
	return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Payload, b.Payload)
}

// offsets lists the offsets of es, for failure messages and comparisons.
func offsets(es []stream.EntryValue) []stream.Offset {
	out := make([]stream.Offset, len(es))
	for i, e := range es {
		out[i] = e.Offset
	}
	return out
}

func payloads(es []stream.EntryValue) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e.Record.Payload)
	}
	return b.String()
}

// result is an Append run in a goroutine.
type result struct {
	v   stream.AppendValue
	err error
}

func goAppend(ctx context.Context, s stream.Stream, records ...stream.RecordValue) <-chan result {
	ch := make(chan result, 1)
	go func() {
		v, err := s.Append(ctx, records)
		ch <- result{v, err}
	}()
	return ch
}

// patience bounds every wait for something that should happen at once; only
// a broken engine ever uses it up.
const patience = 10 * time.Second

// settle is how long the suite lets a goroutine run into a blocking call
// before it acts on it. The tests stay correct when it is too short; they
// only check less.
const settle = 10 * time.Millisecond

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(patience):
		t.Fatalf("Append did not return within %v", patience)
		return result{}
	}
}
