package meta

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

type sink struct {
	bytes.Buffer
	canceled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.canceled = true; return nil }
func (s *sink) Close() error  { return nil }

func applyLog(t *testing.T, f *FSM, i uint64, c *Command) any {
	t.Helper()
	raw, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Index: i, Data: raw})
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	f := NewFSM()
	applyLog(t, f, 1, create("a", 2))
	id := f.State().Names["a"].Streams[1]
	applyLog(t, f, 2, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "n"}})
	applyLog(t, f, 3, commit(7, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 4, 7), Producer: &ProducerTuple{ID: "p"}}))
	applyLog(t, f, 4, &Command{Op: OpGroup, Group: &GroupOffset{Stream: id, Group: "g", Next: 3}})
	if f.Applied() != 4 {
		t.Fatalf("applied = %d", f.Applied())
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(&s)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(f.State()), normalize(g.State())) {
		t.Fatalf("restored state differs:\n%+v\n%+v", f.State(), g.State())
	}
	if err := g.State().Check(); err != nil {
		t.Fatal(err)
	}
	// The restored machine goes on applying from where the snapshot was.
	res := applyLog(t, g, 5, commit(8, Append{Stream: id, Epoch: 0, First: 4, Range: rng(4, 5, 8)})).(*CommitResult)
	if res.Appends[0] != nil {
		t.Fatal(res.Appends[0])
	}
}

func TestUndecodableEntryIsRefusedNotFatal(t *testing.T) {
	t.Parallel()
	f := NewFSM()
	res := f.Apply(&raft.Log{Index: 1, Data: []byte("{")})
	if err, ok := res.(error); !ok || err == nil {
		t.Fatalf("got %v", res)
	}
	if f.Applied() != 1 {
		t.Fatal("applied index not advanced past a bad entry")
	}
}

// TestHooks: Applied sees every decoded command with its result, in order;
// Snapshot's function runs before the state is written, and its failure
// cancels the snapshot.
func TestHooks(t *testing.T) {
	t.Parallel()
	f := NewFSM()
	var seen []Op
	var results []any
	var beforeErr error
	ran := 0
	f.SetHooks(Hooks{
		Applied: func(c *Command, res any) { seen = append(seen, c.Op); results = append(results, res) },
		Snapshot: func(s *State) func() error {
			if s.Names["a"] == nil {
				t.Error("the Snapshot hook was not given the snapshot's state")
			}
			return func() error { ran++; return beforeErr }
		},
	})
	applyLog(t, f, 1, create("a", 1))
	id := f.State().Names["a"].Streams[0]
	applyLog(t, f, 2, &Command{Op: OpOpen, Open: &Open{Stream: id, Owner: "n"}})
	c := commit(7, Append{Stream: id, Epoch: 0, First: 0, Range: rng(0, 4, 7)})
	c.Commit.Frames = []byte("frames")
	res := applyLog(t, f, 3, c)
	if !reflect.DeepEqual(seen, []Op{OpCreate, OpOpen, OpCommit}) || results[2] != res {
		t.Fatalf("Applied saw %v, last result %v (want %v)", seen, results[len(results)-1], res)
	}

	beforeErr = errors.New("objects not synced")
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); !errors.Is(err, beforeErr) || !s.canceled || s.Len() != 0 {
		t.Fatalf("Persist = %v, canceled %v, %d bytes written; want the hook's error, canceled, nothing", err, s.canceled, s.Len())
	}
	beforeErr = nil
	snap, _ = f.Snapshot()
	s = sink{}
	if err := snap.Persist(&s); err != nil || s.canceled || s.Len() == 0 || ran != 2 {
		t.Fatalf("Persist = %v, canceled %v, %d bytes, hook ran %d times", err, s.canceled, s.Len(), ran)
	}
}
