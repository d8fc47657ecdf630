package meta

import (
	"bytes"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

type sink struct{ bytes.Buffer }

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { return nil }
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
	f := NewFSM()
	res := f.Apply(&raft.Log{Index: 1, Data: []byte("{")})
	if err, ok := res.(error); !ok || err == nil {
		t.Fatalf("got %v", res)
	}
	if f.Applied() != 1 {
		t.Fatal("applied index not advanced past a bad entry")
	}
}
