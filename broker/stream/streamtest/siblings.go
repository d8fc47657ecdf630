package streamtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// The siblings' tests skip when the engine lacks the sibling, and only then.

func waker(t *testing.T, s stream.Stream) stream.Waker {
	w, ok := s.(stream.Waker)
	if !ok {
		t.Skip("engine has no Waker")
	}
	return w
}

func seeker(t *testing.T, s stream.Stream) stream.Seeker {
	x, ok := s.(stream.Seeker)
	if !ok {
		t.Skip("engine has no Seeker")
	}
	return x
}

func trimmer(t *testing.T, s stream.Stream) stream.Trimmer {
	x, ok := s.(stream.Trimmer)
	if !ok {
		t.Skip("engine has no Trimmer")
	}
	return x
}

func compactor(t *testing.T, s stream.Stream) stream.Compactor {
	x, ok := s.(stream.Compactor)
	if !ok {
		t.Skip("engine has no Compactor")
	}
	return x
}

func committer(t *testing.T, s stream.Stream) stream.Committer {
	x, ok := s.(stream.Committer)
	if !ok {
		t.Skip("engine has no Committer")
	}
	return x
}

func closed(ch <-chan struct{}, within time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(within):
		return false
	}
}

var wakerTests = []test{
	{"ClosedByNextAppendToAnyPartition", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		w := waker(t, h.s)
		a, b := w.Wake(), w.Wake() // every channel handed out before the Append
		h.append(rec(keyIn(1, 2, "k"), "x"))
		if !closed(a, patience) || !closed(b, patience) {
			t.Fatal("an Append to partition 1 did not close the channels Wake handed out before it")
		}
		c := w.Wake()
		h.append(rec(keyIn(0, 2, "k"), "y"))
		if !closed(c, patience) {
			t.Fatal("a second Append did not close the channel handed out after the first")
		}
	}},
	{"AppendBetweenReadAndWaitNotMissed", func(t *testing.T, f Factory) {
		const n = 200
		h := open(t, f, stream.PolicyValue{})
		w := waker(t, h.s)
		done := make(chan error, 1)
		go func() {
			var next stream.Offset
			for next < n {
				wake := w.Wake() // BEFORE the Read that may come back empty
				es, err := h.s.Read(h.ctx, 0, next, 50)
				if err != nil {
					done <- err
					return
				}
				for _, e := range es {
					if e.Offset != next || string(e.Record.Payload) != fmt.Sprint(next) {
						done <- fmt.Errorf("read offset %d %q, want %d", e.Offset, e.Record.Payload, next)
						return
					}
					next++
				}
				if len(es) == 0 && !closed(wake, patience) {
					done <- fmt.Errorf("reader at offset %d never woken: an Append was missed", next)
					return
				}
			}
			done <- nil
		}()
		for i := range n {
			h.append(rec("", fmt.Sprint(i)))
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * patience):
			t.Fatal("reader did not finish")
		}
	}},
}

var seekerTests = []test{
	{"AtBeforeAfter", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		sk := seeker(t, h.s)
		if o, err := sk.OffsetAt(h.ctx, 0, Epoch); err != nil || o != 0 {
			t.Fatalf("OffsetAt on an empty partition = %d, %v; want its next, 0", o, err)
		}
		k := keyIn(0, 2, "k")
		h.append(rec(k, "a0"), rec(k, "a1")) // 0, 1 at Epoch
		h.clock.Advance(time.Minute)
		h.append(rec(k, "b")) // 2 at +1m
		h.clock.Advance(time.Minute)
		h.append(rec(k, "c0"), rec(k, "c1")) // 3, 4 at +2m
		for _, c := range []struct {
			when time.Duration // after Epoch
			want stream.Offset
		}{
			{-time.Hour, 0},                  // before every record: the first retained
			{0, 0},                           // at the first batch
			{time.Second, 2},                 // between batches: the first after
			{time.Minute, 2},                 // at
			{time.Minute + time.Second, 3},   // between
			{2 * time.Minute, 3},             // at the last batch
			{2*time.Minute + time.Second, 5}, // after every record: the next offset
		} {
			o, err := sk.OffsetAt(h.ctx, 0, Epoch.Add(c.when))
			if err != nil || o != c.want {
				t.Errorf("OffsetAt(Epoch%+v) = %d, %v; want %d", c.when, o, err, c.want)
			}
		}
		if o, err := sk.OffsetAt(h.ctx, 1, Epoch); err != nil || o != 0 {
			t.Errorf("OffsetAt on the other, empty partition = %d, %v; want 0", o, err)
		}
		if tr, ok := h.s.(stream.Trimmer); ok {
			if err := tr.Trim(h.ctx, 0, 1); err != nil {
				t.Fatal(err)
			}
			if o, err := sk.OffsetAt(h.ctx, 0, Epoch.Add(-time.Hour)); err != nil || o != 1 {
				t.Errorf("OffsetAt(before) after Trim(1) = %d, %v; want the first retained, 1", o, err)
			}
		}
		for _, bad := range []int{-1, 2} {
			_, err := sk.OffsetAt(h.ctx, bad, Epoch)
			wantErr(t, err, stream.UnknownPartition, "partition", bad, "partitions", 2)
		}
	}},
}

var trimmerTests = []test{
	{"RaisesFirstNeverReusesOffsets", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		tr := trimmer(t, h.s)
		for i := range 10 {
			h.append(rec("", fmt.Sprint(i)))
		}
		if err := tr.Trim(h.ctx, 0, 4); err != nil {
			t.Fatal(err)
		}
		if b := h.bounds(0); b != (stream.BoundsValue{First: 4, Next: 10}) {
			t.Fatalf("Bounds after Trim(4) = %+v, want {4 10}", b)
		}
		_, err := h.s.Read(h.ctx, 0, 3, 10)
		wantErr(t, err, stream.OffsetTrimmed, "partition", 0, "offset", 3, "first", 4)
		if es := h.read(0, 4, 1); es[0].Offset != 4 || string(es[0].Record.Payload) != "4" {
			t.Fatalf("Read(4) = %+v", es)
		}
		// At or below the first offset changes nothing.
		for _, before := range []stream.Offset{0, 2, 4} {
			if err := tr.Trim(h.ctx, 0, before); err != nil {
				t.Fatalf("Trim(%d): %v", before, err)
			}
			if b := h.bounds(0); b != (stream.BoundsValue{First: 4, Next: 10}) {
				t.Fatalf("Bounds after Trim(%d) = %+v, want {4 10}", before, b)
			}
		}
		err = tr.Trim(h.ctx, 0, 11)
		wantErr(t, err, stream.OffsetAhead, "partition", 0, "offset", 11, "next", 10)
		// Up to next empties the partition; the next offset does not move.
		if err := tr.Trim(h.ctx, 0, 10); err != nil {
			t.Fatal(err)
		}
		if b := h.bounds(0); b != (stream.BoundsValue{First: 10, Next: 10}) {
			t.Fatalf("Bounds after Trim(next) = %+v, want {10 10}", b)
		}
		if es := h.read(0, 10, 5); len(es) != 0 {
			t.Fatalf("Read(10) on an emptied partition = %d entries", len(es))
		}
		if v := h.append(rec("", "10")); v.First != 10 {
			t.Fatalf("Append after trimming everything took offset %d, want 10: offsets are never reused", v.First)
		}
		for _, bad := range []int{-1, 1} {
			wantErr(t, tr.Trim(h.ctx, bad, 0), stream.UnknownPartition, "partition", bad, "partitions", 1)
		}
	}},
}

var compactorTests = []test{
	{"ZeroCompactAfterNeverCompacts", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		c := compactor(t, h.s)
		h.append(rec("k", "1"), rec("k", "2"), rec("k", ""))
		h.clock.Advance(1000 * time.Hour)
		if v, err := c.Compact(h.ctx, 0); err != nil || v != (stream.CompactValue{}) {
			t.Fatalf("Compact = %+v, %v; want a zero CompactValue", v, err)
		}
		if got := len(h.readAll(0, 0)); got != 3 {
			t.Fatalf("%d records left, want all 3", got)
		}
		_, err := c.Compact(h.ctx, 1)
		wantErr(t, err, stream.UnknownPartition, "partition", 1, "partitions", 1)
	}},
	{"KeepsLastPerKeyAndTombstoneWindow", func(t *testing.T, f Factory) {
		const window = time.Hour
		h := open(t, f, stream.PolicyValue{CompactAfter: window})
		c := compactor(t, h.s)
		compact := func(want stream.CompactValue) {
			t.Helper()
			v, err := c.Compact(h.ctx, 0)
			if err != nil || v != want {
				t.Fatalf("Compact = %+v, %v; want %+v", v, err, want)
			}
			if v.Kept+v.Dropped != v.Scanned {
				t.Fatalf("Kept + Dropped != Scanned: %+v", v)
			}
		}
		// Offsets: 0 a=1, 1 b=1, 2 unkeyed, 3 a=2, 4 b tombstone, 5 unkeyed empty.
		h.append(rec("a", "a1"), rec("b", "b1"), rec("", "u"), rec("a", "a2"), rec("b", ""), rec("", ""))
		compact(stream.CompactValue{}) // nothing is an hour old yet: nothing scanned, nothing touched
		h.clock.Advance(window)
		h.append(rec("a", "a3")) // 6, young
		// All six are old; a=1 and b=1 are superseded; the tombstone is kept
		// for one more window; unkeyed records are left as they are.
		compact(stream.CompactValue{Scanned: 6, Kept: 4, Dropped: 2})
		if got := offsets(h.readAll(0, 0)); fmt.Sprint(got) != "[2 3 4 5 6]" {
			t.Fatalf("offsets after the first compaction = %v, want [2 3 4 5 6]", got)
		}
		if b := h.bounds(0); b != (stream.BoundsValue{First: 0, Next: 7}) {
			t.Fatalf("Bounds = %+v, want {0 7}: compaction never moves them", b)
		}
		// A read inside a hole reads on from the next survivor, unrefused.
		if es := h.read(0, 1, 2); fmt.Sprint(offsets(es)) != "[2 3]" {
			t.Fatalf("Read(1, 2) = %v, want [2 3]", offsets(es))
		}
		if es := h.read(0, 0, 1); es[0].Offset != 2 || string(es[0].Record.Payload) != "u" {
			t.Fatalf("Read(0, 1) = %+v, want offset 2", es)
		}
		h.clock.Advance(window)
		// Now: 2,3,4,5 two windows old, 6 one window old. a=2 is superseded by
		// a=3, now as old; the tombstone is past its second window and goes.
		compact(stream.CompactValue{Scanned: 5, Kept: 3, Dropped: 2})
		es := h.readAll(0, 0)
		if fmt.Sprint(offsets(es)) != "[2 5 6]" || string(es[2].Record.Payload) != "a3" {
			t.Fatalf("after the second compaction: offsets %v payloads %q, want [2 5 6] ending a3", offsets(es), payloads(es))
		}
		// Compacting again changes nothing and says so.
		compact(stream.CompactValue{Scanned: 3, Kept: 3})
		if v := h.append(rec("b", "b2")); v.First != 7 {
			t.Fatalf("Append after compaction took offset %d, want 7: offsets are never renumbered", v.First)
		}
		if b := h.bounds(0); b != (stream.BoundsValue{First: 0, Next: 8}) {
			t.Fatalf("Bounds = %+v, want {0 8}", b)
		}
	}},
	{"YoungerRecordNeverSupersedes", func(t *testing.T, f Factory) {
		const window = time.Hour
		h := open(t, f, stream.PolicyValue{CompactAfter: window})
		c := compactor(t, h.s)
		h.append(rec("k", "old"))
		h.clock.Advance(window / 2)
		h.append(rec("k", "young"), rec("k", "")) // a tombstone too, but young
		h.clock.Advance(window / 2)
		// Only "old" is an hour old: a reader inside the window must still
		// see every update, so the younger records supersede nothing yet.
		if v, err := c.Compact(h.ctx, 0); err != nil || v != (stream.CompactValue{Scanned: 1, Kept: 1}) {
			t.Fatalf("Compact = %+v, %v; want Scanned 1 Kept 1", v, err)
		}
		if got := payloads(h.readAll(0, 0)); got != "old,young," {
			t.Fatalf("read %q, want every record", got)
		}
	}},
	{"TrimmedOnlyBelowFirst", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{CompactAfter: time.Minute})
		c := compactor(t, h.s)
		tr := trimmer(t, h.s)
		h.append(rec("k", "1"), rec("k", "2"), rec("k", "3"), rec("j", "4"))
		h.clock.Advance(time.Minute)
		if _, err := c.Compact(h.ctx, 0); err != nil { // keeps 2 and 3
			t.Fatal(err)
		}
		if err := tr.Trim(h.ctx, 0, 1); err != nil {
			t.Fatal(err)
		}
		_, err := h.s.Read(h.ctx, 0, 0, 1)
		wantErr(t, err, stream.OffsetTrimmed, "offset", 0, "first", 1)
		if es := h.read(0, 1, 10); fmt.Sprint(offsets(es)) != "[2 3]" {
			t.Fatalf("Read(1) = %v, want [2 3]", offsets(es))
		}
	}},
}

var committerTests = []test{
	{"UnknownGroupNeverZero", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		cm := committer(t, h.s)
		_, err := cm.Committed(h.ctx, "g", 0)
		wantErr(t, err, stream.UnknownGroup, "group", "g", "partition", 0)
		h.append(rec(keyIn(0, 2, "k"), "x"))
		if err := cm.Commit(h.ctx, "g", 0, 1); err != nil {
			t.Fatal(err)
		}
		// Per group and per partition.
		_, err = cm.Committed(h.ctx, "g", 1)
		wantErr(t, err, stream.UnknownGroup, "group", "g", "partition", 1)
		_, err = cm.Committed(h.ctx, "other", 0)
		wantErr(t, err, stream.UnknownGroup, "group", "other", "partition", 0)
	}},
	{"CommitReplaysAndAdvances", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		cm := committer(t, h.s)
		if err := cm.Commit(h.ctx, "g", 0, 0); err != nil { // at next, on an empty partition
			t.Fatalf("Commit(0) on an empty partition: %v", err)
		}
		for i := range 6 {
			h.append(rec("", fmt.Sprint(i)))
		}
		for _, next := range []stream.Offset{5, 2, 6, 0} { // back is a replay, and legitimate
			if err := cm.Commit(h.ctx, "g", 0, next); err != nil {
				t.Fatalf("Commit(%d): %v", next, err)
			}
			if got, err := cm.Committed(h.ctx, "g", 0); err != nil || got != next {
				t.Fatalf("Committed after Commit(%d) = %d, %v", next, got, err)
			}
		}
		if err := cm.Commit(h.ctx, "h", 0, 3); err != nil {
			t.Fatal(err)
		}
		if got, _ := cm.Committed(h.ctx, "g", 0); got != 0 {
			t.Fatalf("group h's commit moved group g to %d", got)
		}
	}},
	{"PastNextIsAhead", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		cm := committer(t, h.s)
		h.append(rec("", "a"), rec("", "b"))
		wantErr(t, cm.Commit(h.ctx, "g", 0, 3), stream.OffsetAhead, "partition", 0, "offset", 3, "next", 2)
		_, err := cm.Committed(h.ctx, "g", 0)
		wantErr(t, err, stream.UnknownGroup) // the refused commit recorded nothing
	}},
	{"BelowFirstKeptThenReadTrimmed", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		cm := committer(t, h.s)
		tr := trimmer(t, h.s)
		for i := range 5 {
			h.append(rec("", fmt.Sprint(i)))
		}
		if err := cm.Commit(h.ctx, "early", 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := tr.Trim(h.ctx, 0, 3); err != nil {
			t.Fatal(err)
		}
		if err := cm.Commit(h.ctx, "late", 0, 2); err != nil { // below First: kept
			t.Fatalf("Commit below the first retained offset: %v", err)
		}
		for group, want := range map[string]stream.Offset{"early": 1, "late": 2} {
			got, err := cm.Committed(h.ctx, group, 0)
			if err != nil || got != want {
				t.Fatalf("Committed(%s) = %d, %v; want %d, kept as committed", group, got, err, want)
			}
			_, err = h.s.Read(h.ctx, 0, got, 10)
			wantErr(t, err, stream.OffsetTrimmed, "offset", want, "first", 3)
		}
	}},
	{"EmptyGroupAndUnknownPartition", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		cm := committer(t, h.s)
		wantErr(t, cm.Commit(h.ctx, "", 0, 0), stream.StreamMisconfigured, "field", "group")
		_, err := cm.Committed(h.ctx, "", 0)
		wantErr(t, err, stream.StreamMisconfigured, "field", "group")
		wantErr(t, cm.Commit(h.ctx, "g", 2, 0), stream.UnknownPartition, "partition", 2, "partitions", 2)
		_, err = cm.Committed(h.ctx, "g", -1)
		wantErr(t, err, stream.UnknownPartition, "partition", -1, "partitions", 2)
		// The group is checked before the partition.
		wantErr(t, cm.Commit(h.ctx, "", 9, 0), stream.StreamMisconfigured, "field", "group")
	}},
}

var reopenTests = []test{
	{"AcknowledgedSurvives", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		if h.engine.Reopen == nil {
			t.Skip("engine keeps nothing across a close")
		}
		k0, k1 := keyIn(0, 2, "k"), keyIn(1, 2, "k")
		h.append(rec(k0, "a"), rec("", "b"))
		h.clock.Advance(time.Second)
		h.append(rec(k1, "c"))
		h.append(rec(k0, "d"))
		tr, trims := h.s.(stream.Trimmer)
		if trims {
			if err := tr.Trim(h.ctx, 0, 1); err != nil {
				t.Fatal(err)
			}
		}
		cm, commits := h.s.(stream.Committer)
		if commits {
			if err := cm.Commit(h.ctx, "g", 1, 1); err != nil {
				t.Fatal(err)
			}
		}
		bounds := h.allBounds()
		var entries [2][]stream.EntryValue
		for p := range 2 {
			entries[p] = h.readAll(p, bounds[p].First)
		}

		h.s = h.engine.Reopen(t)
		if h.s.Partitions() != 2 {
			t.Fatalf("Partitions() = %d after reopening, want 2", h.s.Partitions())
		}
		h.wantBounds(bounds)
		for p := range 2 {
			got := h.readAll(p, bounds[p].First)
			if len(got) != len(entries[p]) {
				t.Fatalf("partition %d: %d entries after reopening, %d before", p, len(got), len(entries[p]))
			}
			for i, e := range got {
				w := entries[p][i]
				if e.Offset != w.Offset || e.Partition != w.Partition || !e.AppendedAt.Equal(w.AppendedAt) || !sameRecord(e.Record, w.Record) {
					t.Fatalf("partition %d entry %d = %+v after reopening, was %+v", p, i, e, w)
				}
			}
		}
		if commits {
			cm := h.s.(stream.Committer)
			if got, err := cm.Committed(h.ctx, "g", 1); err != nil || got != 1 {
				t.Fatalf("Committed after reopening = %d, %v; want 1", got, err)
			}
		}
		if v := h.append(rec(k0, "e")); v.First != bounds[0].Next {
			t.Fatalf("Append after reopening took offset %d, want %d", v.First, bounds[0].Next)
		}
	}},
}
