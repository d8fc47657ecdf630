package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// retainedStream makes a stream whose policy retains an hour, with "old"
// appended 70 minutes ago and "new" 40 minutes ago: retention is due for
// offset 0 and nobody persisted it yet.
func retainedStream(t *testing.T, mod ...func(*Config)) (*Broker, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	b := openTest(t, t.TempDir(), append([]func(*Config){func(c *Config) { c.Clock = clock.Now }}, mod...)...)
	t.Cleanup(func() { b.Close() })
	mustCreate(t, b, "r", node.CreateOptions{Policy: stream.PolicyValue{RetainFor: time.Hour}})
	ctx := context.Background()
	if _, err := b.Append(ctx, "r", recs("old"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	clock.Add(30 * time.Minute)
	if _, err := b.Append(ctx, "r", recs("new"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	clock.Add(40 * time.Minute)
	checkpointed(t, b) // the commands these tests count are the reads' and retention's
	return b, clock
}

// TestRetentionReadsWriteNothing: retention due when a reader looks is in
// the reader's answer — the old record is trimmed for Read, Bounds,
// OffsetAt and TailOf — and not one of them writes the metadata log; the
// maintenance pass persists it.
func TestRetentionReadsWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, clock := retainedStream(t)
	e, _ := b.Get("r")
	id := e.Partitions[0]
	commands := b.fsm.Commands()

	if _, _, err := b.Read(ctx, "r", 0, 0, 10, node.ReadOptions{}); !errors.Is(err, stream.OffsetTrimmed) {
		t.Fatalf("read below the retention point: %v, want OFFSET_TRIMMED", err)
	}
	got, bounds, err := b.Read(ctx, "r", 0, 1, 10, node.ReadOptions{})
	if err != nil || len(got) != 1 || string(got[0].Record.Payload) != "new" || bounds.First != 1 {
		t.Fatalf("read from the retention point: %v %+v %v", got, bounds, err)
	}
	if bd, err := b.Bounds(ctx, "r", 0); err != nil || bd != (stream.BoundsValue{First: 1, Next: 2}) {
		t.Fatalf("bounds %+v, %v; want [1, 2)", bd, err)
	}
	if off, err := b.OffsetAt(ctx, "r", 0, clock.Now().Add(-3*time.Hour)); err != nil || off != 1 {
		t.Fatalf("offset at a time before both records: %d, %v; want 1 (0 is past retention)", off, err)
	}
	if tail, err := b.TailOf("r", 0); err != nil || tail.Start != 1 || tail.End != 2 {
		t.Fatalf("tail %+v, %v; want start 1, end 2", tail, err)
	}
	if n := b.fsm.Commands() - commands; n != 0 {
		t.Fatalf("reads wrote %d metadata commands", n)
	}
	if in, _ := b.fsm.Internal(id); in.Start != 0 {
		t.Fatalf("the log's start moved to %d before maintenance", in.Start)
	}

	b.maintain(ctx)
	if in, _ := b.fsm.Internal(id); in.Start != 1 || len(in.Ranges) != 1 {
		t.Fatalf("after maintenance the log holds start %d and %d ranges; want 1 and 1", in.Start, len(in.Ranges))
	}
	if n := b.fsm.Commands() - commands; n != 1 {
		t.Fatalf("maintenance wrote %d commands to persist one trim", n)
	}
	b.maintain(ctx)
	if n := b.fsm.Commands() - commands; n != 1 {
		t.Fatalf("a second pass with nothing due wrote %d more commands", n-1)
	}
}

// TestPolicyUpdateKeepsTrimmedRecordsTrimmed: a reader already saw the old
// record trimmed; a longer retention set before the maintenance pass must
// not bring it back.
func TestPolicyUpdateKeepsTrimmedRecordsTrimmed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := retainedStream(t)
	if _, err := b.UpdatePolicy(ctx, "r", stream.PolicyValue{RetainFor: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Read(ctx, "r", 0, 0, 10, node.ReadOptions{}); !errors.Is(err, stream.OffsetTrimmed) {
		t.Fatalf("read of the trimmed record after a longer retention: %v, want OFFSET_TRIMMED", err)
	}
	e, _ := b.Get("r")
	if in, _ := b.fsm.Internal(e.Partitions[0]); in.Start != 1 {
		t.Fatalf("start %d after the policy update, want 1 (persisted first)", in.Start)
	}
}

// TestRetentionByBytesInTheReadersAnswer: RetainBytes too is applied by
// the answer without a write.
func TestRetentionByBytesInTheReadersAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "rb", node.CreateOptions{Policy: stream.PolicyValue{RetainBytes: 10}})
	for _, v := range []string{"aaaaaa", "bbbbbb", "cccccc"} {
		if _, err := b.Append(ctx, "rb", recs(v), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	commands := b.fsm.Commands()
	got, bounds, err := b.Read(ctx, "rb", 0, 2, 10, node.ReadOptions{})
	if err != nil || len(got) != 1 || bounds.First != 2 {
		t.Fatalf("read: %v %+v %v; want only the last 6 bytes kept (first 2)", got, bounds, err)
	}
	if n := b.fsm.Commands() - commands; n != 0 {
		t.Fatalf("a read wrote %d commands", n)
	}
}
