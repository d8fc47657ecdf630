package workload

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/routing"
	"github.com/picomq/picomq/broker/stream"
)

// The checkers' unit tests: synthetic histories and final logs, no
// process, so they run under -short. Every checker is shown to pass a
// clean history and to catch the fault planted for it: a checker that
// cannot fail is worthless.

var k0 = Key{"s", 0}

// hb builds a synthetic history; times are in milliseconds.
type hb struct{ h *History }

func newHB() *hb { return &hb{h: &History{T0: time.Now()}} }

func ms(t int) time.Duration {
	if t < 0 {
		return Never
	}
	return time.Duration(t) * time.Millisecond
}

// add appends an append op: first < 0 unless acknowledged.
func (b *hb) add(worker string, start, end int, out Outcome, first int64, payloads ...string) *Op {
	return b.h.Add(&Op{Worker: worker, Kind: Append, Mode: Plain, Stream: k0.Stream, Partition: k0.Partition,
		Start: ms(start), End: ms(end), Outcome: out, First: first, Payloads: payloads})
}

// idem appends an idempotent attempt.
func (b *hb) idem(producer string, seq int64, start, end int, out Outcome, first int64, dup bool, payload string) *Op {
	return b.h.Add(&Op{Worker: producer, Kind: Append, Mode: Idempotent, Stream: k0.Stream, Partition: k0.Partition,
		Start: ms(start), End: ms(end), Outcome: out, First: first, Duplicate: dup, Payloads: []string{payload},
		Producer: producer, Epoch: 1, Seq: seq})
}

// read appends a read op returning payloads from offset from.
func (b *hb) read(worker string, start, end int, from int64, max int, payloads ...string) *Op {
	o := &Op{Worker: worker, Kind: Read, Mode: CatchUp, Stream: k0.Stream, Partition: k0.Partition,
		Start: ms(start), End: ms(end), Outcome: OK, From: from, Max: max, First: -1}
	for i, p := range payloads {
		o.Records = append(o.Records, Record{Offset: from + int64(i), Payload: p})
	}
	return b.h.Add(o)
}

// final makes a snapshot where every broker holds payloads at 0, 1, ...
func final(brokers int, payloads ...string) *Final {
	f := &Final{Parts: map[int]map[Key][]Record{}, Bounds: map[int]map[Key][2]int64{}}
	for b := 0; b < brokers; b++ {
		f.Brokers = append(f.Brokers, b)
		var recs []Record
		for i, p := range payloads {
			recs = append(recs, Record{Offset: int64(i), Payload: p})
		}
		f.Parts[b] = map[Key][]Record{k0: recs}
		f.Bounds[b] = map[Key][2]int64{k0: {0, int64(len(recs))}}
	}
	return f
}

func check(t *testing.T, b *hb, f *Final, o Options) *Report {
	t.Helper()
	b.h.end = ms(100000)
	r := Check(b.h, f, o)
	if err := r.Err(); err != nil {
		t.Logf("report:\n%v", err)
	}
	return r
}

// wantOnly asserts that exactly the named checkers found something.
func wantOnly(t *testing.T, r *Report, checks ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, c := range checks {
		want[c] = true
		if r.Count(c) == 0 {
			t.Errorf("%s found nothing", c)
		}
	}
	for _, c := range []string{CheckFinal, CheckAcked, CheckGaps, CheckDups, CheckMono, CheckObserved, CheckLinearizable} {
		if !want[c] && r.Count(c) > 0 {
			t.Errorf("%s reported %d violation(s): %q", c, r.Count(c), r.Violations(c))
		}
	}
}

// clean is a history every checker must pass: concurrent appends, an
// unknown append that happened, one that did not, an idempotent sequence
// retried after an unknown answer and acknowledged as a repeat, and reads
// that overlap the appends.
func clean() (*hb, *Final) {
	b := newHB()
	b.add("a0", 0, 10, OK, 0, "A", "B")
	b.add("a1", 5, 15, OK, 2, "C")
	b.add("a1", 20, -1, Unknown, -1, "D") // happened: the log holds it at 3
	b.idem("p0", 0, 22, -1, Unknown, -1, false, "P0")
	b.idem("p0", 0, 40, 45, OK, -1, true, "P0") // the repeat of what landed at 4
	b.add("a0", 30, 35, Unknown, -1, "X")       // never happened
	b.add("a0", 50, 60, OK, 5, "E")
	b.read("r0", 1, 3, 0, 10)                  // before anything
	b.read("r0", 16, 18, 0, 10, "A", "B", "C") // after the first three
	b.read("r0", 19, 61, 1, 2, "B", "C")       // bounded by max
	b.read("r0", 70, 72, 0, 100, "A", "B", "C", "D", "P0", "E")
	b.read("r1", 52, 58, 3, 10, "D", "P0") // concurrent with E, before it
	return b, final(3, "A", "B", "C", "D", "P0", "E")
}

func TestCleanHistoryPassesEveryChecker(t *testing.T) {
	t.Parallel()
	b, f := clean()
	r := check(t, b, f, Options{})
	wantOnly(t, r)
	if r.Lin.Ops == 0 || r.Lin.Dropped != 1 {
		t.Errorf("linearizability stats: %v", r.Lin)
	}
	if s := r.Stats; s.Acked != 4 || s.Unknown != 3 || s.Duplicates != 1 {
		t.Errorf("stats: %v", s)
	}
}

func TestUnknownAppendMayOrMayNotHappenWithoutOracle(t *testing.T) {
	t.Parallel()
	for _, happened := range []bool{false, true} {
		b := newHB()
		b.add("a0", 0, 10, OK, 0, "A")
		b.add("a0", 20, -1, Unknown, -1, "U")
		b.add("a1", 30, 40, OK, 1, "V") // V at 1: U did not happen before V
		recs := []string{"A", "V"}
		if happened {
			b.h.ops[2].First = 2 // V at 2: U happened, at 1
			recs = []string{"A", "U", "V"}
		}
		b.read("r0", 50, 60, 0, 10, recs...)
		r := check(t, b, final(1, recs...), Options{Lin: LinOptions{NoOracle: true}})
		wantOnly(t, r)
	}
}

func TestPlantedLostWriteIsCaught(t *testing.T) {
	t.Parallel()
	b, f := clean()
	// broker-1 lost the last acknowledged record; the others keep it.
	f.Parts[1][k0] = f.Parts[1][k0][:5]
	f.Bounds[1][k0] = [2]int64{0, 5}
	r := check(t, b, f, Options{})
	wantOnly(t, r, CheckAcked, CheckGaps)
	if v := r.Violations(CheckAcked); len(v) != 1 || !strings.Contains(v[0], `"E"`) || !strings.Contains(v[0], "broker-1") {
		t.Errorf("acknowledged: %q", v)
	}

	// Lost everywhere: the read that saw it fails too, and porcupine.
	b, f = clean()
	f = final(3, "A", "B", "C", "D", "P0")
	r = check(t, b, f, Options{})
	wantOnly(t, r, CheckAcked, CheckObserved, CheckLinearizable)
}

func TestPlantedChangedBytesAreCaught(t *testing.T) {
	t.Parallel()
	b, _ := clean()
	f := final(3, "A", "B", "c", "D", "P0", "E")
	r := check(t, b, f, Options{})
	wantOnly(t, r, CheckAcked, CheckObserved, CheckLinearizable)
}

func TestPlantedDuplicateIsCaught(t *testing.T) {
	t.Parallel()
	// The idempotent retry was written a second time at 6.
	b, _ := clean()
	f := final(3, "A", "B", "C", "D", "P0", "E", "P0")
	r := check(t, b, f, Options{})
	wantOnly(t, r, CheckDups, CheckLinearizable)
	if v := r.Violations(CheckDups); !strings.Contains(v[0], "P0") || !strings.Contains(v[0], "offsets 4 and 6") {
		t.Errorf("duplicates: %q", v)
	}

	// A refused append that was written all the same.
	b, _ = clean()
	b.add("a2", 80, 81, Refused, -1, "R").Code = "STREAM_FULL"
	f = final(3, "A", "B", "C", "D", "P0", "E", "R")
	r = check(t, b, f, Options{})
	wantOnly(t, r, CheckDups, CheckLinearizable)
	if v := r.Violations(CheckDups); !strings.Contains(v[0], "refused append wrote") {
		t.Errorf("duplicates: %q", v)
	}
}

func TestPlantedGapIsCaught(t *testing.T) {
	t.Parallel()
	b := newHB()
	b.add("a0", 0, 1, OK, 0, "A")
	b.add("a0", 2, 3, OK, 1, "B")
	f := final(2, "A", "B")
	// broker-0 returns offsets 0 and 2: offset 1 is missing.
	f.Parts[0][k0] = []Record{{0, "A"}, {2, "B"}}
	f.Bounds[0][k0] = [2]int64{0, 3}
	r := check(t, b, f, Options{})
	wantOnly(t, r, CheckGaps, CheckAcked, CheckLinearizable)
	if v := r.Violations(CheckGaps); !strings.Contains(v[0], "offset 2 where 1 belongs") {
		t.Errorf("gap-free: %q", v)
	}
}

func TestPlantedNonMonotonicReadIsCaught(t *testing.T) {
	t.Parallel()
	// A reader sees 3 records, then — from a stale broker — only 2. Each
	// read alone is plausible; together the log shrank.
	b := newHB()
	b.add("a0", 0, 1, OK, 0, "A")
	b.add("a0", 2, 3, OK, 1, "B")
	b.add("a0", 4, 5, OK, 2, "C")
	b.read("r0", 10, 11, 0, 10, "A", "B", "C")
	b.read("r0", 20, 21, 1, 10, "B").Broker = 2
	r := check(t, b, final(1, "A", "B", "C"), Options{})
	wantOnly(t, r, CheckMono, CheckLinearizable)
	if v := r.Violations(CheckMono); !strings.Contains(v[0], "went back to 2 records after 3") {
		t.Errorf("monotonic: %q", v)
	}

	// OFFSET_AHEAD at an offset the reader has read.
	b = newHB()
	b.add("a0", 0, 1, OK, 0, "A")
	b.read("r0", 10, 11, 0, 10, "A")
	o := b.read("r0", 20, 21, 2, 10) // past the end: right
	o.Outcome, o.Ahead, o.Code = Refused, true, "OFFSET_AHEAD"
	o2 := b.read("r0", 30, 31, 1, 10) // at the end, which was read: wrong
	o2.Outcome, o2.Ahead, o2.Code = Refused, true, "OFFSET_AHEAD"
	r = check(t, b, final(1, "A"), Options{})
	wantOnly(t, r, CheckMono, CheckLinearizable)
	if v := r.Violations(CheckMono); len(v) != 1 || !strings.Contains(v[0], "OFFSET_AHEAD at 1") {
		t.Errorf("monotonic: %q (only the read at 1 is refused below what was seen)", v)
	}
}

func TestPlantedNonLinearizableReadIsCaught(t *testing.T) {
	t.Parallel()
	// A stale read: A was acknowledged at 10ms; a read that started at
	// 20ms, from a fresh reader, finds nothing. Only porcupine sees it.
	b := newHB()
	b.add("a0", 0, 10, OK, 0, "A")
	b.read("r0", 20, 25, 0, 10)
	r := check(t, b, final(2, "A"), Options{})
	wantOnly(t, r, CheckLinearizable)
	v := r.Violations(CheckLinearizable)
	if len(v) != 1 || !strings.Contains(v[0], "not linearizable") || !strings.Contains(v[0], "r0") {
		t.Errorf("linearizable: %q", v)
	}

	// A read from the future: it returned before the append started, yet
	// saw its record.
	b = newHB()
	b.read("r0", 0, 5, 0, 10, "A")
	b.add("a0", 10, 20, OK, 0, "A")
	r = check(t, b, final(1, "A"), Options{})
	wantOnly(t, r, CheckLinearizable)

	// Two acknowledged appends, one after the other, both told offset 0.
	b = newHB()
	b.add("a0", 0, 10, OK, 0, "A")
	b.add("a1", 20, 30, OK, 0, "B")
	r = check(t, b, final(1, "A", "B"), Options{})
	wantOnly(t, r, CheckAcked, CheckLinearizable)
}

// TestWindowsCarryTheState: a long history is cut into many windows and
// still checked whole: a stale read planted at the end is caught, and a
// clean one passes quickly.
func TestWindowsCarryTheState(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		b := newHB()
		var log []string
		at := 0
		for i := 0; i < 1500; i++ {
			p := fmt.Sprintf("v%d", i)
			// Two appends and a read overlapping, then a gap.
			b.add("a0", at, at+4, OK, int64(len(log)), p)
			log = append(log, p)
			from := max(0, len(log)-3)
			b.read("r0", at+1, at+2, int64(from), 2, log[from:min(from+2, len(log))]...)
			at += 10
		}
		if stale {
			b.read("r1", at, at+1, 1400, 1000, log[1400:1450]...)
		}
		began := time.Now()
		r := check(t, b, final(1, log...), Options{Lin: LinOptions{WindowOps: 100}})
		if r.Lin.Windows < 10 {
			t.Errorf("%d windows for %d ops", r.Lin.Windows, r.Lin.Ops)
		}
		if stale {
			wantOnly(t, r, CheckLinearizable)
		} else {
			wantOnly(t, r)
		}
		t.Logf("stale=%v: %v in %v", stale, r.Lin, time.Since(began).Round(time.Millisecond))
	}
}

func TestWindowsCutOnlyWhereNothingIsInFlight(t *testing.T) {
	t.Parallel()
	op := func(call, ret int64) *linOp { return &linOp{call: call, ret: ret} }
	ops := []*linOp{op(0, 10), op(5, 30), op(20, 25), op(31, 40), op(41, 50), op(45, int64(Never)), op(60, 70)}
	ws := windows(ops, 1)
	var sizes []int
	for _, w := range ws {
		sizes = append(sizes, len(w))
	}
	// Cuts at 31 (all before returned by 30) and 41; never after the op
	// that never returned.
	if fmt.Sprint(sizes) != "[3 1 3]" {
		t.Fatalf("window sizes %v", sizes)
	}
}

func TestReportIsBounded(t *testing.T) {
	t.Parallel()
	b := newHB()
	for i := 0; i < 20; i++ {
		b.add("a0", 2*i, 2*i+1, OK, int64(i), fmt.Sprintf("v%d", i))
	}
	r := check(t, b, final(1), Options{})
	if r.Count(CheckAcked) != 20 || len(r.Violations(CheckAcked)) != MaxPerCheck {
		t.Fatalf("%d violations kept of %d", len(r.Violations(CheckAcked)), r.Count(CheckAcked))
	}
	msg := r.Err().Error()
	if !strings.Contains(msg, "acknowledged: 20 violation(s) (first 5)") || strings.Count(msg, "lost on broker-0") != MaxPerCheck {
		t.Fatalf("message:\n%s", msg)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	if o, _ := Classify(nil); o != OK {
		t.Error("nil is not OK")
	}
	if o, c := Classify(fmt.Errorf("wrapped: %w", errDeadline{})); o != Unknown || c != "" {
		t.Errorf("an uncoded error: %v %q", o, c)
	}
	// A drained broker's refusal writes nothing; an owner's answer that the
	// outcome is unknown, or the metadata log's, may have written.
	for _, c := range []struct {
		err  error
		want Outcome
	}{
		{wire.NotReady.With("reason", "drained: this broker left the cluster; send requests to another"), Refused},
		{routing.OutcomeUnknown.With("reason", "this broker stopped while the owner served the request"), Unknown},
		{stream.StreamBackendFailed.With("op", "metalog.apply"), Unknown},
	} {
		if o, name := Classify(c.err); o != c.want {
			t.Errorf("%s: %v, want %v", name, o, c.want)
		}
	}
}

type errDeadline struct{}

func (errDeadline) Error() string { return "connection reset" }
