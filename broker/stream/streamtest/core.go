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

var policyTests = []test{
	{"ZeroValueWorks", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		if n := h.s.Partitions(); n != 1 {
			t.Fatalf("Partitions() = %d under the zero policy, want 1", n)
		}
		// Records of up to DefaultMaxRecordBytes, key and payload together.
		exact := stream.RecordValue{Key: []byte("k"), Payload: make([]byte, stream.DefaultMaxRecordBytes-1)}
		h.append(exact)
		_, err := h.s.Append(h.ctx, []stream.RecordValue{{Payload: make([]byte, stream.DefaultMaxRecordBytes+1)}})
		wantErr(t, err, stream.RecordTooLarge, "max", stream.DefaultMaxRecordBytes, "size", stream.DefaultMaxRecordBytes+1)
		// Kept forever, never full.
		h.clock.Advance(10 * 365 * 24 * time.Hour)
		h.append(rec("", "later"))
		if b := h.bounds(0); b != (stream.BoundsValue{First: 0, Next: 2}) {
			t.Fatalf("Bounds = %+v, want {0 2}", b)
		}
	}},
	{"RefusedByField", func(t *testing.T, f Factory) {
		for _, c := range []struct {
			p     stream.PolicyValue
			field string
		}{
			{stream.PolicyValue{Partitions: -1}, "Partitions"},
			{stream.PolicyValue{MaxRecordBytes: -1}, "MaxRecordBytes"},
			{stream.PolicyValue{RetainFor: -time.Second}, "RetainFor"},
			{stream.PolicyValue{RetainBytes: -1}, "RetainBytes"},
			{stream.PolicyValue{MaxBytes: -1}, "MaxBytes"},
			{stream.PolicyValue{BlockTimeout: -time.Second}, "BlockTimeout"},
			{stream.PolicyValue{SegmentBytes: -1}, "SegmentBytes"},
			{stream.PolicyValue{CompactAfter: -time.Second}, "CompactAfter"},
			{stream.PolicyValue{BlockTimeout: time.Second}, "BlockTimeout"},                     // nothing to wait under
			{stream.PolicyValue{MaxBytes: int64(stream.DefaultMaxRecordBytes) - 1}, "MaxBytes"}, // below the default record
			{stream.PolicyValue{MaxRecordBytes: 64, MaxBytes: 63}, "MaxBytes"},
		} {
			want := c.p.Validate()
			wantErr(t, want, stream.StreamMisconfigured, "field", c.field)
			e, err := f(t, c.p, NewClock(Epoch))
			if err == nil {
				t.Fatalf("factory accepted %+v (%T)", c.p, e.Stream)
			}
			// The engine's refusal is Validate's: same code, same fields.
			wantErr(t, err, stream.StreamMisconfigured, "field", c.field)
			we, _ := errs.As(want)
			for _, fl := range we.Fields() {
				wantErr(t, err, stream.StreamMisconfigured, fl.Key, fl.Value)
			}
		}
		// The edge of each refusal is accepted.
		for _, p := range []stream.PolicyValue{
			{MaxRecordBytes: 64, MaxBytes: 64, BlockTimeout: time.Second},
			{MaxBytes: int64(stream.DefaultMaxRecordBytes)},
		} {
			if _, err := f(t, p, NewClock(Epoch)); err != nil {
				t.Fatalf("factory refused %+v: %v", p, err)
			}
		}
	}},
	{"PartitionsFixed", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 5})
		for range 3 {
			if n := h.s.Partitions(); n != 5 {
				t.Fatalf("Partitions() = %d, want 5", n)
			}
			h.append(rec("", "x"))
		}
		h.bounds(4)
		_, err := h.s.Bounds(h.ctx, 5)
		wantErr(t, err, stream.UnknownPartition, "partition", 5, "partitions", 5)
		_, err = h.s.Bounds(h.ctx, -1)
		wantErr(t, err, stream.UnknownPartition, "partition", -1, "partitions", 5)
	}},
}

var appendTests = []test{
	{"ConsecutiveOffsetsFromZero", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		if b := h.bounds(0); b != (stream.BoundsValue{}) {
			t.Fatalf("empty partition bounds = %+v, want {0 0}", b)
		}
		var want []stream.RecordValue
		for i, n := range []int{1, 3, 2} {
			var batch []stream.RecordValue
			for j := range n {
				batch = append(batch, rec(fmt.Sprintf("k%d", j%2), fmt.Sprintf("b%d-r%d", i, j)))
			}
			first := stream.Offset(len(want))
			v := h.append(batch...)
			if v != (stream.AppendValue{Partition: 0, First: first, Last: first + stream.Offset(n) - 1}) {
				t.Fatalf("batch %d: Append = %+v, want partition 0, offsets %d..%d", i, v, first, int(first)+n-1)
			}
			want = append(want, batch...)
		}
		es := h.readAll(0, 0)
		if len(es) != len(want) {
			t.Fatalf("read %d entries, want %d", len(es), len(want))
		}
		for i, e := range es {
			if e.Offset != stream.Offset(i) || e.Partition != 0 || !sameRecord(e.Record, want[i]) {
				t.Fatalf("entry %d = offset %d partition %d %q/%q, want offset %d %q/%q",
					i, e.Offset, e.Partition, e.Record.Key, e.Record.Payload, i, want[i].Key, want[i].Payload)
			}
		}
		if b := h.bounds(0); b != (stream.BoundsValue{First: 0, Next: 6}) {
			t.Fatalf("Bounds = %+v, want {0 6}", b)
		}
	}},
	{"BatchSharesOneInstant", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		h.append(rec("", "a"), rec("", "b"), rec("", "c"))
		h.clock.Advance(1500 * time.Millisecond)
		h.append(rec("", "d"))
		es := h.readAll(0, 0)
		for i, e := range es {
			want := Epoch
			if i == 3 {
				want = Epoch.Add(1500 * time.Millisecond)
			}
			if !e.AppendedAt.Equal(want) {
				t.Errorf("entry %d AppendedAt = %v, want the clock's %v", i, e.AppendedAt, want)
			}
		}
	}},
	{"KeyPlacementIsPartitionOf", func(t *testing.T, f Factory) {
		const n = 7
		h := open(t, f, stream.PolicyValue{Partitions: n})
		for i := range 60 {
			key := fmt.Sprintf("order-%d", i)
			v := h.append(rec(key, "x"))
			if want := stream.PartitionOf([]byte(key), n); v.Partition != want {
				t.Fatalf("key %q went to partition %d, PartitionOf says %d", key, v.Partition, want)
			}
		}
		for p := range n {
			for _, e := range h.readAll(p, 0) {
				if got := stream.PartitionOf(e.Record.Key, n); got != p || e.Partition != p {
					t.Fatalf("partition %d holds key %q (PartitionOf %d, entry says %d)", p, e.Record.Key, got, e.Partition)
				}
			}
		}
	}},
	{"KeyReadInAppendOrder", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 3})
		var want []string
		for i := range 30 {
			h.append(rec("the-key", fmt.Sprint(i)))
			want = append(want, fmt.Sprint(i))
			h.append(rec(fmt.Sprintf("other-%d", i), "o")) // interleaved, any partition
		}
		p := stream.PartitionOf([]byte("the-key"), 3)
		var got []string
		for _, e := range h.readAll(p, 0) {
			if string(e.Record.Key) == "the-key" {
				got = append(got, string(e.Record.Payload))
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("key's records read as %v, appended as %v", got, want)
		}
	}},
	{"UnkeyedBatchesInTurn", func(t *testing.T, f Factory) {
		const n = 3
		h := open(t, f, stream.PolicyValue{Partitions: n})
		var first int
		for i := range 3 * n {
			v := h.append(rec("", fmt.Sprint(i)), rec("", "second"))
			if i == 0 {
				first = v.Partition
			}
			if want := (first + i) % n; v.Partition != want {
				t.Fatalf("unkeyed batch %d went to partition %d, want %d (in turn after %d)", i, v.Partition, want, first)
			}
		}
		for p := range n {
			if b := h.bounds(p); b.Next != 6 {
				t.Fatalf("partition %d holds %d records, want 6", p, b.Next)
			}
		}
	}},
	{"UnkeyedRecordFollowsBatch", func(t *testing.T, f Factory) {
		const n = 4
		h := open(t, f, stream.PolicyValue{Partitions: n})
		k := keyIn(2, n, "k")
		batch := []stream.RecordValue{rec("", "u1"), rec(k, "k1"), rec("", "u2"), rec(k, "k2")}
		v := h.append(batch...)
		if v.Partition != 2 || v.First != 0 || v.Last != 3 {
			t.Fatalf("Append = %+v, want partition 2 (the first key's), offsets 0..3", v)
		}
		if got := payloads(h.readAll(2, 0)); got != "u1,k1,u2,k2" {
			t.Fatalf("partition 2 holds %q", got)
		}
	}},
	{"PartitionsMixedWritesNothing", func(t *testing.T, f Factory) {
		const n = 4
		h := open(t, f, stream.PolicyValue{Partitions: n})
		k0, k1 := keyIn(0, n, "a"), keyIn(1, n, "b")
		before := h.allBounds()
		_, err := h.s.Append(h.ctx, []stream.RecordValue{rec(k0, "1"), rec("", "2"), rec(k0, "3"), rec(k1, "4")})
		wantErr(t, err, stream.PartitionsMixed, "index", 3, "partition", 0, "key_partition", 1)
		h.wantBounds(before)
	}},
	{"EmptyBatchIsInvalid", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		for _, batch := range [][]stream.RecordValue{nil, {}} {
			_, err := h.s.Append(h.ctx, batch)
			wantErr(t, err, stream.InvalidBatchSize, "records", 0)
		}
		h.wantBounds([]stream.BoundsValue{{}, {}})
	}},
	{"RecordTooLargeRefusesBatch", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{MaxRecordBytes: 16})
		secret := "SECRET-PAYLOAD"                                                        // 14 bytes
		batch := []stream.RecordValue{rec("", "ok"), rec("", "fine"), rec("key", secret)} // 3+14 = 17
		_, err := h.s.Append(h.ctx, batch)
		wantErr(t, err, stream.RecordTooLarge, "index", 2, "size", 17, "max", 16)
		h.wantBounds([]stream.BoundsValue{{}})
		// The fields carry both sizes, never the bytes.
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error carries the payload: %v", err)
		}
		if b, merr := errs.Marshal(err); merr != nil || bytes.Contains(b, []byte(secret)) {
			t.Fatalf("the problem carries the payload (or fails: %v): %s", merr, b)
		}
		// Key and payload together, up to MaxRecordBytes inclusive.
		h.append(rec("12345678", "abcdefgh"))
	}},
	{"EmptyRecordsAccepted", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		h.append(rec("", ""), rec("k", ""), rec("", "p"))
		es := h.readAll(0, 0)
		if len(es) != 3 || len(es[0].Record.Key)+len(es[0].Record.Payload) != 0 ||
			string(es[1].Record.Key) != "k" || len(es[1].Record.Payload) != 0 || string(es[2].Record.Payload) != "p" {
			t.Fatalf("read back %+v", es)
		}
	}},
	{"RecordIsAsAppended", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		key, payload := []byte("key"), []byte("payload")
		h.append(stream.RecordValue{Key: key, Payload: payload})
		copy(key, "XXX") // the caller reuses its buffers
		copy(payload, "XXXXXXX")
		es := h.read(0, 0, 1)
		if string(es[0].Record.Key) != "key" || string(es[0].Record.Payload) != "payload" {
			t.Fatalf("engine kept the caller's buffers: read %q/%q", es[0].Record.Key, es[0].Record.Payload)
		}
		copy(es[0].Record.Payload, "YYYYYYY") // and a reader scribbles on what it read
		if es := h.read(0, 0, 1); string(es[0].Record.Payload) != "payload" {
			t.Fatalf("a reader's change reached the engine: read %q", es[0].Record.Payload)
		}
	}},
	{"ConcurrentAppendersLoseNothing", func(t *testing.T, f Factory) {
		const (
			n       = 3
			writers = 8
			batches = 40
		)
		h := open(t, f, stream.PolicyValue{Partitions: n})
		type sent struct {
			v       stream.AppendValue
			payload []string
		}
		var (
			mu   sync.Mutex
			all  []sent
			wg   sync.WaitGroup
			errc = make(chan error, writers)
		)
		for w := range writers {
			wg.Go(func() {
				for b := range batches {
					key := ""
					if b%2 == 0 {
						key = fmt.Sprintf("w%d-b%d", w, b%5)
					}
					var batch []stream.RecordValue
					var ids []string
					for r := range 1 + b%3 {
						id := fmt.Sprintf("w%d-b%d-r%d", w, b, r)
						batch = append(batch, rec(key, id))
						ids = append(ids, id)
					}
					v, err := h.s.Append(h.ctx, batch)
					if err != nil {
						errc <- err
						return
					}
					mu.Lock()
					all = append(all, sent{v, ids})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatalf("concurrent Append: %v", err)
		}
		// Every partition holds consecutive offsets from zero, and every
		// acknowledged record sits exactly where its Append said.
		at := make(map[int]map[stream.Offset]string)
		total := 0
		for p := range n {
			at[p] = make(map[stream.Offset]string)
			es := h.readAll(p, 0)
			for i, e := range es {
				if e.Offset != stream.Offset(i) {
					t.Fatalf("partition %d: entry %d has offset %d: %v", p, i, e.Offset, offsets(es))
				}
				at[p][e.Offset] = string(e.Record.Payload)
			}
			total += len(es)
		}
		want := 0
		for _, s := range all {
			want += len(s.payload)
			for i, id := range s.payload {
				if got := at[s.v.Partition][s.v.First+stream.Offset(i)]; got != id {
					t.Fatalf("record %s acknowledged at %d/%d, which holds %q", id, s.v.Partition, s.v.First+stream.Offset(i), got)
				}
			}
		}
		if total != want {
			t.Fatalf("partitions hold %d records, %d were acknowledged", total, want)
		}
	}},
}

var readTests = []test{
	{"AtNextIsEmptyNotBlocking", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		if es := h.read(0, 0, 10); len(es) != 0 {
			t.Fatalf("empty partition read %d entries", len(es))
		}
		h.append(rec("", "a"), rec("", "b"), rec("", "c"))
		if es := h.read(0, 3, 10); len(es) != 0 {
			t.Fatalf("read at next gave %d entries", len(es))
		}
	}},
	{"UpToMaxInOffsetOrder", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		for i := range 10 {
			h.append(rec("", fmt.Sprint(i)))
		}
		if es := h.read(0, 2, 3); payloads(es) != "2,3,4" || offsets(es)[0] != 2 {
			t.Fatalf("Read(2, max 3) = %v %q", offsets(es), payloads(es))
		}
		if es := h.read(0, 8, 100); payloads(es) != "8,9" {
			t.Fatalf("Read(8, max 100) = %q", payloads(es))
		}
		if es := h.read(0, 9, 1); payloads(es) != "9" {
			t.Fatalf("Read(9, max 1) = %q", payloads(es))
		}
	}},
	{"NonPositiveMaxIsInvalid", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{})
		h.append(rec("", "a"))
		for _, max := range []int{0, -1} {
			_, err := h.s.Read(h.ctx, 0, 0, max)
			wantErr(t, err, stream.InvalidBatchSize, "max", max)
		}
	}},
	{"PastNextIsAhead", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 2})
		h.append(rec(keyIn(1, 2, "k"), "a"), rec("", "b"))
		_, err := h.s.Read(h.ctx, 1, 3, 10)
		wantErr(t, err, stream.OffsetAhead, "partition", 1, "offset", 3, "next", 2)
		_, err = h.s.Read(h.ctx, 0, 1, 10)
		wantErr(t, err, stream.OffsetAhead, "partition", 0, "offset", 1, "next", 0)
	}},
	{"UnknownPartition", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{Partitions: 3})
		for _, p := range []int{-1, 3, 1 << 30} {
			_, err := h.s.Read(h.ctx, p, 0, 1)
			wantErr(t, err, stream.UnknownPartition, "partition", p, "partitions", 3)
		}
	}},
	{"RefusalOrder", func(t *testing.T, f Factory) {
		// Several wrong arguments at once are refused for the same one by
		// every engine: the partition, then max, then the offset.
		h := open(t, f, stream.PolicyValue{})
		_, err := h.s.Read(h.ctx, 1, 99, 0)
		wantErr(t, err, stream.UnknownPartition)
		_, err = h.s.Read(h.ctx, 0, 99, 0)
		wantErr(t, err, stream.InvalidBatchSize)
	}},
}

var retentionTests = []test{
	{"ByAge", func(t *testing.T, f Factory) {
		// SegmentBytes 1 lets an engine that drops whole segments only drop
		// every batch once a later one was written.
		h := open(t, f, stream.PolicyValue{RetainFor: time.Hour, SegmentBytes: 1})
		a := h.append(rec("", "a1"), rec("", "a2"))
		h.clock.Advance(30 * time.Minute)
		b := h.append(rec("", "b1"))
		h.clock.Advance(30 * time.Minute) // a is an hour old, b half an hour
		c := h.append(rec("", "c1"))
		if got := h.bounds(0); got.First != b.First || got.Next != c.Last+1 {
			t.Fatalf("Bounds = %+v, want {%d %d}: records an hour old are trimmed, younger ones kept", got, b.First, c.Last+1)
		}
		_, err := h.s.Read(h.ctx, 0, a.First, 10)
		wantErr(t, err, stream.OffsetTrimmed, "partition", 0, "offset", a.First, "first", b.First)
		if got := payloads(h.readAll(0, b.First)); got != "b1,c1" {
			t.Fatalf("retained %q, want b1,c1", got)
		}
		h.clock.Advance(2 * time.Hour)
		d := h.append(rec("", "d1"))
		if got := h.bounds(0); got.First != d.First {
			t.Fatalf("Bounds = %+v after two hours, want First %d", got, d.First)
		}
	}},
	{"ByBytes", func(t *testing.T, f Factory) {
		const size = 10 // "kk" + 8 bytes
		h := open(t, f, stream.PolicyValue{RetainBytes: 3 * size, SegmentBytes: 1})
		for i := range 6 {
			h.append(rec("kk", fmt.Sprintf("payload%d", i)))
		}
		b := h.bounds(0)
		es := h.readAll(0, b.First)
		var held int64
		for i, e := range es {
			held += stream.RecordBytes(e.Record)
			if e.Offset != b.First+stream.Offset(i) {
				t.Fatalf("retained offsets %v are not the newest suffix", offsets(es))
			}
		}
		if held > 3*size || b.First == 0 || b.Next != 6 || len(es) == 0 || es[len(es)-1].Offset != 5 {
			t.Fatalf("Bounds %+v, retained %d bytes (%v): want at most %d bytes, the oldest trimmed, the newest kept",
				b, held, offsets(es), 3*size)
		}
		_, err := h.s.Read(h.ctx, 0, 0, 1)
		wantErr(t, err, stream.OffsetTrimmed, "offset", 0, "first", b.First)
	}},
	{"ZeroKeepsForever", func(t *testing.T, f Factory) {
		h := open(t, f, stream.PolicyValue{SegmentBytes: 1})
		h.append(rec("", "old"))
		h.clock.Advance(100 * 365 * 24 * time.Hour)
		h.append(rec("", "new"))
		if got := payloads(h.readAll(0, 0)); got != "old,new" {
			t.Fatalf("read %q, want old,new", got)
		}
	}},
}

// full opens a stream of two partitions whose MaxBytes holds exactly three
// 10-byte records, and fills it: two records on partition 0, one on 1.
func full(t *testing.T, f Factory, p stream.PolicyValue) *h {
	p.Partitions, p.MaxRecordBytes, p.MaxBytes = 2, 10, 30
	h := open(t, f, p)
	k0, k1 := keyIn(0, 2, "k"), keyIn(1, 2, "k")
	h.append(rec(k0, pad(k0, 10)), rec(k0, pad(k0, 10)))
	h.append(rec(k1, pad(k1, 10)))
	return h
}

// pad returns a payload that makes a record keyed key size bytes.
func pad(key string, size int) string { return strings.Repeat("p", size-len(key)) }

var backpressureTests = []test{
	{"ZeroTimeoutRefusesAtOnce", func(t *testing.T, f Factory) {
		h := full(t, f, stream.PolicyValue{})
		before := h.allBounds()
		k := keyIn(1, 2, "x")
		_, err := h.s.Append(h.ctx, []stream.RecordValue{rec(k, pad(k, 10))})
		wantErr(t, err, stream.StreamFull, "held", 30, "batch", 10, "max", 30)
		h.wantBounds(before)
	}},
	{"WaitsThenFull", func(t *testing.T, f Factory) {
		const timeout = 10 * time.Millisecond
		h := full(t, f, stream.PolicyValue{BlockTimeout: timeout})
		before := h.allBounds()
		start := time.Now()
		r := await(t, goAppend(h.ctx, h.s, rec("", "0123456789")))
		if waited := time.Since(start); waited < timeout {
			t.Fatalf("refused after %v, before BlockTimeout %v", waited, timeout)
		}
		wantErr(t, r.err, stream.StreamFull, "held", 30, "batch", 10, "max", 30, "timeout", timeout)
		h.wantBounds(before)
	}},
	{"BatchAboveMaxBytesRefusedAtOnce", func(t *testing.T, f Factory) {
		// A batch larger than MaxBytes on its own could never fit: waiting
		// BlockTimeout for it would only delay the same answer.
		p := stream.PolicyValue{MaxRecordBytes: 10, MaxBytes: 30, BlockTimeout: time.Hour}
		h := open(t, f, p)
		batch := []stream.RecordValue{rec("", "0123456789"), rec("", "0123456789"), rec("", "0123456789"), rec("", "x")}
		r := await(t, goAppend(h.ctx, h.s, batch...))
		wantErr(t, r.err, stream.StreamFull, "held", 0, "batch", 31, "max", 30)
		h.wantBounds([]stream.BoundsValue{{}})
	}},
	{"WaitsForTrim", func(t *testing.T, f Factory) {
		h := full(t, f, stream.PolicyValue{BlockTimeout: time.Hour})
		tr, ok := h.s.(stream.Trimmer)
		if !ok {
			t.Skip("engine has no Trimmer")
		}
		k := keyIn(1, 2, "x")
		ch := goAppend(h.ctx, h.s, rec(k, pad(k, 10)))
		time.Sleep(settle)
		select {
		case r := <-ch:
			t.Fatalf("Append on a full stream returned at once: %+v, %v", r.v, r.err)
		default:
		}
		if err := tr.Trim(h.ctx, 0, 1); err != nil { // releases one record of partition 0
			t.Fatal(err)
		}
		r := await(t, ch)
		if r.err != nil || r.v != (stream.AppendValue{Partition: 1, First: 1, Last: 1}) {
			t.Fatalf("Append after Trim made room = %+v, %v", r.v, r.err)
		}
	}},
	{"WaitsForRetention", func(t *testing.T, f Factory) {
		h := full(t, f, stream.PolicyValue{BlockTimeout: time.Hour, RetainFor: time.Minute, SegmentBytes: 1})
		ch := goAppend(h.ctx, h.s, rec("", "0123456789"))
		time.Sleep(settle)
		h.clock.Advance(time.Minute) // every record is now due for trimming
		r := await(t, ch)
		if r.err != nil {
			t.Fatalf("Append after retention made room: %v", r.err)
		}
	}},
	{"ContextEndsWaitWithItsCause", func(t *testing.T, f Factory) {
		h := full(t, f, stream.PolicyValue{BlockTimeout: time.Hour})
		before := h.allBounds()
		cause := errors.New("producer shutting down")
		ctx, cancel := context.WithCancelCause(h.ctx)
		ch := goAppend(ctx, h.s, rec("", "0123456789"))
		time.Sleep(settle)
		cancel(cause)
		r := await(t, ch)
		if !errors.Is(r.err, cause) || errors.Is(r.err, stream.StreamFull) {
			t.Fatalf("Append = %v, want ctx's cause %q", r.err, cause)
		}
		h.wantBounds(before)
	}},
}
