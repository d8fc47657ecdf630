package meta

import (
	"errors"
	"testing"
)

// A segment is recorded in object storage only while it lives, evicted
// only once recorded, and its key outlives it in TieredGarbage until
// ObjectsDeleted says the leader deleted it.
func TestTieredEvictAndTheirGarbage(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("s", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a"}})
	for i := uint64(0); i < 3; i++ {
		mustApply(t, s, commit(i+1, Append{Stream: id, Epoch: 0, First: i * 10, Range: rng(i*10, i*10+10, i+1)}))
	}
	if s.Objects[1].Segment {
		t.Fatal("a group-commit object counts as a segment")
	}
	mustApply(t, s, &Command{Op: OpReplace, Replace: &Replace{Stream: id, Object: 9, Size: 100,
		Old: []RangeRef{{Object: 1}, {Object: 2}}, New: []Range{*rng(0, 20, 9)}}})
	if !s.Objects[9].Segment {
		t.Fatal("a merge's object is not a segment")
	}

	// Evict before Tiered: skipped, the copies stay.
	mustApply(t, s, &Command{Op: OpEvict, Evict: &Evict{Objects: []uint64{9, 3}}})
	if s.Objects[9].Evicted || s.Objects[3].Evicted {
		t.Fatal("evicted an object object storage does not hold")
	}
	tiered := &Command{Op: OpTiered, Tiered: &Tiered{Object: 9, Key: "p/segments/9.obj", Size: 100, MD5: "00"}}
	if err, _ := s.Apply(&Command{Op: OpTiered, Tiered: &Tiered{Object: 9, Key: "k", Size: 99}}).(error); !errors.Is(err, BadCommand) {
		t.Fatalf("tiered with the wrong size: %v", err)
	}
	mustApply(t, s, tiered)
	mustApply(t, s, tiered) // idempotent: a second uploader
	if err, _ := s.Apply(&Command{Op: OpTiered, Tiered: &Tiered{Object: 9, Key: "other", Size: 100}}).(error); !errors.Is(err, BadCommand) {
		t.Fatalf("tiered under a second key: %v", err)
	}
	if err, _ := s.Apply(&Command{Op: OpTiered, Tiered: &Tiered{Object: 2, Key: "k2", Size: 100}}).(error); !errors.Is(err, ObjectGone) {
		t.Fatalf("tiered of a collected object: %v", err)
	}
	mustApply(t, s, &Command{Op: OpEvict, Evict: &Evict{Objects: []uint64{9}}})
	if !s.Objects[9].Evicted {
		t.Fatal("not evicted")
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	c := s.Clone()
	if c.Objects[9].Tier == s.Objects[9].Tier || *c.Objects[9].Tier != *s.Objects[9].Tier {
		t.Fatal("Clone shares or loses the tier copy")
	}

	// Deleted: the key waits in TieredGarbage until ObjectsDeleted.
	mustApply(t, s, &Command{Op: OpDelete, Delete: &Delete{Name: "s"}})
	if s.TieredGarbage[9] != "p/segments/9.obj" || !s.Garbage[9] || s.TieredGarbage[3] != "" {
		t.Fatalf("tiered garbage %v garbage %v", s.TieredGarbage, s.Garbage)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, &Command{Op: OpObjectsDeleted, ObjectsDeleted: &ObjectsDeleted{IDs: []uint64{3, 9}}})
	if len(s.TieredGarbage) != 0 || s.Garbage[9] {
		t.Fatalf("after ObjectsDeleted: %v %v", s.TieredGarbage, s.Garbage)
	}
}
