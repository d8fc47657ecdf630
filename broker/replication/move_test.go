package replication

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// corruptLastByte flips the last byte of a file (a frame's payload).
func corruptLastByte(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, st.Size()-1); err != nil {
		t.Fatal(err)
	}
}

// TestCopyBetween: a copy made from one member's file to a third member
// (a repair or a drain) is identical and every frame reads back there; a
// source without the object answers REPLICA_NOT_FOUND, and a corrupt
// source's bytes are refused by the receiver, which keeps nothing.
func TestCopyBetween(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 2})
	writer, third := c.members[0], c.members[2]
	c.setLive(third.id, false) // the object's set: the writer and member 2
	w, frames, err := writeObject(t, writer.placement(), payload(1, 5000), payload(2, 70000))
	if err != nil {
		t.Fatal(err)
	}
	id := w.ID()
	holders := w.Replicas()
	want := writer.fileOf(t, id)
	c.setLive(third.id, true)

	from := c.byID(holders[1])
	if err := writer.repl.CopyBetween(context.Background(), id, Peer{ID: from.id, Addr: from.id}, Peer{ID: third.id, Addr: third.id}); err != nil {
		t.Fatal(err)
	}
	c.checkCopies(t, id, want, append(holders, third.id), frames)

	// No such object at the source.
	err = writer.repl.CopyBetween(context.Background(), id+1000, Peer{ID: from.id, Addr: from.id}, Peer{ID: third.id, Addr: third.id})
	if !errors.Is(err, ReplicaNotFound) {
		t.Errorf("copy of an object the source lacks: %v, want REPLICA_NOT_FOUND", err)
	}

	// A source whose file went bad: the receiver checks and refuses it.
	c.setLive(third.id, false)
	w2, _, err := writeObject(t, writer.placement(), payload(3, 9000))
	if err != nil {
		t.Fatal(err)
	}
	c.setLive(third.id, true)
	corruptLastByte(t, filepath.Join(writer.store.Dir(), fmt.Sprintf("%016x.obj", w2.ID())))
	err = writer.repl.CopyBetween(context.Background(), w2.ID(), Peer{ID: writer.id, Addr: writer.id}, Peer{ID: third.id, Addr: third.id})
	if err == nil {
		t.Fatal("a corrupt source's bytes were taken")
	}
	if got := third.fileOf(t, w2.ID()); got != nil {
		t.Errorf("the receiver kept %d bytes of a corrupt copy", len(got))
	}
}
