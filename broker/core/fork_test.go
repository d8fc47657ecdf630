package core

import (
	"context"
	"errors"
	"testing"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

func objectFiles(t *testing.T, b *Broker) int {
	t.Helper()
	infos, err := b.objs.List()
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

func payloads(es []stream.EntryValue) string {
	var s string
	for _, e := range es {
		s += string(e.Record.Payload)
	}
	return s
}

// TestForkSharesObjectsAndCascades: a fork writes no object of its own
// (its records below the fork point are the source's), reads the source's
// records below the fork point and its own after; a soft-deleted source
// keeps only what the fork shares, and deleting the fork collects it all —
// entries and object files — across a restart too.
func TestForkSharesObjectsAndCascades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir)
	mustCreate(t, b, "src", node.CreateOptions{ContentType: "text/plain", Initial: recs("a")})
	for _, v := range []string{"b", "c"} {
		if _, err := b.Append(ctx, "src", recs(v), node.AppendOptions{Partition: 0}); err != nil {
			t.Fatal(err)
		}
	}
	files := objectFiles(t, b)

	if _, _, err := b.Fork(ctx, "f", node.ForkOptions{Source: "src", At: 4}); !errors.Is(err, stream.OffsetAhead) {
		t.Fatalf("fork past the end: %v", err)
	}
	e, created, err := b.Fork(ctx, "f", node.ForkOptions{Source: "src", At: 2, ContentType: "text/plain"})
	if err != nil || !created || e.ForkOf != "src" {
		t.Fatalf("fork: %+v %v %v", e, created, err)
	}
	if n := objectFiles(t, b); n != files {
		t.Fatalf("a fork wrote objects: %d files, %d before", n, files)
	}
	if _, err := b.Append(ctx, "f", recs("X"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "src", recs("d"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatal(err)
	}
	if got := payloads(readAll(t, b, "f", 0)); got != "abX" {
		t.Fatalf("fork reads %q", got)
	}
	if got := payloads(readAll(t, b, "src", 0)); got != "abcd" {
		t.Fatalf("source reads %q", got)
	}

	if err := b.Delete(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("src"); !errors.Is(err, meta.StreamGone) {
		t.Fatalf("soft-deleted source: %v", err)
	}
	if _, _, err := b.Create(ctx, "src", node.CreateOptions{}); !errors.Is(err, meta.StreamGone) {
		t.Fatalf("create over a soft-deleted name: %v", err)
	}
	if _, err := b.Append(ctx, "src", recs("e"), node.AppendOptions{Partition: 0}); !errors.Is(err, meta.StreamGone) {
		t.Fatalf("append to a soft-deleted stream: %v", err)
	}
	if err := b.collectGarbage(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	if got := payloads(readAll(t, b, "f", 0)); got != "abX" {
		t.Fatalf("fork after its source's soft delete reads %q", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openTest(t, dir)
	defer b.Close()
	if got := payloads(readAll(t, b, "f", 0)); got != "abX" {
		t.Fatalf("fork after restart reads %q", got)
	}
	if err := b.Delete(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("src"); !errors.Is(err, meta.StreamNotFound) {
		t.Fatalf("source after its last fork went: %v", err)
	}
	if err := b.collectGarbage(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	if n := objectFiles(t, b); n != 0 {
		t.Fatalf("%d object files left after the cascade", n)
	}
	if err := b.fsm.State().Check(); err != nil {
		t.Fatal(err)
	}
}

// TestCreateWithInitialRecordsIsOneCommand: the records of a create land
// with it; a create that loses to an existing name leaves them as garbage.
func TestCreateWithInitialRecordsIsOneCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	// Commands, not log indexes: raft adds entries of its own.
	applied := b.fsm.Commands()
	mustCreate(t, b, "s", node.CreateOptions{Closed: true, Initial: recs("x", "y")})
	if after := b.fsm.Commands(); after != applied+1 {
		t.Fatalf("create with records took %d commands", after-applied)
	}
	e, _ := b.Get("s")
	if !e.Closed || payloads(readAll(t, b, "s", 0)) != "xy" {
		t.Fatalf("created %+v", e)
	}
	if _, err := b.Append(ctx, "s", recs("z"), node.AppendOptions{Partition: 0}); !errors.Is(err, meta.StreamClosed) {
		t.Fatalf("append to a stream created closed: %v", err)
	}
}
