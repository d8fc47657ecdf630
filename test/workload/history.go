// Package workload drives a broker or a cluster of brokers with concurrent
// appenders (plain and idempotent) and readers (catch-up, long-poll, SSE),
// records every request as an Op of a History, and checks the history
// against what the brokers hold afterwards (a Final snapshot): nothing
// acknowledged lost, offsets gap-free, nothing written twice, reads
// monotonic, and each partition's history linearizable (porcupine).
//
// It is the checker of issue 19's fault trials (test/cluster) and works
// the same against one single-node broker, which is how its process tests
// run today.
package workload

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is what a request did.
type Kind int

const (
	Append Kind = iota
	Read
)

func (k Kind) String() string {
	if k == Append {
		return "append"
	}
	return "read"
}

// Mode is how: which kind of appender or reader sent it.
type Mode string

const (
	Plain      Mode = "plain"      // an append without producer
	Idempotent Mode = "idempotent" // an append with Producer-Id/Epoch/Seq
	CatchUp    Mode = "catchup"    // a read that never waits
	LongPoll   Mode = "longpoll"   // a read with wait=
	SSE        Mode = "sse"        // one data event of a Durable Streams SSE response
)

// Outcome is what the client learnt.
type Outcome int

const (
	// OK: the broker answered with success (offsets, records).
	OK Outcome = iota
	// Refused: the broker answered a coded refusal that writes nothing
	// (see Classify).
	Refused
	// Unknown: a timeout, a reset connection, a 5xx: the request may or
	// may not have taken effect.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Record is one record a read returned, or an append sent.
type Record struct {
	Offset  int64
	Payload string
}

// Op is one request and what came of it. Times are since the history's
// start, monotonic.
type Op struct {
	ID        int
	Worker    string // who sent it: one appender, producer or reader
	Kind      Kind
	Mode      Mode
	Stream    string
	Partition int
	Broker    int // index of the broker the request went to
	Start     time.Duration
	End       time.Duration // for SSE: when the event arrived
	Outcome   Outcome
	Code      string // the refusal's or failure's coded name, if any
	Err       string // the error text, bounded

	// Appends.
	Payloads  []string
	First     int64 // acknowledged first offset; -1 unless OK and written
	Duplicate bool  // acknowledged as an idempotent repeat, nothing written
	Producer  string
	Epoch     int64
	Seq       int64

	// Reads. Max < 0: unbounded (SSE); Ahead: refused as OFFSET_AHEAD.
	From    int64
	Max     int
	Records []Record
	Ahead   bool
	// Next is an SSE event's claimed next offset (its control event); -1
	// when none came.
	Next int64
}

// Key names a partition of a stream.
type Key struct {
	Stream    string
	Partition int
}

func (k Key) String() string { return fmt.Sprintf("%s/%d", k.Stream, k.Partition) }

// Key is the partition the op addressed.
func (o *Op) Key() Key { return Key{o.Stream, o.Partition} }

// String describes the op in one line, for violations.
func (o *Op) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "#%d %s %s %s %s via broker-%d [%v, %v] %s", o.ID, o.Worker, o.Mode, o.Kind, o.Key(), o.Broker,
		o.Start.Round(time.Microsecond), endString(o.End), o.Outcome)
	if o.Code != "" || o.Err != "" {
		fmt.Fprintf(&sb, " (%s %.120s)", o.Code, o.Err)
	}
	switch o.Kind {
	case Append:
		fmt.Fprintf(&sb, " payloads %s", short(o.Payloads))
		if o.Producer != "" {
			fmt.Fprintf(&sb, " producer %s e%d s%d", o.Producer, o.Epoch, o.Seq)
		}
		if o.Outcome == OK {
			if o.Duplicate {
				sb.WriteString(" duplicate")
			} else {
				fmt.Fprintf(&sb, " at %d", o.First)
			}
		}
	case Read:
		fmt.Fprintf(&sb, " from %d max %d", o.From, o.Max)
		if o.Ahead {
			sb.WriteString(" -> OFFSET_AHEAD")
		} else if o.Outcome == OK {
			fmt.Fprintf(&sb, " -> %d records", len(o.Records))
			if n := len(o.Records); n > 0 {
				fmt.Fprintf(&sb, " [%d..%d] %q..%q", o.Records[0].Offset, o.Records[n-1].Offset,
					trunc(o.Records[0].Payload), trunc(o.Records[n-1].Payload))
			}
		}
	}
	return sb.String()
}

// Never is the End of an op whose answer never came (porcupine's
// convention for an unknown outcome: it may take effect at any time after
// its start).
const Never = time.Duration(math.MaxInt64)

func endString(d time.Duration) string {
	if d == Never {
		return "∞"
	}
	return d.Round(time.Microsecond).String()
}

func trunc(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}

func short(ps []string) string {
	out := make([]string, 0, 3)
	for i, p := range ps {
		if i == 2 && len(ps) > 3 {
			out = append(out, fmt.Sprintf("…(%d)", len(ps)))
			break
		}
		out = append(out, fmt.Sprintf("%q", trunc(p)))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// History is every op of a run, safe for concurrent recording.
type History struct {
	T0 time.Time // the origin of the ops' times

	mu  sync.Mutex
	ops []*Op
	end time.Duration // set by Close: when recording stopped
}

// NewHistory starts an empty history now.
func NewHistory() *History { return &History{T0: time.Now()} }

// Now is the time since the history's start.
func (h *History) Now() time.Duration { return time.Since(h.T0) }

// Add records an op (its ID is assigned) and returns it.
func (h *History) Add(o *Op) *Op {
	h.mu.Lock()
	o.ID = len(h.ops)
	h.ops = append(h.ops, o)
	h.mu.Unlock()
	return o
}

// Close marks the end of recording.
func (h *History) Close() {
	h.mu.Lock()
	h.end = h.Now()
	h.mu.Unlock()
}

// EndTime is when recording stopped (Close), or now.
func (h *History) EndTime() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end == 0 {
		return time.Since(h.T0)
	}
	return h.end
}

// Ops returns the ops, in order of their IDs.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Op(nil), h.ops...)
}

// Stats are a history's figures, for a trial's log.
type Stats struct {
	Ops, Appends, Acked, AckedRecords, Duplicates, Refused, Unknown, Reads, ReadRecords int
	// UnknownBy counts the unknown appends by coded name ("" for a
	// transport failure without one): what a trial's unknowns came from.
	UnknownBy map[string]int
	// RefusedBy counts the refused appends by coded name the same way.
	RefusedBy map[string]int
}

func (s Stats) String() string {
	return fmt.Sprintf("%d ops: %d appends (%d acknowledged holding %d records, %d idempotent repeats, %d refused%s, %d unknown%s), %d reads returning %d records",
		s.Ops, s.Appends, s.Acked, s.AckedRecords, s.Duplicates, s.Refused, byCode(s.RefusedBy), s.Unknown, byCode(s.UnknownBy), s.Reads, s.ReadRecords)
}

// byCode lists counts by coded name (": A 2, B 1"), "" for none.
func byCode(by map[string]int) string {
	if len(by) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Keys(by))
	parts := make([]string, len(names))
	for i, n := range names {
		label := n
		if label == "" {
			label = "uncoded"
		}
		parts[i] = fmt.Sprintf("%s %d", label, by[n])
	}
	return ": " + strings.Join(parts, ", ")
}

// Stats counts the history.
func (h *History) Stats() Stats {
	var s Stats
	for _, o := range h.Ops() {
		s.Ops++
		if o.Kind == Read {
			s.Reads++
			s.ReadRecords += len(o.Records)
			continue
		}
		s.Appends++
		switch o.Outcome {
		case OK:
			s.Acked++
			if o.Duplicate {
				s.Duplicates++
			} else {
				s.AckedRecords += len(o.Payloads)
			}
		case Refused:
			s.Refused++
			if s.RefusedBy == nil {
				s.RefusedBy = map[string]int{}
			}
			s.RefusedBy[o.Code]++
		case Unknown:
			s.Unknown++
			if s.UnknownBy == nil {
				s.UnknownBy = map[string]int{}
			}
			s.UnknownBy[o.Code]++
		}
	}
	return s
}

// byKey splits ops by partition, each sorted by start.
func byKey(ops []*Op) map[Key][]*Op {
	out := map[Key][]*Op{}
	for _, o := range ops {
		out[o.Key()] = append(out[o.Key()], o)
	}
	for _, l := range out {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Start < l[j].Start })
	}
	return out
}
