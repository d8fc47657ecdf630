package workload

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability check (e) of each partition's history, with
// porcupine, on the model of reference/cluster.md: the state is the
// partition's length and a hash of its contents; an acknowledged append
// must have First == length; an append whose outcome is unknown may or
// may not have happened (its End is Never); a read (from, max) must
// return exactly the records [from, min(from+max, length)), and a read
// refused as OFFSET_AHEAD needs length < from.
//
// Keeping histories short. Porcupine's search is exponential in the
// number of overlapping operations, so each partition's history is cut
// into windows of about LinOptions.WindowOps operations. A cut is made
// only at a quiescent point — a moment when every operation before it has
// returned and none after it has started — so that the state at the cut
// is exactly what the window before it left, and each window starts from
// the state(s) that window's linearization ends in: splitting loses no
// anomaly. A window grows past WindowOps only while operations overlap
// (the workload's think time leaves gaps); each is checked with
// LinOptions.Timeout, and a window porcupine cannot decide in time is
// counted in LinStats.TimedOut, not passed silently.
//
// The final snapshot joins each partition's history as a read of every
// record at its end. Unknown appends would defeat the cuts (an End of Never overlaps
// everything after it), so, unless LinOptions.NoOracle, each is first
// resolved against the final log: a payload the final log lacks never
// happened (if a read saw it, that read fails the check); one it holds at
// offset o happened there, before the earliest return of an operation
// that saw offset o or beyond (an acknowledged append at ≥ o+len, a read
// returning o or later) or, with no such witness, before the history's
// end. Both steps only tighten the history, so a history that passes
// resolved passes unresolved. SSE events (whose start is the connection's
// start) are left to checkMonotonic and checkObserved.

// LinOptions tune the linearizability check.
type LinOptions struct {
	// WindowOps is the operations per window the cuts aim for (default 200).
	WindowOps int
	// Timeout bounds porcupine's search of one window (default 10s).
	Timeout time.Duration
	// NoOracle leaves unknown appends unresolved (End Never, maybe
	// happened): for synthetic histories without a final log.
	NoOracle bool
}

// LinStats are the check's figures.
type LinStats struct {
	Partitions, Windows, Ops int
	Longest                  int // operations in the longest window
	TimedOut                 int // windows porcupine could not decide in time
	Skipped                  int // operations after a failed window, not checked
	Dropped                  int // unknown appends the final log shows never happened
}

func (s LinStats) String() string {
	return fmt.Sprintf("%d partitions, %d windows, %d ops (longest window %d, %d undecided, %d skipped after a failure, %d unknown appends never happened)",
		s.Partitions, s.Windows, s.Ops, s.Longest, s.TimedOut, s.Skipped, s.Dropped)
}

func (o LinOptions) withDefaults() LinOptions {
	if o.WindowOps <= 0 {
		o.WindowOps = 200
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	return o
}

// linOp is one operation of the model: an append (possibly merged from
// an idempotent producer's attempts at one sequence) or a read.
type linOp struct {
	call, ret int64
	read      bool
	// Appends: first < 0 when the offset is not known; must when it
	// surely happened (acknowledged), else it may or may not have.
	payloads []string
	first    int64
	must     bool
	// Reads.
	from  int64
	max   int
	recs  []Record
	ahead bool

	src []*Op // the requests behind it, for messages
}

func (l *linOp) String() string {
	if len(l.src) == 1 {
		return l.src[0].String()
	}
	// Bounded: the first two attempts and the last say what happened.
	var parts []string
	for i, o := range l.src {
		if i < 2 || i == len(l.src)-1 {
			parts = append(parts, o.String())
		} else if i == 2 {
			parts = append(parts, "…")
		}
	}
	return fmt.Sprintf("%d attempts: %s", len(l.src), strings.Join(parts, "; "))
}

// cell is one record of a state's tail, newest first.
type cell struct {
	payload string
	prev    *cell
}

// linState is the model's state: the length, a hash of the contents, and
// the contents themselves — a shared base (the window's start) and a
// persistent tail — so that reads can be compared record by record.
type linState struct {
	n    int64
	h    uint64
	base []string
	tail *cell
}

func (s linState) at(j int64) string {
	if j < int64(len(s.base)) {
		return s.base[j]
	}
	c := s.tail
	for k := s.n - 1; k > j; k-- {
		c = c.prev
	}
	return c.payload
}

func (s linState) appended(payloads []string) linState {
	for _, p := range payloads {
		f := fnv.New64a()
		f.Write([]byte(p))
		s.h = (s.h*1099511628211 ^ f.Sum64()) + uint64(len(p))
		s.tail = &cell{payload: p, prev: s.tail}
		s.n++
	}
	return s
}

// flatten turns a state's contents into a base of its own.
func (s linState) flatten() linState {
	out := make([]string, s.n)
	for j := s.n - 1; j >= int64(len(s.base)); j-- {
		out[j] = s.tail.payload
		s.tail = s.tail.prev
	}
	copy(out, s.base)
	return linState{n: s.n, h: s.h, base: out}
}

// step is the model: the states after op from s (none: illegal).
func step(s linState, op *linOp) []linState {
	if op.read {
		if op.ahead {
			if op.from > s.n {
				return []linState{s}
			}
			return nil
		}
		if op.from >= s.n {
			if len(op.recs) == 0 {
				return []linState{s}
			}
			return nil
		}
		end := min(op.from+int64(op.max), s.n)
		if int64(len(op.recs)) != end-op.from {
			return nil
		}
		for i, r := range op.recs {
			j := op.from + int64(i)
			if r.Offset != j || r.Payload != s.at(j) {
				return nil
			}
		}
		return []linState{s}
	}
	if op.first >= 0 && op.first != s.n {
		if op.must {
			return nil
		}
		return []linState{s} // an unknown append placed elsewhere did not happen here
	}
	next := s.appended(op.payloads)
	if op.must {
		return []linState{next}
	}
	return []linState{s, next}
}

func model(init []linState) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} {
			out := make([]interface{}, len(init))
			for i, s := range init {
				out[i] = s
			}
			return out
		},
		Step: func(state, input, _ interface{}) []interface{} {
			next := step(state.(linState), input.(*linOp))
			out := make([]interface{}, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(linState), b.(linState)
			return x.n == y.n && x.h == y.h
		},
		DescribeOperation: func(input, _ interface{}) string { return input.(*linOp).String() },
	}
	return nm.ToModel()
}

// linOps turns one partition's requests into the model's operations.
func linOps(ops []*Op) []*linOp {
	var out []*linOp
	type seqKey struct {
		producer string
		epoch    int64
		seq      int64
	}
	groups := map[seqKey]*linOp{}
	for _, o := range ops {
		start, end := int64(o.Start), int64(o.End)
		switch {
		case o.Kind == Read:
			if o.Mode == SSE || (o.Outcome != OK && !o.Ahead) {
				continue // a failed read shows nothing; SSE: see above
			}
			out = append(out, &linOp{call: start, ret: end, read: true, from: o.From, max: o.Max, recs: o.Records, ahead: o.Ahead, src: []*Op{o}})
		case o.Mode == Idempotent:
			k := seqKey{o.Producer, o.Epoch, o.Seq}
			g := groups[k]
			if g == nil {
				g = &linOp{call: start, ret: int64(Never), payloads: o.Payloads, first: -1}
				groups[k] = g
				out = append(out, g)
			}
			g.src = append(g.src, o)
			g.call = min(g.call, start)
			if o.Outcome == OK {
				g.must = true
				g.ret = min(g.ret, end)
				if !o.Duplicate {
					g.first = o.First
				}
			}
		default:
			switch o.Outcome {
			case OK:
				out = append(out, &linOp{call: start, ret: end, payloads: o.Payloads, first: o.First, must: true, src: []*Op{o}})
			case Unknown:
				out = append(out, &linOp{call: start, ret: int64(Never), payloads: o.Payloads, first: -1, src: []*Op{o}})
			}
		}
	}
	// An idempotent sequence whose every attempt was refused never
	// happened (checkDuplicates makes sure).
	kept := out[:0]
	for _, l := range out {
		if !l.read && !l.must && l.ret == int64(Never) {
			refused := len(l.src) > 0
			for _, o := range l.src {
				refused = refused && o.Outcome == Refused
			}
			if refused {
				continue
			}
		}
		kept = append(kept, l)
	}
	return kept
}

// resolve places unknown appends by the final log and bounds their ends
// (see the package comment above); it returns the operations kept and
// how many it dropped as never happened.
func resolve(r *Report, k Key, ops []*linOp, final []Record, end int64) ([]*linOp, int) {
	at := map[string]int64{}
	for _, rec := range final {
		if _, dup := at[rec.Payload]; !dup { // a duplicate is checkDuplicates'; the first copy is the write
			at[rec.Payload] = rec.Offset
		}
	}
	dropped := 0
	kept := ops[:0]
	var unresolved []*linOp
	for _, l := range ops {
		if l.read || (l.first >= 0 && l.ret != int64(Never)) {
			kept = append(kept, l)
			continue
		}
		o, ok := at[l.payloads[0]]
		if !ok {
			if l.must {
				kept = append(kept, l) // acknowledged but lost: checkAcknowledged reports it; the model decides
				continue
			}
			dropped++
			continue
		}
		for i, p := range l.payloads {
			if got, ok := at[p]; !ok || got != o+int64(i) {
				r.add(CheckLinearizable, "%s: the batch of %s is not contiguous in the final log (%q at %d, %q at %d)", k, l, trunc(l.payloads[0]), o, trunc(p), got)
				break
			}
		}
		l.first, l.must = o, true
		kept = append(kept, l)
		if l.ret == int64(Never) {
			unresolved = append(unresolved, l)
		}
	}
	for _, u := range unresolved {
		past := u.first + int64(len(u.payloads))
		ret := end
		for _, w := range kept {
			if w == u || w.ret == int64(Never) {
				continue
			}
			saw := false
			if w.read {
				saw = len(w.recs) > 0 && w.recs[len(w.recs)-1].Offset >= u.first
			} else {
				saw = w.must && w.first >= past
			}
			if saw && w.ret < ret {
				ret = w.ret
			}
		}
		u.ret = max(ret, u.call)
	}
	return kept, dropped
}

// checkLinearizable (e) checks every partition's appends and reads.
func checkLinearizable(r *Report, ops []*Op, f *Final, end time.Duration, o LinOptions) LinStats {
	o = o.withDefaults()
	var st LinStats
	parts := byKey(ops)
	keys := make([]Key, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		l := linOps(parts[k])
		if !o.NoOracle && f != nil {
			var dropped int
			l, dropped = resolve(r, k, l, f.Oracle(k), int64(end))
			st.Dropped += dropped
		}
		if f != nil {
			if recs, ok := f.oracle(k); ok {
				// The snapshot is a read too, after everything: a record
				// lost, changed or added by the end fails the model.
				l = append(l, finalRead(k, f, recs, int64(end)))
			}
		}
		if len(l) == 0 {
			continue
		}
		st.Partitions++
		checkPartition(r, k, l, o, &st)
	}
	return st
}

// finalRead is the snapshot of partition k as a read of everything.
func finalRead(k Key, f *Final, recs []Record, end int64) *linOp {
	o := &Op{ID: -1, Worker: "final-snapshot", Kind: Read, Mode: CatchUp, Stream: k.Stream, Partition: k.Partition,
		Broker: f.Brokers[0], Start: time.Duration(end), End: time.Duration(end), Outcome: OK,
		From: 0, Max: len(recs) + 1, Records: recs, First: -1}
	return &linOp{call: end, ret: end, read: true, from: 0, max: len(recs) + 1, recs: recs, src: []*Op{o}}
}

// windows cuts ops (sorted by call) at quiescent points into windows of
// about n operations.
func windows(ops []*linOp, n int) [][]*linOp {
	var out [][]*linOp
	startAt, maxRet := 0, int64(math.MinInt64)
	for i, l := range ops {
		if i-startAt >= n && maxRet < l.call {
			out = append(out, ops[startAt:i])
			startAt = i
		}
		maxRet = max(maxRet, l.ret)
	}
	return append(out, ops[startAt:])
}

func checkPartition(r *Report, k Key, ops []*linOp, o LinOptions, st *LinStats) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].call < ops[j].call })
	states := []linState{{}}
	ws := windows(ops, o.WindowOps)
	for wi, w := range ws {
		st.Windows++
		st.Ops += len(w)
		st.Longest = max(st.Longest, len(w))
		hist := make([]porcupine.Operation, len(w))
		for i, l := range w {
			hist[i] = porcupine.Operation{ClientId: 0, Input: l, Call: l.call, Return: l.ret}
		}
		res, info := porcupine.CheckOperationsVerbose(model(states), hist, o.Timeout)
		switch res {
		case porcupine.Unknown:
			st.TimedOut++
			// The state after it is unknown: the rest cannot be cut from it.
			for _, rest := range ws[wi+1:] {
				st.Skipped += len(rest)
			}
			return
		case porcupine.Illegal:
			r.add(CheckLinearizable, "%s", explain(k, wi, w, states, info))
			for _, rest := range ws[wi+1:] {
				st.Skipped += len(rest)
			}
			return
		}
		if wi == len(ws)-1 {
			return
		}
		states = after(states, w, info)
	}
}

// after replays the window's linearizations from states and returns the
// states they end in (flattened: the next window's bases).
func after(states []linState, w []*linOp, info porcupine.LinearizationInfo) []linState {
	var out []linState
	seen := map[[2]uint64]bool{}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) != len(w) {
				continue // partial: not a complete linearization
			}
			cur := states
			for _, id := range lin {
				var next []linState
				for _, s := range cur {
					next = append(next, step(s, w[id])...)
				}
				cur = next
			}
			for _, s := range cur {
				if key := [2]uint64{uint64(s.n), s.h}; !seen[key] {
					seen[key] = true
					out = append(out, s.flatten())
				}
			}
		}
	}
	return out
}

// explain words an illegal window: where the longest linearization found
// stops, and the earliest operations it could not place.
func explain(k Key, wi int, w []*linOp, states []linState, info porcupine.LinearizationInfo) string {
	best := []int{}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	placed := map[int]bool{}
	cur := states
	for _, id := range best {
		placed[id] = true
		var next []linState
		for _, s := range cur {
			next = append(next, step(s, w[id])...)
		}
		cur = next
	}
	lengths := make([]string, 0, len(cur))
	for _, s := range cur {
		lengths = append(lengths, fmt.Sprint(s.n))
	}
	var left []*linOp
	for i, l := range w {
		if !placed[i] {
			left = append(left, l)
		}
	}
	sort.SliceStable(left, func(i, j int) bool { return left[i].call < left[j].call })
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s window %d (%d ops from %v): not linearizable; the longest linearization places %d ops, leaving the partition %s records long, and none of these fits next:",
		k, wi, len(w), time.Duration(w[0].call).Round(time.Microsecond), len(best), strings.Join(lengths, " or "))
	for i, l := range left {
		if i == 3 {
			fmt.Fprintf(&sb, " …and %d more", len(left)-3)
			break
		}
		fmt.Fprintf(&sb, "\n      %s", l)
	}
	return sb.String()
}
