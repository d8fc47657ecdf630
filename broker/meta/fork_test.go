package meta

import (
	"errors"
	"testing"

	"github.com/picomq/picomq/broker/stream"
)

func forkCmd(name, source string, at uint64) *Command {
	return &Command{Op: OpFork, Fork: &Fork{Name: name, Source: source, At: at, ContentType: "text/plain", Now: 9}}
}

// TestForkSharesRangesAndCascades: a fork shares its source's objects below
// the fork point (references, no copy), cuts the straddling range, does not
// see later source appends; deleting the source only soft-deletes it while
// the fork lives, and deleting the fork then collects both.
func TestForkSharesRangesAndCascades(t *testing.T) {
	t.Parallel()
	s := NewState()
	c := create("src", 1)
	c.Create.TTL, c.Create.Closed = 7, false
	src := mustApply(t, s, c).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: src, Owner: "a"}})
	mustApply(t, s, commit(1, Append{Stream: src, Epoch: 0, First: 0, Range: rng(0, 2, 1), Producer: &ProducerTuple{ID: "p", Seq: 0}}))
	mustApply(t, s, commit(2, Append{Stream: src, Epoch: 0, First: 2, Range: rng(2, 5, 2), Close: true}))

	// Past the end: refused, nothing written.
	if err, _ := s.Apply(forkCmd("f", "src", 6)).(error); !errors.Is(err, stream.OffsetAhead) {
		t.Fatalf("fork past the end: %v", err)
	}
	res := mustApply(t, s, forkCmd("f", "src", 3)).(*CreateResult)
	f := res.Entry
	if !res.Created || f.ForkOf != "src" || f.ForkOffset != 3 || f.TTL != 7 || f.Closed || len(f.Producers) != 0 {
		t.Fatalf("fork entry %+v", f)
	}
	in := s.Streams[f.Streams[0]]
	if in.End != 3 || len(in.Ranges) != 2 || in.Ranges[1].Next != 3 || in.Ranges[1].Object != 2 {
		t.Fatalf("fork stream %+v", in)
	}
	if s.Objects[1].Refs != 2 || s.Objects[2].Refs != 2 || s.Names["src"].Forks != 1 {
		t.Fatalf("refs %d %d forks %d", s.Objects[1].Refs, s.Objects[2].Refs, s.Names["src"].Forks)
	}
	// The fork appends on its own, from 3; the source's records past 3 are
	// not its.
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: in.ID, Owner: "a"}})
	if r := mustApply(t, s, commit(3, Append{Stream: in.ID, Epoch: 0, First: 3, Range: rng(3, 4, 3)})).(*CommitResult); r.Appends[0] != nil {
		t.Fatal(r.Appends[0])
	}
	// A fork of a fork, with a materialized first record.
	ff := &Command{Op: OpFork, Fork: &Fork{Name: "ff", Source: "f", At: 4, Object: 4, Size: 10, Initial: []Range{*rng(4, 5, 4)}, Now: 10}}
	ffe := mustApply(t, s, ff).(*CreateResult).Entry
	if got := s.Streams[ffe.Streams[0]]; got.End != 5 || len(got.Ranges) != 4 || s.Objects[3].Refs != 2 || s.Objects[4].Refs != 1 {
		t.Fatalf("fork of a fork %+v", got)
	}

	// Delete the source: soft, its own ranges released, the forks' kept.
	mustApply(t, s, &Command{Op: OpDelete, Delete: &Delete{Name: "src"}})
	if e := s.Names["src"]; e == nil || !e.Deleted || len(s.Streams[src].Ranges) != 0 {
		t.Fatalf("soft-deleted source %+v", e)
	}
	if s.Objects[1].Refs != 2 || s.Objects[2].Refs != 2 {
		t.Fatalf("refs after soft delete %d %d", s.Objects[1].Refs, s.Objects[2].Refs)
	}
	for _, cmd := range []*Command{
		{Op: OpDelete, Delete: &Delete{Name: "src"}},
		forkCmd("g", "src", 0),
		commit(5, Append{Stream: src, Epoch: 0, First: 5, Range: rng(5, 6, 5)}),
	} {
		res := s.Apply(cmd)
		if cr, ok := res.(*CommitResult); ok {
			res = cr.Appends[0]
		}
		if err, _ := res.(error); !errors.Is(err, StreamGone) {
			t.Fatalf("%s on a soft-deleted stream: %v", cmd.Op, res)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// Delete the middle fork (soft: ff lives), then ff: everything goes.
	mustApply(t, s, &Command{Op: OpDelete, Delete: &Delete{Name: "f"}})
	if !s.Names["f"].Deleted {
		t.Fatal("middle fork not soft-deleted")
	}
	mustApply(t, s, &Command{Op: OpDelete, Delete: &Delete{Name: "ff"}})
	if len(s.Names) != 0 || len(s.Streams) != 0 || len(s.Objects) != 0 {
		t.Fatalf("cascade left names %v streams %v objects %v", s.Names, s.Streams, s.Objects)
	}
	for _, id := range []uint64{1, 2, 3, 4, 5} {
		if !s.Garbage[id] {
			t.Fatalf("object %d not garbage", id)
		}
	}
	// The names are free again.
	if !mustApply(t, s, create("src", 1)).(*CreateResult).Created {
		t.Fatal("source name not reusable")
	}
}

// TestCreateWithInitialRecords: the records of a create land with it, or
// — the name taken — go to garbage.
func TestCreateWithInitialRecords(t *testing.T) {
	t.Parallel()
	s := NewState()
	c := create("s", 1)
	c.Create.Object, c.Create.Size, c.Create.Initial, c.Create.Closed = 1, 10, []Range{*rng(0, 1, 1)}, true
	e := mustApply(t, s, c).(*CreateResult).Entry
	if in := s.Streams[e.Streams[0]]; in.End != 1 || s.Objects[1].Refs != 1 || !e.Closed {
		t.Fatalf("created %+v / %+v", e, in)
	}
	c = create("s", 1)
	c.Create.Object, c.Create.Initial = 2, []Range{*rng(0, 1, 2)}
	if mustApply(t, s, c).(*CreateResult).Created || !s.Garbage[2] {
		t.Fatal("a losing create's records were not sent to garbage")
	}
	bad := create("t", 1)
	bad.Create.Object, bad.Create.Initial = 3, []Range{*rng(1, 2, 3)}
	if err, _ := s.Apply(bad).(error); !errors.Is(err, BadCommand) || s.Names["t"] != nil {
		t.Fatalf("initial records not from 0: %v", err)
	}
}
