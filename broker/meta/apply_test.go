package meta

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/picomq/picomq/broker/stream"
)

func mustApply(t *testing.T, s *State, c *Command) any {
	t.Helper()
	res := s.Apply(c)
	if err, ok := res.(error); ok {
		t.Fatalf("%s: %v", c.Op, err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("after %s: %v", c.Op, err)
	}
	return res
}

func create(name string, partitions int) *Command {
	return &Command{Op: OpCreate, Create: &Create{Name: name, ContentType: "text/plain", Policy: stream.PolicyValue{Partitions: partitions}, Now: 1}}
}

func rng(first, next, obj uint64) *Range {
	return &Range{First: first, Next: next, Object: obj, Bytes: int64(next-first) * 10, Count: int64(next - first)}
}

func commit(obj uint64, apps ...Append) *Command {
	return &Command{Op: OpCommit, Commit: &Commit{Object: obj, Size: 100, Appends: apps, Now: 2}}
}

func TestCreateIsIdempotentAndLoserAdoptsWinner(t *testing.T) {
	t.Parallel()
	s := NewState()
	first := mustApply(t, s, create("a/b", 2)).(*CreateResult)
	if !first.Created || len(first.Entry.Streams) != 2 {
		t.Fatalf("first create = %+v", first)
	}
	second := mustApply(t, s, &Command{Op: OpCreate, Create: &Create{Name: "a/b", ContentType: "application/json", Now: 5}}).(*CreateResult)
	if second.Created || second.Entry.ContentType != "text/plain" || !reflect.DeepEqual(second.Entry.Streams, first.Entry.Streams) {
		t.Fatalf("racing create did not adopt the winner: %+v", second.Entry)
	}
	for _, id := range first.Entry.Streams {
		if in := s.Streams[id]; in.Epoch != -1 || in.Open {
			t.Fatalf("new internal stream %d: epoch %d open %v, want -1 closed", id, in.Epoch, in.Open)
		}
	}
}

func TestCreateRefusesBadPolicyByField(t *testing.T) {
	t.Parallel()
	s := NewState()
	res := s.Apply(&Command{Op: OpCreate, Create: &Create{Name: "x", Policy: stream.PolicyValue{RetainBytes: -1}}})
	err, _ := res.(error)
	if !errors.Is(err, stream.StreamMisconfigured) {
		t.Fatalf("got %v, want STREAM_MISCONFIGURED", res)
	}
	if len(s.Names) != 0 || len(s.Streams) != 0 {
		t.Fatal("a refused create wrote state")
	}
}

func TestEpochsFenceStaleWriters(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("s", 1)).(*CreateResult).Entry.Streams[0]
	e0 := mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a"}}).(*OpenResult).Internal.Epoch
	if e0 != 0 {
		t.Fatalf("first open epoch = %d, want 0", e0)
	}
	mustApply(t, s, commit(1, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 3, 1)}))
	e1 := mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "b"}}).(*OpenResult).Internal.Epoch
	if e1 != 1 {
		t.Fatalf("second open epoch = %d, want 1", e1)
	}
	res := mustApply(t, s, commit(2, Append{Stream: id, Epoch: 0, First: 3, Range: rng(3, 4, 2)})).(*CommitResult)
	if !errors.Is(res.Appends[0], StaleEpoch) {
		t.Fatalf("stale epoch commit = %v, want STALE_EPOCH", res.Appends[0])
	}
	if s.Streams[id].End != 3 || !s.Garbage[2] {
		t.Fatalf("stale commit landed: end %d, object 2 garbage %v", s.Streams[id].End, s.Garbage[2])
	}
	if err, _ := s.Apply(&Command{Op: OpClose, Close: &Close{Stream: id, Epoch: 0}}).(error); !errors.Is(err, StaleEpoch) {
		t.Fatalf("stale close = %v", err)
	}
	mustApply(t, s, &Command{Op: OpCloseMany, CloseMany: &CloseMany{Streams: []Close{{Stream: id, Epoch: 0}, {Stream: 999, Epoch: 0}, {Stream: id, Epoch: 1}}}})
	if in := s.Streams[id]; in.Open || in.Owner != "" {
		t.Fatalf("closeMany left the stream open: %+v", in)
	}
	res = mustApply(t, s, commit(3, Append{Stream: id, Epoch: 1, First: 3, Range: rng(3, 4, 3)})).(*CommitResult)
	if !errors.Is(res.Appends[0], StaleEpoch) {
		t.Fatalf("commit to a closed stream = %v, want STALE_EPOCH", res.Appends[0])
	}
}

func TestRejectedAppendRejectsTheRestOfItsPipeline(t *testing.T) {
	t.Parallel()
	s := NewState()
	ids := mustApply(t, s, create("s", 2)).(*CreateResult).Entry.Streams
	for _, id := range ids {
		mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a"}})
	}
	// First append of ids[0] skips offset 0: refused; the next, computed on
	// top of it, must be refused too; ids[1]'s append is independent.
	res := mustApply(t, s, commit(1,
		Append{Stream: ids[0], Epoch: 0, First: 1, Range: rng(1, 2, 1)},
		Append{Stream: ids[0], Epoch: 0, First: 2, Range: rng(2, 3, 1)},
		Append{Stream: ids[1], Epoch: 0, First: 0, Range: rng(0, 5, 1)},
	)).(*CommitResult)
	if !errors.Is(res.Appends[0], OffsetMismatch) || !errors.Is(res.Appends[1], OffsetMismatch) || res.Appends[2] != nil {
		t.Fatalf("results = %v", res.Appends)
	}
	if s.Streams[ids[0]].End != 0 || s.Streams[ids[1]].End != 5 || s.Objects[1].Refs != 1 {
		t.Fatalf("ends %d %d refs %d", s.Streams[ids[0]].End, s.Streams[ids[1]].End, s.Objects[1].Refs)
	}
}

func TestProducersAndStreamSeqAndClose(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("s", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a"}})
	end := uint64(0)
	obj := uint64(0)
	app := func(p *ProducerTuple, seq string, close bool) error {
		obj++
		res := mustApply(t, s, commit(obj, Append{Stream: id, Epoch: 0, First: end, Range: rng(end, end+1, obj), Producer: p, StreamSeq: seq, Close: close})).(*CommitResult)
		if res.Appends[0] == nil {
			end++
		}
		return res.Appends[0]
	}
	if err := app(&ProducerTuple{ID: "p", Epoch: 0, Seq: 1}, "", false); !errors.Is(err, ProducerSeqGap) {
		t.Fatalf("new producer at seq 1: %v", err)
	}
	if err := app(&ProducerTuple{ID: "p", Epoch: 0, Seq: 0}, "", false); err != nil {
		t.Fatal(err)
	}
	if err := app(&ProducerTuple{ID: "p", Epoch: 0, Seq: 2}, "", false); !errors.Is(err, ProducerSeqGap) {
		t.Fatalf("gap: %v", err)
	}
	if err := app(&ProducerTuple{ID: "p", Epoch: 2, Seq: 0}, "", false); err != nil {
		t.Fatalf("epoch bump: %v", err)
	}
	if err := app(&ProducerTuple{ID: "p", Epoch: 1, Seq: 1}, "", false); !errors.Is(err, ProducerFenced) {
		t.Fatalf("stale producer epoch: %v", err)
	}
	if err := app(nil, "b", false); err != nil {
		t.Fatal(err)
	}
	if err := app(nil, "a", false); !errors.Is(err, StreamSeqOrder) {
		t.Fatalf("Stream-Seq going back: %v", err)
	}
	if err := app(&ProducerTuple{ID: "p", Epoch: 2, Seq: 1}, "c", true); err != nil {
		t.Fatal(err)
	}
	e := s.Names["s"]
	if !e.Closed || e.ClosedBy == nil || *e.ClosedBy != (ProducerTuple{ID: "p", Epoch: 2, Seq: 1}) || e.Producers["p"] != (Producer{Epoch: 2, LastSeq: 1}) {
		t.Fatalf("entry after close = %+v", e)
	}
	if err := app(nil, "", false); !errors.Is(err, StreamClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

func TestTrimReplaceDeleteKeepRefcounts(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("s", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a"}})
	for i := uint64(0); i < 4; i++ {
		mustApply(t, s, commit(i+1, Append{Stream: id, Epoch: 0, First: i * 10, Range: rng(i*10, i*10+10, i+1)}))
	}
	// Merge ranges 2 and 3 into object 9.
	mustApply(t, s, &Command{Op: OpReplace, Replace: &Replace{Stream: id, Object: 9, Size: 1,
		Old: []RangeRef{{Object: 2}, {Object: 3}}, New: []Range{*rng(10, 30, 9)}}})
	if !s.Garbage[2] || !s.Garbage[3] || s.Objects[9].Refs != 1 {
		t.Fatalf("after merge: garbage %v objects %v", s.Garbage, s.Objects)
	}
	if err, _ := s.Apply(&Command{Op: OpReplace, Replace: &Replace{Stream: id, Object: 10, Old: []RangeRef{{Object: 2}}, New: []Range{*rng(10, 20, 10)}}}).(error); !errors.Is(err, RangesChanged) {
		t.Fatalf("replace of a gone range: %v", err)
	}
	// Trim inside the merged range keeps it; past it drops it.
	mustApply(t, s, &Command{Op: OpTrim, Trim: &Trim{Stream: id, Before: 15}})
	if s.Streams[id].Start != 15 || len(s.Streams[id].Ranges) != 2 || !s.Garbage[1] {
		t.Fatalf("after trim 15: %+v garbage %v", s.Streams[id], s.Garbage)
	}
	if err, _ := s.Apply(&Command{Op: OpTrim, Trim: &Trim{Stream: id, Before: 41}}).(error); !errors.Is(err, stream.OffsetAhead) {
		t.Fatalf("trim past end: %v", err)
	}
	mustApply(t, s, &Command{Op: OpTrim, Trim: &Trim{Stream: id, Before: 10}}) // below start: nothing
	if s.Streams[id].Start != 15 {
		t.Fatal("trim lowered start")
	}
	mustApply(t, s, &Command{Op: OpDelete, Delete: &Delete{Name: "s"}})
	if len(s.Objects) != 0 || !s.Garbage[9] || !s.Garbage[4] {
		t.Fatalf("after delete: objects %v garbage %v", s.Objects, s.Garbage)
	}
	mustApply(t, s, &Command{Op: OpObjectsDeleted, ObjectsDeleted: &ObjectsDeleted{IDs: []uint64{1, 2, 3, 4, 9}}})
	if len(s.Garbage) != 0 {
		t.Fatalf("garbage left: %v", s.Garbage)
	}
	// The name is reusable at once, with fresh ids.
	again := mustApply(t, s, create("s", 1)).(*CreateResult)
	if !again.Created || again.Entry.Streams[0] == id {
		t.Fatalf("recreate = %+v", again)
	}
}

func TestGroupOffsetsRideWithTheirAppend(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("s", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a"}})
	c := commit(1, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 2, 1)}, Append{Stream: id, Epoch: 5, First: 2, Range: rng(2, 3, 1)})
	c.Commit.Groups = []GroupOffset{{Stream: id, Group: "g", Next: 2, After: 0}, {Stream: id, Group: "h", Next: 1, After: 1}, {Stream: id, Group: "i", Next: 9, After: -1}}
	res := mustApply(t, s, c).(*CommitResult)
	if res.Groups[0] != nil || !errors.Is(res.Groups[1], StaleEpoch) || !errors.Is(res.Groups[2], stream.OffsetAhead) {
		t.Fatalf("group results %v", res.Groups)
	}
	// A group offset that cannot land refuses the append it rides with.
	c = commit(2, Append{Stream: id, Epoch: 0, First: 2, Range: rng(2, 3, 2)})
	c.Commit.Groups = []GroupOffset{{Stream: id, Group: "j", Next: 50, After: 0}}
	res = mustApply(t, s, c).(*CommitResult)
	if !errors.Is(res.Appends[0], stream.OffsetAhead) || s.Streams[id].End != 2 {
		t.Fatalf("append riding with a bad group offset: %v, end %d", res.Appends[0], s.Streams[id].End)
	}
	if g := s.Streams[id].Groups; g["g"] != 2 || len(g) != 1 {
		t.Fatalf("groups %v", g)
	}
}

func TestUpdatePolicyGrowsOnly(t *testing.T) {
	t.Parallel()
	s := NewState()
	mustApply(t, s, create("s", 2))
	e := mustApply(t, s, &Command{Op: OpUpdatePolicy, UpdatePolicy: &UpdatePolicy{Name: "s", Policy: stream.PolicyValue{Partitions: 4, RetainBytes: 100}}}).(*Entry)
	if len(e.Streams) != 4 || e.Policy.RetainBytes != 100 {
		t.Fatalf("grown entry %+v", e)
	}
	if err, _ := s.Apply(&Command{Op: OpUpdatePolicy, UpdatePolicy: &UpdatePolicy{Name: "s", Policy: stream.PolicyValue{Partitions: 3}}}).(error); !errors.Is(err, PartitionsShrink) {
		t.Fatalf("shrink: %v", err)
	}
}

// TestRandomCommandsKeepInvariants applies long random command sequences —
// valid, stale, out of order — and checks the invariants after each, then
// that replaying the encoded log on a fresh state, and restoring a
// snapshot, give the same state.
func TestRandomCommandsKeepInvariants(t *testing.T) {
	t.Parallel()
	accepted, refused := map[Op]int{}, map[Op]int{}
	var forked, softDeleted, cascaded int
	defer func() {
		// Forks must really be made, soft-deleted and collected in cascade.
		if forked == 0 || softDeleted == 0 || cascaded == 0 {
			t.Errorf("forks made %d, soft deletes %d, cascades %d: want all above 0", forked, softDeleted, cascaded)
		}
		// The generator must reach both outcomes of the interesting commands,
		// or the test proves nothing about them.
		for _, op := range []Op{OpCreate, OpDelete, OpOpen, OpClose, OpCommit, OpTrim, OpReplace, OpFork} {
			if accepted[op] == 0 {
				t.Errorf("no %s was accepted", op)
			}
		}
		for _, op := range []Op{OpClose, OpCommit, OpTrim, OpReplace, OpFork, OpDelete} {
			if refused[op] == 0 {
				t.Errorf("no %s was refused", op)
			}
		}
		t.Logf("accepted %v refused %v; forks made %d, soft deletes %d, cascades %d", accepted, refused, forked, softDeleted, cascaded)
	}()
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		s := NewState()
		var log [][]byte
		var obj uint64
		names := []string{"a", "b", "c", "d", "e"}
		for step := 0; step < 400; step++ {
			c := randomCommand(r, s, names, &obj)
			raw, err := Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, raw)
			before := s.Clone()
			res := s.Apply(c)
			if err := s.Check(); err != nil {
				t.Fatalf("seed %d step %d %s: %v", seed, step, raw, err)
			}
			if err, ok := res.(error); ok && !reflect.DeepEqual(normalize(before), normalize(s)) {
				t.Fatalf("seed %d step %d: refused command (%v) changed the state", seed, step, err)
			}
			if cr, ok := res.(*CreateResult); ok && cr.Created && c.Op == OpFork {
				forked++
			}
			if c.Op == OpDelete {
				if e, ok := s.Names[c.Delete.Name]; ok && e.Deleted && !before.Names[c.Delete.Name].Deleted {
					softDeleted++
				}
				if len(s.Names) < len(before.Names)-1 {
					cascaded++
				}
			}
			if cr, ok := res.(*CommitResult); ok {
				checkStaleNeverLanded(t, before, s, c.Commit, cr)
				for _, err := range cr.Appends {
					if err != nil {
						res = err
					}
				}
			}
			if _, ok := res.(error); ok {
				refused[c.Op]++
			} else {
				accepted[c.Op]++
			}
		}
		replayed := NewState()
		for _, raw := range log {
			var c Command
			if err := Decode(raw, &c); err != nil {
				t.Fatal(err)
			}
			replayed.Apply(&c)
		}
		if !reflect.DeepEqual(normalize(replayed), normalize(s)) {
			t.Fatalf("seed %d: replaying the log gave another state", seed)
		}
	}
}

// checkStaleNeverLanded: an append accepted by a commit had the epoch that
// was current before it, and continued the stream at its end.
func checkStaleNeverLanded(t *testing.T, before, after *State, c *Commit, res *CommitResult) {
	t.Helper()
	ends := map[uint64]uint64{}
	for id, in := range before.Streams {
		ends[id] = in.End
	}
	for i, a := range c.Appends {
		if res.Appends[i] != nil {
			continue
		}
		in := before.Streams[a.Stream]
		if in == nil || a.Epoch != in.Epoch || !in.Open {
			t.Fatalf("append %d accepted under epoch %d, current %v", i, a.Epoch, in)
		}
		if a.First != ends[a.Stream] {
			t.Fatalf("append %d accepted at %d, end was %d", i, a.First, ends[a.Stream])
		}
		if a.Range != nil {
			ends[a.Stream] = a.Range.Next
		}
	}
}

func normalize(s *State) *State {
	raw, _ := json.Marshal(s)
	out := NewState()
	_ = json.Unmarshal(raw, out)
	return out
}

func randomCommand(r *rand.Rand, s *State, names []string, obj *uint64) *Command {
	name := names[r.IntN(len(names))]
	e := s.Names[name]
	pick := func() (*Internal, bool) {
		if e == nil || len(e.Streams) == 0 {
			return nil, false
		}
		return s.Streams[e.Streams[r.IntN(len(e.Streams))]], true
	}
	switch r.IntN(14) {
	case 0:
		return create(name, 1+r.IntN(3))
	case 11:
		// A create with initial records, in an object of their own.
		*obj++
		c := create(name, 1+r.IntN(2))
		n := uint64(1 + r.IntN(4))
		c.Create.Object, c.Create.Size, c.Create.Initial = *obj, 100, []Range{*rng(0, n, *obj)}
		return c
	case 12, 13:
		// A fork of a random source at a random offset — past its end now
		// and then —, sometimes with initial records, sometimes naming a
		// stale incarnation.
		src := s.Names[names[r.IntN(len(names))]]
		f := &Fork{Name: name, Source: names[r.IntN(len(names))], ContentType: "text/plain", TTL: int64(r.IntN(3)), Now: 3}
		if src != nil {
			f.Source = src.Name
			f.SourceStreams = append([]uint64(nil), src.Streams...)
			if r.IntN(8) == 0 {
				f.SourceStreams[0]++
			}
			if in := s.Streams[src.Streams[0]]; in != nil {
				f.At = in.Start + uint64(r.IntN(int(in.End-in.Start)+2))
			}
		}
		if r.IntN(3) == 0 {
			*obj++
			f.Object, f.Size = *obj, 50
			f.Initial = []Range{*rng(f.At, f.At+1+uint64(r.IntN(3)), *obj)}
		}
		return &Command{Op: OpFork, Fork: f}
	case 1:
		if r.IntN(4) == 0 {
			return &Command{Op: OpDelete, Delete: &Delete{Name: name}}
		}
	case 2:
		if in, ok := pick(); ok {
			return &Command{Op: OpOpen, Open: &Open{Stream: in.ID, Owner: "n"}}
		}
	case 3:
		if in, ok := pick(); ok {
			return &Command{Op: OpClose, Close: &Close{Stream: in.ID, Epoch: in.Epoch - int64(r.IntN(2))}}
		}
	case 4, 5, 6:
		if in, ok := pick(); ok {
			*obj++
			var apps []Append
			end := in.End
			for k := 0; k < 1+r.IntN(3); k++ {
				epoch := in.Epoch
				if r.IntN(6) == 0 {
					epoch-- // stale
				}
				first := end
				if r.IntN(8) == 0 {
					first++ // gap
				}
				n := uint64(1 + r.IntN(5))
				rg := rng(first, first+n, *obj)
				rg.Pos = int64(k) * 100
				apps = append(apps, Append{Stream: in.ID, Epoch: epoch, First: first, Range: rg})
				end = first + n
			}
			return commit(*obj, apps...)
		}
	case 7:
		if in, ok := pick(); ok && in.End > 0 {
			return &Command{Op: OpTrim, Trim: &Trim{Stream: in.ID, Before: uint64(r.IntN(int(in.End) + 2))}}
		}
	case 8:
		if in, ok := pick(); ok && len(in.Ranges) >= 2 {
			i := r.IntN(len(in.Ranges) - 1)
			a, b := in.Ranges[i], in.Ranges[i+1]
			*obj++
			old := []RangeRef{{Object: a.Object, Pos: a.Pos}, {Object: b.Object, Pos: b.Pos}}
			if r.IntN(5) == 0 {
				old[0].Pos = 99 // gone
			}
			return &Command{Op: OpReplace, Replace: &Replace{Stream: in.ID, Object: *obj, Old: old, New: []Range{*rng(a.First, b.Next, *obj)}}}
		}
	case 9:
		// A rewrite of one range whose new ranges may overlap a neighbour
		// (refused) or fit (accepted).
		if in, ok := pick(); ok && len(in.Ranges) >= 1 {
			a := in.Ranges[r.IntN(len(in.Ranges))]
			*obj++
			lo := a.First
			if r.IntN(4) == 0 && lo > 0 {
				lo--
			}
			return &Command{Op: OpReplace, Replace: &Replace{Stream: in.ID, Object: *obj, Old: []RangeRef{{Object: a.Object, Pos: a.Pos}}, New: []Range{*rng(lo, a.Next, *obj)}}}
		}
	case 10:
		ids := make([]uint64, 0, len(s.Garbage))
		for id := range s.Garbage {
			ids = append(ids, id)
		}
		return &Command{Op: OpObjectsDeleted, ObjectsDeleted: &ObjectsDeleted{IDs: ids}}
	}
	return &Command{Op: OpTouch, Touch: &Touch{At: map[string]int64{name: int64(r.IntN(1000))}}}
}

// An open on the ensemble path commits its recovery with it: the fenced
// epoch's adopted appends land at that epoch before the epoch is raised,
// the new ensemble is recorded, and an open that read an older epoch than
// the current one (another open came first) changes nothing.
func TestOpenCommitsItsRecovery(t *testing.T) {
	t.Parallel()
	s := NewState()
	id := mustApply(t, s, create("s", 1)).(*CreateResult).Entry.Streams[0]
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "a", Ensemble: []string{"a", "b", "c"}}})
	mustApply(t, s, commit(1, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 3, 1)}))
	if in := s.Streams[id]; !slices.Equal(in.Ensemble, []string{"a", "b", "c"}) {
		t.Fatalf("ensemble %v", in.Ensemble)
	}
	zero := int64(0)
	recovered := []Commit{
		{Object: 2, Size: 100, Replicas: []string{"b", "c"}, Appends: []Append{{Stream: id, Epoch: 0, First: 3, Range: rng(3, 5, 2), Producer: &ProducerTuple{ID: "p", Epoch: 1, Seq: 0}}}},
		{Object: 3, Size: 100, Replicas: []string{"b"}, Appends: []Append{{Stream: id, Epoch: 0, First: 5, Range: rng(5, 6, 3)}}},
	}
	in := mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "b", Ensemble: []string{"b", "c", "d"}, Expect: &zero, Recovered: recovered}}).(*OpenResult).Internal
	if in.Epoch != 1 || in.End != 6 || in.Owner != "b" || !slices.Equal(in.Ensemble, []string{"b", "c", "d"}) || len(in.Ranges) != 3 {
		t.Fatalf("after the recovering open: %+v", in)
	}
	if p, ok := s.Names["s"].Producers["p"]; !ok || p.Epoch != 1 || p.LastSeq != 0 {
		t.Fatalf("the recovered producer state did not carry over: %+v", s.Names["s"].Producers)
	}
	if o := s.Objects[2]; o == nil || !slices.Equal(o.Replicas, []string{"b", "c"}) {
		t.Fatalf("the recovered object's replicas: %+v", o)
	}
	// A second opener that fenced epoch 0 too lost the race: refused,
	// nothing of its recovery applied.
	before := s.Streams[id].Clone()
	late := []Commit{{Object: 4, Size: 100, Appends: []Append{{Stream: id, Epoch: 0, First: 6, Range: rng(6, 7, 4)}}}}
	if err, _ := s.Apply(&Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "c", Expect: &zero, Recovered: late}}).(error); !errors.Is(err, StaleEpoch) {
		t.Fatalf("a late recovering open = %v, want STALE_EPOCH", err)
	}
	if after := s.Streams[id]; !reflect.DeepEqual(before, after.Clone()) {
		t.Fatalf("a refused open changed the stream: %+v", after)
	}
	// A recovered append of another epoch is refused whole.
	one := int64(1)
	bad := []Commit{{Object: 5, Size: 100, Appends: []Append{{Stream: id, Epoch: 0, First: 6, Range: rng(6, 7, 5)}}}}
	if err, _ := s.Apply(&Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "c", Expect: &one, Recovered: bad}}).(error); !errors.Is(err, BadCommand) {
		t.Fatalf("a recovered append of an older epoch = %v, want BAD_COMMAND", err)
	}
	if s.Streams[id].Epoch != 1 {
		t.Fatal("a refused open raised the epoch")
	}
	// A close of a dead process's streams keeps the ensemble (its tail is
	// there); the owner's drained close forgets it.
	mustApply(t, s, &Command{Op: OpCloseMany, CloseMany: &CloseMany{Streams: []Close{{Stream: id, Epoch: 1}}}})
	if in := s.Streams[id]; in.Open || len(in.Ensemble) != 3 {
		t.Fatalf("a plain close: %+v; want closed, ensemble kept", in)
	}
	mustApply(t, s, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "b", Ensemble: []string{"b", "c", "d"}}})
	mustApply(t, s, &Command{Op: OpCloseMany, CloseMany: &CloseMany{Streams: []Close{{Stream: id, Epoch: 2, Drained: true}}}})
	if in := s.Streams[id]; in.Open || len(in.Ensemble) != 0 {
		t.Fatalf("a drained close: %+v; want closed, ensemble forgotten", in)
	}
}
