package wire

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

func TestRecordsRoundTrip(t *testing.T) {
	in := []stream.RecordValue{{}, {Key: []byte("k")}, {Payload: []byte("p")}, {Key: []byte("key"), Payload: bytes.Repeat([]byte{0xff}, 300)}}
	body := EncodeRecords(in)
	out, err := DecodeRecords(body, 0)
	if err != nil || len(out) != len(in) {
		t.Fatalf("decode: %d records, %v", len(out), err)
	}
	for i := range in {
		if !bytes.Equal(in[i].Key, out[i].Key) || !bytes.Equal(in[i].Payload, out[i].Payload) {
			t.Fatalf("record %d = %+v, want %+v", i, out[i], in[i])
		}
	}
	if out[0].Key != nil || out[0].Payload != nil {
		t.Fatal("empty key or payload is not nil")
	}
	// Slices are capped: appending to one never writes over the next.
	k := append(out[1].Key, 'X')
	_ = k
	if !bytes.Equal(out[2].Payload, []byte("p")) {
		t.Fatal("appending to a decoded key changed the next record")
	}
	if _, err := DecodeRecords(body, 3); !errors.Is(err, BodyTooLarge) {
		t.Fatalf("maxRecords: %v", err)
	}
	if out, err := DecodeRecords(nil, 0); err != nil || len(out) != 0 {
		t.Fatalf("empty body: %v, %v", out, err)
	}
}

func TestEntriesRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC)
	in := []stream.EntryValue{
		{AppendedAt: at, Offset: 7, Partition: 3, Record: stream.RecordValue{Key: []byte("k"), Payload: []byte("v")}},
		{AppendedAt: time.Unix(0, -5), Offset: 1 << 40, Partition: 3},
	}
	out, err := DecodeEntries(EncodeEntries(in), 3)
	if err != nil || len(out) != 2 {
		t.Fatal(err)
	}
	for i := range in {
		if out[i].Offset != in[i].Offset || out[i].Partition != 3 || !out[i].AppendedAt.Equal(in[i].AppendedAt) ||
			!bytes.Equal(out[i].Record.Key, in[i].Record.Key) || !bytes.Equal(out[i].Record.Payload, in[i].Record.Payload) {
			t.Fatalf("entry %d = %+v, want %+v", i, out[i], in[i])
		}
	}
	if out, err := DecodeEntries(nil, 0); err != nil || out == nil || len(out) != 0 {
		t.Fatalf("empty answer = %#v, %v; want an empty, non-nil slice", out, err)
	}
	if _, err := DecodeEntries([]byte{0x01}, 0); !errors.Is(err, MalformedBatch) {
		t.Fatalf("truncated answer: %v", err)
	}
}

func TestMalformedBatchPosition(t *testing.T) {
	good := EncodeRecords([]stream.RecordValue{{Key: []byte("ab"), Payload: []byte("cd")}}) // 6 bytes
	after := func(b ...byte) []byte { return append(append([]byte(nil), good...), b...) }   // no shared array
	for _, c := range []struct {
		body []byte
		pos  int64
	}{
		{[]byte{0x80}, 0},            // unterminated uvarint
		{after(0x03, 'x'), 6},        // key runs past the body
		{after(0x00, 0x02, 'x'), 7},  // payload runs past the body
		{after(0x00, 0x80, 0x80), 7}, // payload length unterminated
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 0}, // huge length
	} {
		_, err := DecodeRecords(c.body, 0)
		if !errors.Is(err, MalformedBatch) {
			t.Fatalf("%x: %v", c.body, err)
		}
		if p, _ := errs.FieldOf(err, "position"); p != c.pos {
			t.Errorf("%x: position %v, want %d", c.body, p, c.pos)
		}
	}
}

func FuzzDecodeRecords(f *testing.F) {
	f.Add(EncodeRecords([]stream.RecordValue{{Key: []byte("k"), Payload: []byte("v")}}))
	f.Add([]byte{0x80})
	f.Add([]byte{0x00, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		recs, err := DecodeRecords(body, 1000)
		if err != nil {
			if !errors.Is(err, MalformedBatch) && !errors.Is(err, BodyTooLarge) {
				t.Fatalf("uncoded error %v", err)
			}
			return
		}
		if again := EncodeRecords(recs); !bytes.Equal(again, body) {
			// Non-minimal uvarints re-encode shorter; the records must match.
			back, err := DecodeRecords(again, 0)
			if err != nil || len(back) != len(recs) {
				t.Fatalf("re-encoding changed the records: %v", err)
			}
		}
	})
}

func TestEscapeName(t *testing.T) {
	for in, want := range map[string]string{
		"logs/api/prod": "logs/api/prod",
		"a:trim":        "a%3Atrim",
		"a?x=1":         "a%3Fx%3D1",
		"a#b":           "a%23b",
		"a%2Fb":         "a%252Fb",
		"é":             "%C3%A9",
	} {
		if got := EscapeName(in); got != want {
			t.Errorf("EscapeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPolicyWire(t *testing.T) {
	p := stream.PolicyValue{Partitions: 3, MaxRecordBytes: 10, RetainFor: 90 * time.Minute, RetainBytes: 5, MaxBytes: 30, BlockTimeout: -time.Second, SegmentBytes: 7, CompactAfter: time.Millisecond}
	back, err := PolicyOf(p).Value()
	if err != nil || back != p {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
	patched, err := PatchOf(p).Apply(stream.PolicyValue{Partitions: 1, RetainFor: time.Hour})
	if err != nil || patched != p {
		t.Fatalf("patch = %+v, %v", patched, err)
	}
	zero := PatchOf(stream.PolicyValue{})
	if got, _ := zero.Apply(p); got != (stream.PolicyValue{}) {
		t.Fatalf("patch to zero = %+v", got)
	}
	two := 2
	if got, _ := (PolicyPatch{Partitions: &two}).Apply(p); got.Partitions != 2 || got.RetainFor != p.RetainFor {
		t.Fatalf("partial patch = %+v", got)
	}
	_, err = Policy{CompactAfter: "later"}.Value()
	if !errors.Is(err, stream.StreamMisconfigured) {
		t.Fatal(err)
	}
	if f, _ := errs.FieldOf(err, "field"); f != "CompactAfter" {
		t.Fatalf("field %v", f)
	}
}

// BenchmarkDecodeRecords decodes the bench's batch: 100 records of 1 KiB.
func BenchmarkDecodeRecords(b *testing.B) {
	var records []stream.RecordValue
	for range 100 {
		records = append(records, stream.RecordValue{Payload: make([]byte, 1024)})
	}
	body := EncodeRecords(records)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if out, err := DecodeRecords(body, 0); err != nil || len(out) != 100 {
			b.Fatal(len(out), err)
		}
	}
}

// FuzzDecodeAppends: the Go client's appends body (several appends in one
// request) decodes without a panic into items that encode back to the same
// body, or is refused with a coded error (MALFORMED_BATCH, or too many
// appends).
func FuzzDecodeAppends(f *testing.F) {
	f.Add(AppendItemTo(nil, "a", -1, EncodeRecords([]stream.RecordValue{{Key: []byte("k"), Payload: []byte("v")}})))
	f.Add(AppendItemTo(AppendItemTo(nil, "logs/x", 3, []byte("raw")), "b", 0, nil))
	f.Add([]byte{})
	f.Add([]byte{0x01, 'a', 0x03, 0x00})      // partition -2 (zigzag 0x03): refused
	f.Add([]byte{0x01, 'a', 0x01, 0x05, 'x'}) // batch longer than the body
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := DecodeAppends(body)
		if err != nil {
			if !errors.Is(err, MalformedBatch) && !errors.Is(err, BodyTooLarge) {
				t.Fatalf("uncoded error %v", err)
			}
			return
		}
		if len(items) == 0 {
			t.Fatal("decoded no item without an error")
		}
		var again []byte
		for _, it := range items {
			if it.Partition < -1 {
				t.Fatalf("partition %d decoded", it.Partition)
			}
			again = AppendItemTo(again, it.Name, it.Partition, it.Batch)
		}
		back, err := DecodeAppends(again)
		if err != nil || len(back) != len(items) {
			t.Fatalf("re-encoded items do not decode alike: %v", err)
		}
		for i := range back {
			if back[i].Name != items[i].Name || back[i].Partition != items[i].Partition || !bytes.Equal(back[i].Batch, items[i].Batch) {
				t.Fatalf("item %d: %+v, then %+v", i, items[i], back[i])
			}
		}
		if bytes.Equal(again, body) {
			return
		}
		// Only a non-minimal varint re-encodes shorter.
		if len(again) >= len(body) {
			t.Fatalf("re-encoded %d bytes from %d, differing", len(again), len(body))
		}
	})
}

// TestAppendItemSize: the size a router allocates for a group's body is
// exactly what AppendItemTo writes, at every varint width.
func TestAppendItemSize(t *testing.T) {
	for _, c := range []struct {
		name      string
		partition int
		batch     int
	}{{"s", -1, 0}, {"s", 0, 1}, {"stream", 63, 127}, {"stream", 64, 128}, {string(bytes.Repeat([]byte("n"), 200)), 1 << 20, 70000}} {
		batch := bytes.Repeat([]byte{1}, c.batch)
		if got, want := AppendItemSize(c.name, c.partition, batch), len(AppendItemTo(nil, c.name, c.partition, batch)); got != want {
			t.Errorf("AppendItemSize(%d-byte name, %d, %d-byte batch) = %d, AppendItemTo wrote %d", len(c.name), c.partition, c.batch, got, want)
		}
		items, err := DecodeAppends(AppendItemTo(make([]byte, 0, AppendItemSize(c.name, c.partition, batch)), c.name, c.partition, batch))
		if err != nil || len(items) != 1 || items[0].Name != c.name || items[0].Partition != c.partition || len(items[0].Batch) != c.batch {
			t.Errorf("round trip: %+v, %v", items, err)
		}
	}
}
