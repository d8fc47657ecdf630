package core

import (
	"bytes"
	"context"
	"testing"

	"github.com/picomq/picomq/broker/stream"
)

// TestPayloadClasses: a recycled buffer is at least as large as asked, of
// its class's exact capacity; small and huge ones are not recycled, and a
// buffer of any other capacity is not taken back.
func TestPayloadClasses(t *testing.T) {
	for _, n := range []int{minPooledPayload, minPooledPayload + 1, 100 << 10, 128 << 10, 128<<10 + 1, 3 << 20, maxPooledPayload} {
		b, recycled := getPayload(n)
		c, _ := payloadClass(n)
		if !recycled || cap(b) < n || cap(b) != minPooledPayload<<c || len(b) != 0 {
			t.Fatalf("getPayload(%d): len %d cap %d recycled %v", n, len(b), cap(b), recycled)
		}
		if c > 0 && minPooledPayload<<(c-1) >= n {
			t.Fatalf("getPayload(%d): class %d, a smaller one fits", n, c)
		}
		putPayload(b)
	}
	for _, n := range []int{0, 100, minPooledPayload - 1, maxPooledPayload + 1} {
		if b, recycled := getPayload(n); recycled || cap(b) < n {
			t.Fatalf("getPayload(%d): cap %d recycled %v; want a plain buffer", n, cap(b), recycled)
		}
	}
	odd := make([]byte, 0, 100<<10)
	putPayload(odd) // not a class's capacity: dropped
	for range 100 {
		if b, _ := getPayload(100 << 10); &b[:1][0] == &odd[:1][0] {
			t.Fatal("a buffer of no class's capacity was recycled")
		}
	}
}

// TestRecycledBatchesAreNotCached: once a large batch is answered its
// buffer serves the next one, so nothing may keep it — a live reader
// served from a cached copy of it would read the next batch's bytes.
func TestRecycledBatchesAreNotCached(t *testing.T) {
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "s", CreateOptions{})
	batch := func(fill byte) []stream.RecordValue {
		var rs []stream.RecordValue
		for range 100 {
			rs = append(rs, stream.RecordValue{Payload: bytes.Repeat([]byte{fill}, 1024)})
		}
		return rs
	}
	for i := range 20 {
		if _, err := b.Append(ctx, "s", batch(byte('a'+i)), AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
		got := readAll(t, b, "s", 0)
		if len(got) != 100*(i+1) {
			t.Fatalf("%d records after %d batches", len(got), i+1)
		}
		for j, e := range got {
			if want := byte('a' + j/100); e.Record.Payload[0] != want || len(e.Record.Payload) != 1024 {
				t.Fatalf("after batch %d, record %d reads %q..., want %q", i, j, e.Record.Payload[:1], want)
			}
		}
	}
}
