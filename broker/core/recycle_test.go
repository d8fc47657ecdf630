package core

import (
	"bytes"
	"context"
	"testing"

	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// TestRecycledBatchesAreNotCached: once a large batch is answered its
// buffer serves the next one, so nothing may keep it — a live reader
// served from a cached copy of it would read the next batch's bytes.
func TestRecycledBatchesAreNotCached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "s", node.CreateOptions{})
	batch := func(fill byte) []stream.RecordValue {
		var rs []stream.RecordValue
		for range 100 {
			rs = append(rs, stream.RecordValue{Payload: bytes.Repeat([]byte{fill}, 1024)})
		}
		return rs
	}
	for i := range 20 {
		if _, err := b.Append(ctx, "s", batch(byte('a'+i)), node.AppendOptions{Partition: -1}); err != nil {
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
