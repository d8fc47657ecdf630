package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMovesWaitForEveryMembersLevel: while a current member recorded a
// build from before the replicas command (level 0: a rolling upgrade
// half done), a move of replica sets is refused before anything is
// proposed — that member would refuse it and its state part from the
// others'. A removed member does not count; once the old member records
// the new level, the move goes through.
func TestMovesWaitForEveryMembersLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	for _, m := range []Member{{ID: "m-a", Node: "m-0", Level: Level}, {ID: "m-old", Node: "m-1"}, {ID: "m-gone", Node: "m-2"}} {
		if _, err := b.RecordMember(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.RemoveMember(ctx, "m-gone"); err != nil {
		t.Fatal(err)
	}
	err := b.MoveReplicas(ctx, 42, []string{"m-a"}, []string{"m-a", "m-old"})
	if !errors.Is(err, node.LevelTooLow) || !strings.Contains(err.Error(), "m-old") {
		t.Fatalf("a move with m-old at the base level: %v, want LEVEL_TOO_LOW naming m-old", err)
	}
	if _, err := b.RecordMember(ctx, Member{ID: "m-old", Node: "m-1", Level: Level}); err != nil {
		t.Fatal(err)
	}
	if err := b.CanMoveReplicas(); err != nil {
		t.Fatalf("every current member at this build's level: %v", err)
	}
	// Proposed now: refused by the state machine only because object 42
	// does not exist.
	if err := b.MoveReplicas(ctx, 42, []string{"m-a"}, []string{"m-a", "m-old"}); !errors.Is(err, node.ReplicasChanged) {
		t.Fatalf("a move once every member can apply it: %v, want REPLICAS_CHANGED (no such object)", err)
	}
	if m, _ := b.Member("m-old"); m.Level != Level {
		t.Errorf("m-old's level %d after it recorded %d", m.Level, Level)
	}
}

// TestMergesOfAPassAreOneCommand: a maintenance pass that merges several
// streams sends one replaceMany for all of them, and every stream reads
// as before from its one merged range. While a current member's build
// predates replaceMany (a rolling upgrade half done), each merge goes as a
// replace of its own, which that member can apply.
func TestMergesOfAPassAreOneCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 8
		c.InlineBytes = -1
		c.LogCommits = true
	})
	defer b.Close()
	count := func(op meta.Op) float64 {
		return testutil.ToFloat64(b.cfg.Metrics.MetadataCommands.WithLabelValues(string(op)))
	}
	names := []string{"s0", "s1", "s2", "s3", "s4"}
	fill := func() map[string]int {
		for _, name := range names {
			for i := 0; i < 10; i++ {
				if _, err := b.Append(ctx, name, recs(name), node.AppendOptions{Partition: -1}); err != nil {
					t.Fatal(err)
				}
			}
		}
		n := map[string]int{}
		for _, name := range names {
			n[name] = len(readAll(t, b, name, 0))
		}
		return n
	}
	ranges := func(name string) int {
		e, _ := b.Get(name)
		in, _ := b.fsm.Internal(e.Partitions[0])
		return len(in.Ranges)
	}
	for _, name := range names {
		mustCreate(t, b, name, node.CreateOptions{})
	}
	want := fill()
	many, one := count(meta.OpReplaceMany), count(meta.OpReplace)
	b.maintain(ctx)
	if got := count(meta.OpReplaceMany) - many; got != 1 || count(meta.OpReplace) != one {
		t.Fatalf("a pass merging %d streams: %v replaceMany and %v replace commands, want 1 and 0", len(names), got, count(meta.OpReplace)-one)
	}
	for _, name := range names {
		if got := ranges(name); got != 1 {
			t.Errorf("%s: %d ranges after the pass, want 1 merged", name, got)
		}
		if got := len(readAll(t, b, name, 0)); got != want[name] {
			t.Errorf("%s: %d records after the merge, want %d", name, got, want[name])
		}
	}

	// A member at the level before replaceMany: one replace a merge.
	if _, err := b.RecordMember(ctx, Member{ID: "m-old", Node: "m-1", Level: meta.LevelTier}); err != nil {
		t.Fatal(err)
	}
	want = fill()
	many, one = count(meta.OpReplaceMany), count(meta.OpReplace)
	b.maintain(ctx)
	if got := count(meta.OpReplace) - one; got != float64(len(names)) || count(meta.OpReplaceMany) != many {
		t.Fatalf("with a member at level %d: %v replace and %v replaceMany commands, want %d and 0", meta.LevelTier, got, count(meta.OpReplaceMany)-many, len(names))
	}
	for _, name := range names {
		if got := len(readAll(t, b, name, 0)); got != want[name] {
			t.Errorf("%s: %d records after the merge, want %d", name, got, want[name])
		}
	}
}

// TestMergeBatchSentHoweverThePassEnds: merges a pass wrote go in their
// command even when the pass ended before it sent them (out of time, or
// the broker stopping: the command gets a moment of its own), and a batch
// begun while every member could apply replaceMany is sent one replace a
// command if a member recorded an older build meanwhile (a rollback).
func TestMergeBatchSentHoweverThePassEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 4
		c.InlineBytes = -1
		c.LogCommits = true
	})
	defer b.Close()
	count := func(op meta.Op) float64 {
		return testutil.ToFloat64(b.cfg.Metrics.MetadataCommands.WithLabelValues(string(op)))
	}
	ranges := func(name string) int {
		e, _ := b.Get(name)
		in, _ := b.fsm.Internal(e.Partitions[0])
		return len(in.Ranges)
	}
	// batched merges a and b into a batch, unsent.
	batched := func(names ...string) *mergeBatch {
		batch := b.newMergeBatch()
		if batch == nil {
			t.Fatal("no batch: every member is at this build's level")
		}
		for _, name := range names {
			if _, err := b.Get(name); err != nil {
				mustCreate(t, b, name, node.CreateOptions{})
			}
			for range 6 {
				if _, err := b.Append(ctx, name, recs(name), node.AppendOptions{Partition: -1}); err != nil {
					t.Fatal(err)
				}
			}
			n, err := b.stream(name)
			if err != nil {
				t.Fatal(err)
			}
			budget := int64(1 << 30)
			if err := b.merge(ctx, n, mustGet(t, b, name).Partitions[0], &budget, batch); err != nil {
				t.Fatal(err)
			}
		}
		if len(batch.replaces) != len(names) {
			t.Fatalf("%d merges batched, want %d", len(batch.replaces), len(names))
		}
		return batch
	}

	batch := batched("a", "b")
	if ranges("a") == 1 || ranges("b") == 1 {
		t.Fatal("a batched merge applied before its batch was sent")
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	many := count(meta.OpReplaceMany)
	b.sendMerges(ended, batch)
	if count(meta.OpReplaceMany)-many != 1 || ranges("a") != 1 || ranges("b") != 1 {
		t.Fatalf("a batch sent after its pass ended: %v replaceMany commands, ranges a %d b %d; want 1, 1, 1", count(meta.OpReplaceMany)-many, ranges("a"), ranges("b"))
	}

	batch = batched("c", "d")
	if _, err := b.RecordMember(ctx, Member{ID: "m-old", Node: "m-1", Level: meta.LevelTier}); err != nil {
		t.Fatal(err)
	}
	many, one := count(meta.OpReplaceMany), count(meta.OpReplace)
	b.sendMerges(ctx, batch)
	if count(meta.OpReplaceMany) != many || count(meta.OpReplace)-one != 2 || ranges("c") != 1 || ranges("d") != 1 {
		t.Fatalf("a batch sent after a member recorded level %d: %v replaceMany and %v replace commands; want 0 and 2, every merge applied", meta.LevelTier, count(meta.OpReplaceMany)-many, count(meta.OpReplace)-one)
	}
}
