package workload

import (
	"fmt"
	"sort"
	"strings"
)

// The checkers' names, as reports list them.
const (
	CheckFinal        = "final"        // the snapshot could not be read whole
	CheckAcked        = "acknowledged" // (a) every acknowledged record readable at its offset, bytes intact, on every broker
	CheckGaps         = "gap-free"     // (b) offsets 0..end-1 all present, the same on every broker
	CheckDups         = "duplicates"   // (c) no payload twice, no refused append written
	CheckMono         = "monotonic"    // (d) no reader sees the log shrink or a record change
	CheckObserved     = "observed"     // every record a read returned is the final log's at that offset
	CheckLinearizable = "linearizable" // (e) each partition's history linearizable (porcupine)
)

// MaxPerCheck bounds the violations a report keeps per checker: the first
// few explain a failure; the count says how bad it is.
const MaxPerCheck = 5

// Report is what the checkers found.
type Report struct {
	Stats      Stats
	Lin        LinStats
	violations map[string][]string
	counts     map[string]int
}

func newReport() *Report {
	return &Report{violations: map[string][]string{}, counts: map[string]int{}}
}

// add records one violation of check.
func (r *Report) add(check, format string, args ...any) {
	r.counts[check]++
	if len(r.violations[check]) < MaxPerCheck {
		r.violations[check] = append(r.violations[check], fmt.Sprintf(format, args...))
	}
}

// Count is how many violations check found (0 when it passed).
func (r *Report) Count(check string) int { return r.counts[check] }

// Violations are the first MaxPerCheck violations of check.
func (r *Report) Violations(check string) []string { return r.violations[check] }

// OK reports whether no checker found anything.
func (r *Report) OK() bool { return len(r.counts) == 0 }

// Err is nil when the report is clean, else a bounded message: per
// checker, its count and first violations with their requests.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	var checks []string
	for c := range r.counts {
		checks = append(checks, c)
	}
	sort.Strings(checks)
	var sb strings.Builder
	for _, c := range checks {
		fmt.Fprintf(&sb, "%s: %d violation(s)", c, r.counts[c])
		if n := r.counts[c]; n > MaxPerCheck {
			fmt.Fprintf(&sb, " (first %d)", MaxPerCheck)
		}
		sb.WriteString(":\n")
		for _, v := range r.violations[c] {
			fmt.Fprintf(&sb, "  - %s\n", v)
		}
	}
	return fmt.Errorf("%s", sb.String())
}

// Options tune Check.
type Options struct {
	Lin LinOptions
}

// Check runs every checker of the history against the final snapshot.
func Check(h *History, f *Final, o Options) *Report {
	r := newReport()
	r.Stats = h.Stats()
	ops := h.Ops()
	for _, e := range f.Errors {
		r.add(CheckFinal, "%s", e)
	}
	checkAcknowledged(r, ops, f)
	checkGapFree(r, f)
	checkDuplicates(r, ops, f)
	checkMonotonic(r, ops)
	checkObserved(r, ops, f)
	r.Lin = checkLinearizable(r, ops, f, h.EndTime(), o.Lin)
	return r
}

// index maps a partition's records by offset.
func index(recs []Record) map[int64]string {
	m := make(map[int64]string, len(recs))
	for _, rec := range recs {
		m[rec.Offset] = rec.Payload
	}
	return m
}

// finalIndex indexes every partition of every broker once.
func finalIndex(f *Final) map[int]map[Key]map[int64]string {
	out := map[int]map[Key]map[int64]string{}
	for _, b := range f.Brokers {
		out[b] = map[Key]map[int64]string{}
		for k, recs := range f.Parts[b] {
			out[b][k] = index(recs)
		}
	}
	return out
}

// checkAcknowledged (a): every acknowledged record is readable at its
// acknowledged offset, with its exact bytes, from every broker; an
// idempotent append acknowledged as a repeat is present somewhere in its
// partition. This is also "no plain acknowledged append lost" of (c).
func checkAcknowledged(r *Report, ops []*Op, f *Final) {
	idx := finalIndex(f)
	present := map[int]map[Key]map[string]bool{}
	for _, b := range f.Brokers {
		present[b] = map[Key]map[string]bool{}
		for k, recs := range f.Parts[b] {
			present[b][k] = map[string]bool{}
			for _, rec := range recs {
				present[b][k][rec.Payload] = true
			}
		}
	}
	for _, o := range ops {
		if o.Kind != Append || o.Outcome != OK {
			continue
		}
		for _, b := range f.Brokers {
			if o.Duplicate {
				if !present[b][o.Key()][o.Payloads[0]] {
					r.add(CheckAcked, "acknowledged idempotent repeat %q missing on broker-%d: %s", trunc(o.Payloads[0]), b, o)
				}
				continue
			}
			for i, p := range o.Payloads {
				off := o.First + int64(i)
				got, ok := idx[b][o.Key()][off]
				switch {
				case !ok:
					r.add(CheckAcked, "acknowledged record %q at %s:%d lost on broker-%d: %s", trunc(p), o.Key(), off, b, o)
				case got != p:
					r.add(CheckAcked, "acknowledged record %q at %s:%d reads %q on broker-%d: %s", trunc(p), o.Key(), off, trunc(got), b, o)
				}
			}
		}
	}
}

// checkGapFree (b): each partition starts at 0 (the workload configures
// no retention) and holds every offset up to its end, in order, and every
// broker holds the same records.
func checkGapFree(r *Report, f *Final) {
	for _, b := range f.Brokers {
		for k, recs := range f.Parts[b] {
			bd := f.Bounds[b][k]
			if bd[0] != 0 {
				r.add(CheckGaps, "%s on broker-%d starts at %d: nothing trims it", k, b, bd[0])
			}
			for i, rec := range recs {
				if want := bd[0] + int64(i); rec.Offset != want {
					r.add(CheckGaps, "%s on broker-%d: offset %d where %d belongs (a gap or a reorder)", k, b, rec.Offset, want)
					break
				}
			}
			if got := int64(len(recs)); bd[0]+got != bd[1] {
				r.add(CheckGaps, "%s on broker-%d: %d records between first %d and next %d", k, b, got, bd[0], bd[1])
			}
		}
	}
	if len(f.Brokers) < 2 {
		return
	}
	ref := f.Brokers[0]
	for _, b := range f.Brokers[1:] {
		for k, want := range f.Parts[ref] {
			got := f.Parts[b][k]
			if len(got) != len(want) {
				r.add(CheckGaps, "%s: broker-%d holds %d records, broker-%d %d", k, ref, len(want), b, len(got))
				continue
			}
			for i := range want {
				if got[i] != want[i] {
					r.add(CheckGaps, "%s offset %d: broker-%d holds %q, broker-%d %q", k, want[i].Offset, ref, trunc(want[i].Payload), b, trunc(got[i].Payload))
					break
				}
			}
		}
	}
}

// checkDuplicates (c): no payload is stored twice in a stream — so no
// idempotent producer's sequence was written twice, and no plain append
// either (the client never sends one twice) — and no refused append was
// written at all.
func checkDuplicates(r *Report, ops []*Op, f *Final) {
	who := map[string]*Op{}
	refused := map[string]*Op{} // payloads every attempt of which was refused
	maybe := map[string]bool{}  // payloads some attempt of which may have been written
	for _, o := range ops {
		if o.Kind != Append {
			continue
		}
		for _, p := range o.Payloads {
			if who[p] == nil || o.Outcome == OK {
				who[p] = o
			}
			if o.Outcome == Refused {
				refused[p] = o
			} else {
				maybe[p] = true
			}
		}
	}
	for p := range maybe {
		delete(refused, p)
	}
	for _, b := range f.Brokers {
		seen := map[string]map[string]Record{} // stream -> payload -> where
		for k, recs := range f.Parts[b] {
			if seen[k.Stream] == nil {
				seen[k.Stream] = map[string]Record{}
			}
			for _, rec := range recs {
				if prev, dup := seen[k.Stream][rec.Payload]; dup {
					desc := "no request of the history sent it"
					if o := who[rec.Payload]; o != nil {
						desc = o.String()
					}
					r.add(CheckDups, "%q written twice in %s on broker-%d (offsets %d and %d): %s", trunc(rec.Payload), k.Stream, b, prev.Offset, rec.Offset, desc)
					continue
				}
				seen[k.Stream][rec.Payload] = rec
			}
		}
		// A refused idempotent attempt may share its payload with another
		// attempt of the same sequence that was written: only a payload
		// whose every attempt was refused must be absent.
		for p, o := range refused {
			if rec, ok := seen[o.Stream][p]; ok {
				r.add(CheckDups, "refused append wrote %q at %s:%d on broker-%d: %s", trunc(p), o.Key(), rec.Offset, b, o)
			}
		}
	}
}

// checkMonotonic (d): each reader reads its partition in order and never
// sees it shrink or change. Per reader: within a read, offsets run on
// from the one asked; a record seen at an offset is the one seen there
// before; a read that ended short of its max (or was refused as
// OFFSET_AHEAD) claims the partition's end, which must not be below an
// end the reader already saw; an SSE event's control offset is where its
// records end.
func checkMonotonic(r *Report, ops []*Op) {
	type state struct {
		known int64            // the longest the reader has seen the partition
		seen  map[int64]string // what it saw at each offset
		by    *Op              // the read that showed it that long
	}
	readers := map[string]*state{}
	sorted := append([]*Op(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	for _, o := range sorted {
		if o.Kind != Read || (o.Outcome != OK && !o.Ahead) {
			continue
		}
		id := o.Worker + " " + o.Key().String()
		s := readers[id]
		if s == nil {
			s = &state{seen: map[int64]string{}}
			readers[id] = s
		}
		for i, rec := range o.Records {
			if want := o.From + int64(i); rec.Offset != want {
				r.add(CheckMono, "reader %s: offset %d where %d belongs: %s", o.Worker, rec.Offset, want, o)
				break
			}
			if prev, ok := s.seen[rec.Offset]; ok && prev != rec.Payload {
				r.add(CheckMono, "reader %s: %s:%d changed from %q to %q: %s", o.Worker, o.Key(), rec.Offset, trunc(prev), trunc(rec.Payload), o)
			}
			s.seen[rec.Offset] = rec.Payload
		}
		end := o.From + int64(len(o.Records))
		switch {
		case o.Ahead:
			if s.known >= o.From {
				r.add(CheckMono, "reader %s: OFFSET_AHEAD at %d after seeing %d records (%s): %s", o.Worker, o.From, s.known, s.by, o)
			}
		case o.Mode == SSE:
			if o.Next >= 0 && o.Next != end {
				r.add(CheckMono, "reader %s: SSE control says next %d after records ending at %d: %s", o.Worker, o.Next, end, o)
			}
		case len(o.Records) < o.Max && end < s.known:
			r.add(CheckMono, "reader %s: the partition went back to %d records after %d (%s): %s", o.Worker, end, s.known, s.by, o)
		}
		if end > s.known {
			s.known, s.by = end, o
		}
	}
}

// checkObserved: every record any read returned (SSE included) is the
// final log's record at that offset: a read that saw a record the log
// does not keep there saw an aborted or uncommitted write.
func checkObserved(r *Report, ops []*Op, f *Final) {
	oracle := map[Key]map[int64]string{}
	for _, o := range ops {
		if o.Kind != Read || o.Outcome != OK {
			continue
		}
		idx, ok := oracle[o.Key()]
		if !ok {
			idx = index(f.Oracle(o.Key()))
			oracle[o.Key()] = idx
		}
		for _, rec := range o.Records {
			got, ok := idx[rec.Offset]
			switch {
			case !ok:
				r.add(CheckObserved, "read saw %q at %s:%d, which the final log does not hold: %s", trunc(rec.Payload), o.Key(), rec.Offset, o)
			case got != rec.Payload:
				r.add(CheckObserved, "read saw %q at %s:%d, the final log holds %q: %s", trunc(rec.Payload), o.Key(), rec.Offset, trunc(got), o)
			}
		}
	}
}
