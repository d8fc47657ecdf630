package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/picomq/picomq/broker/diskio"
	"github.com/picomq/picomq/broker/diskspace"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// payloads returns the records of a partition, in order.
func diskPayloads(t *testing.T, b *Broker, name string) []string {
	t.Helper()
	var out []string
	for _, e := range readAll(t, b, name, 0) {
		out = append(out, string(e.Record.Payload))
	}
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// openFaulty opens a broker whose files go through a fault injector, on a
// volume watched by a monitor (which a failed fdatasync is reported to).
func openFaulty(t *testing.T, mod ...func(*Config)) (*Broker, *diskio.Faulty) {
	t.Helper()
	dir := t.TempDir() + "/data"
	faults := &diskio.Faulty{}
	b := openTest(t, dir, append([]func(*Config){func(c *Config) {
		c.FS = faults
		var err error
		if err = objstore.PrepareDir(dir); err == nil {
			c.Disk, err = diskspace.New(diskspace.Options{Dir: dir, Headroom: diskspace.Headroom{Fixed: true}, ReserveBytes: -1})
		}
		if err != nil {
			t.Fatal(err)
		}
	}}, mod...)...)
	return b, faults
}

// TestAppendFaultsThroughTheSeam: an append whose object met EIO, ENOSPC
// or a short write is not acknowledged and leaves what was acknowledged
// intact; after an fsync failure the broker acknowledges no append at all.
func TestAppendFaultsThroughTheSeam(t *testing.T) {
	b, faults := openFaulty(t, func(c *Config) {
		c.LogCommits = true // the log path (a cluster's): see TestJournalFaultsThroughTheSeam
		c.InlineBytes = -1  // every object is a file with its own fdatasync
	})
	defer b.Close()
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	want := []string{}
	appendOK := func(v string) {
		t.Helper()
		if _, err := b.Append(ctx, "s", recs(v), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatalf("append %q: %v", v, err)
		}
		want = append(want, v)
	}
	appendOK("before")

	for i, r := range []diskio.Rule{
		{Op: diskio.OpWrite, Path: ".obj", MinOffset: 1, Count: 1, Err: syscall.EIO},
		{Op: diskio.OpWrite, Path: ".obj", MinOffset: 1, Count: 1, Err: syscall.ENOSPC},
		{Op: diskio.OpWrite, Path: ".obj", MinOffset: 1, Count: 1, Short: true},
	} {
		faults.Add(r)
		if _, err := b.Append(ctx, "s", recs("faulted"), node.AppendOptions{Partition: -1}); err == nil {
			t.Fatalf("rule %d: an append whose write failed was acknowledged", i)
		}
		if faults.Injected() != i+1 {
			t.Fatalf("rule %d: %d faults injected in all: the append did not meet it", i, faults.Injected())
		}
		faults.Clear()
		if got := diskPayloads(t, b, "s"); !sameStrings(got, want) {
			t.Fatalf("rule %d: the stream holds %q, want %q", i, got, want)
		}
		appendOK("after-write-fault")
	}

	faults.Add(diskio.Rule{Op: diskio.OpSync, Path: ".obj", Count: 1, Err: syscall.EIO})
	if _, err := b.Append(ctx, "s", recs("unsynced"), node.AppendOptions{Partition: -1}); err == nil {
		t.Fatal("an append whose fsync failed was acknowledged")
	}
	faults.Clear() // a retried fsync would now succeed: it must not be tried
	_, err := b.Append(ctx, "s", recs("later"), node.AppendOptions{Partition: -1})
	if !errors.Is(err, node.StorageFailed) {
		t.Fatalf("an append after an fsync failure answered %v, want STORAGE_FAILED", err)
	}
	if b.Status().StorageFailed == nil {
		t.Fatal("Status does not report the storage failed (readyz would stay ready)")
	}
	if got := diskPayloads(t, b, "s"); !sameStrings(got, want) {
		t.Fatalf("after the fsync failure the stream holds %q, want %q", got, want)
	}
}

// TestMergeWritesWithinItsBudget: a merge writes no more than the pass's
// budget — nothing with none, a part of its run with a part — and takes
// what it wrote from it; the rest merges in a later pass. (The budget is
// the disk's: diskspace.Monitor.BackgroundBudget.)
func TestMergeWritesWithinItsBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 4
		c.InlineBytes = -1
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	for i := 0; i < 20; i++ {
		if _, err := b.Append(ctx, "a", recs("record-of-some-length"), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	checkpointed(t, b)
	before := diskPayloads(t, b, "a")
	n, id, err := b.partitionOf("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	ranges := func() []meta.Range {
		in, _ := b.fsm.Internal(id)
		return in.Ranges
	}
	one := ranges()[0].Len

	budget := int64(0)
	if err := b.merge(ctx, n, id, &budget, nil); err != nil || len(ranges()) != 20 {
		t.Fatalf("with no budget: %d ranges, %v; want the 20 untouched", len(ranges()), err)
	}
	budget = 5*one + one/2
	if err := b.merge(ctx, n, id, &budget, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(ranges()); got != 16 {
		t.Fatalf("with a budget of 5.5 ranges: %d ranges, want 16 (5 merged into 1)", got)
	}
	if budget != one/2 {
		t.Fatalf("budget left %d, want %d", budget, one/2)
	}
	budget = 1 << 30
	if err := b.merge(ctx, n, id, &budget, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(ranges()); got != 1 {
		t.Fatalf("with room: %d ranges, want 1 (the first merge's range is small too)", got)
	}
	if after := diskPayloads(t, b, "a"); !sameStrings(after, before) {
		t.Fatalf("merges in parts changed the records: %q, want %q", after, before)
	}
}

// TestJournalFaultsThroughTheSeam: on the journal path, an append whose
// journal write or fdatasync failed is not acknowledged, what was
// acknowledged stays readable, and the broker acknowledges no append after
// (a failed write may have left anything in the segment: the journal does
// not retry it), reporting the storage failed — for each kind of fault.
func TestJournalFaultsThroughTheSeam(t *testing.T) {
	for i, r := range []diskio.Rule{
		{Op: diskio.OpWrite, Path: ".log", Count: 1, Err: syscall.EIO},
		{Op: diskio.OpWrite, Path: ".log", Count: 1, Err: syscall.ENOSPC},
		{Op: diskio.OpWrite, Path: ".log", Count: 1, Short: true},
		{Op: diskio.OpSync, Path: ".log", Count: 1, Err: syscall.EIO},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			b, faults := openFaulty(t)
			defer b.Close()
			ctx := context.Background()
			mustCreate(t, b, "s", node.CreateOptions{})
			if _, err := b.Append(ctx, "s", recs("before"), node.AppendOptions{Partition: -1}); err != nil {
				t.Fatal(err)
			}
			faults.Add(r)
			if _, err := b.Append(ctx, "s", recs("faulted"), node.AppendOptions{Partition: -1}); err == nil {
				t.Fatal("an append whose journal write failed was acknowledged")
			}
			if faults.Injected() != 1 {
				t.Fatalf("%d faults injected: the append did not meet it", faults.Injected())
			}
			faults.Clear() // a retry would now succeed: it must not be tried
			if _, err := b.Append(ctx, "s", recs("later"), node.AppendOptions{Partition: -1}); !errors.Is(err, node.StorageFailed) {
				t.Fatalf("an append after the journal failed answered %v, want STORAGE_FAILED", err)
			}
			if b.Status().StorageFailed == nil {
				t.Fatal("Status does not report the storage failed")
			}
			if got := diskPayloads(t, b, "s"); !sameStrings(got, []string{"before"}) {
				t.Fatalf("the stream holds %q, want [before]", got)
			}
		})
	}
}

// TestSmallSegmentsAreNotMergedAgain: with a policy's segments no larger
// than a small range, a merge's output is final — else every pass would
// rewrite it again (and, tiered, upload it again).
func TestSmallSegmentsAreNotMergedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 4
		c.InlineBytes = -1
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{Policy: stream.PolicyValue{SegmentBytes: 4 << 10}})
	for i := 0; i < 40; i++ {
		if _, err := b.Append(ctx, "a", recs(strings.Repeat("r", 1000)), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	checkpointed(t, b)
	n, id, err := b.partitionOf("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	objects := func() []uint64 {
		in, _ := b.fsm.Internal(id)
		var out []uint64
		for _, r := range in.Ranges {
			out = append(out, r.Object)
		}
		return out
	}
	budget := int64(1 << 30)
	if err := b.merge(ctx, n, id, &budget, nil); err != nil {
		t.Fatal(err)
	}
	first := objects()
	if len(first) >= 40 || len(slices.Compact(slices.Clone(first))) < 4 {
		t.Fatalf("the first merge merged nothing: %d ranges", len(first))
	}
	for range 3 {
		if err := b.merge(ctx, n, id, &budget, nil); err != nil {
			t.Fatal(err)
		}
	}
	if again := objects(); !slices.Equal(again, first) {
		t.Fatalf("small segments merged again: objects %v, then %v", first, again)
	}
}
