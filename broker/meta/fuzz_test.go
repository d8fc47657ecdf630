package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// snapshotOf is the snapshot a machine that applied cmds persists.
func snapshotOf(cmds ...*Command) []byte {
	f := NewFSM()
	for i, c := range cmds {
		raw, err := Encode(c)
		if err != nil {
			panic(err)
		}
		f.Apply(&raft.Log{Index: uint64(i + 1), Data: raw})
	}
	snap, _ := f.Snapshot()
	var s sink
	if err := snap.Persist(&s); err != nil {
		panic(err)
	}
	return s.Bytes()
}

// FuzzRestore: the metadata state machine's snapshot restore refuses a
// corrupt or truncated snapshot with a coded error (BAD_COMMAND), never
// panics, and never leaves the machine half restored: refused, it holds
// the state it had; restored, the state passes Check, copies without a
// panic, and snapshots and restores back to itself.
func FuzzRestore(f *testing.F) {
	full := snapshotOf(create("a", 2),
		&Command{Op: OpOpen, Open: &Open{Stream: 1, Owner: "n"}},
		commit(7, Append{Stream: 1, Epoch: 0, First: 0, Range: rng(0, 4, 7), Producer: &ProducerTuple{ID: "p"}}),
		&Command{Op: OpGroup, Group: &GroupOffset{Stream: 1, Group: "g", Next: 3}},
		create("b", 1))
	f.Add(full)
	f.Add(full[:len(full)/2])
	f.Add(append(append([]byte{}, full...), full...))
	f.Add(snapshotOf())
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"objects":{"1":null}}`))
	f.Add([]byte(`{"streams":{"1":{"id":1,"partition":-1}}}`))
	prior := snapshotOf(create("prior", 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewFSM()
		if err := m.Restore(io.NopCloser(bytes.NewReader(prior))); err != nil {
			t.Fatal(err)
		}
		before := normalize(m.State())
		err := m.Restore(io.NopCloser(bytes.NewReader(data)))
		if err != nil {
			if !errors.Is(err, BadCommand) {
				t.Fatalf("uncoded refusal: %v", err)
			}
			if !reflect.DeepEqual(before, normalize(m.State())) {
				t.Fatalf("a refused snapshot changed the state: %v", err)
			}
			return
		}
		s := m.State()
		if err := s.Check(); err != nil {
			t.Fatalf("restored a state that breaks an invariant: %v", err)
		}
		snap, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var out sink
		if err := snap.Persist(&out); err != nil {
			t.Fatal(err)
		}
		back := NewFSM()
		if err := back.Restore(io.NopCloser(&out)); err != nil {
			t.Fatalf("a restored state's own snapshot is refused: %v", err)
		}
		if a, b := normalize(s), normalize(back.State()); !reflect.DeepEqual(a, b) {
			ra, _ := json.Marshal(a)
			rb, _ := json.Marshal(b)
			t.Fatalf("snapshot round trip differs:\n%s\n%s", ra, rb)
		}
	})
}
