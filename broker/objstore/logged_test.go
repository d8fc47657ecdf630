package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/picomq/picomq/internal/testwait"
)

// heldFrames builds the frames of an object holding payloads, and their
// positions and lengths.
func heldFrames(payloads ...string) (frames []byte, pos, n []int64) {
	for _, p := range payloads {
		at := int64(HeaderSize + len(frames))
		frames = AppendFrame(frames, []byte(p))
		pos = append(pos, at)
		n = append(n, int64(HeaderSize+len(frames))-at)
	}
	return frames, pos, n
}

// TestHeldObjectIsReadFromMemory: a held object has no file; ReadFrame and
// ReadFrames serve it, with the checks a file's frames get, and Remove
// forgets it without touching the directory.
func TestHeldObjectIsReadFromMemory(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{})
	frames, pos, n := heldFrames("first", "second")
	id, err := s.Hold(frames)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Held(id) || s.HeldBytes() != int64(len(frames)) {
		t.Fatalf("held %v, %d bytes; want true, %d", s.Held(id), s.HeldBytes(), len(frames))
	}
	if _, err := os.Stat(s.path(id)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a held object has a file: %v", err)
	}
	for i, want := range []string{"first", "second"} {
		if got, err := s.ReadFrame(id, pos[i], n[i]); err != nil || string(got) != want {
			t.Fatalf("frame %d: %q, %v", i, got, err)
		}
	}
	got, err := s.ReadFrames(id, pos[0], n)
	if err != nil || len(got) != 2 || string(got[0]) != "first" || string(got[1]) != "second" {
		t.Fatalf("ReadFrames: %q, %v", got, err)
	}
	// A frame past the object's end, or not where a frame starts, is
	// corrupt, as in a file.
	if _, err := s.ReadFrame(id, pos[1], n[1]+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("frame past the end: %v, want ErrCorrupt", err)
	}
	if _, err := s.ReadFrame(id, pos[0]+1, n[0]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("misplaced frame: %v, want ErrCorrupt", err)
	}
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	if s.Held(id) || s.HeldBytes() != 0 {
		t.Fatalf("removed object still held (%d bytes)", s.HeldBytes())
	}
	if _, err := s.ReadFrame(id, pos[0], n[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of a removed held object: %v, want not exist", err)
	}
	if infos, err := s.List(); err != nil || len(infos) != 0 {
		t.Fatalf("List: %v, %v", infos, err)
	}
}

// TestSpillWritesWhatEnsureObjectRestores: a spilled object's file is
// exactly what EnsureObject, the log's replay, writes: a replay finding it
// intact leaves it alone, and writes a torn or missing one back byte for
// byte.
func TestSpillWritesWhatEnsureObjectRestores(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{})
	frames, pos, n := heldFrames("first", "second")
	id, err := s.Hold(frames)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Hold(AppendFrame(nil, []byte("younger")))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Spill([]uint64{id}); err != nil {
		t.Fatal(err)
	}
	if s.Held(id) || !s.Held(other) {
		t.Fatalf("after Spill(%d): held %v and %v", id, s.Held(id), s.Held(other))
	}
	written, err := os.ReadFile(s.path(id))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadFrame(id, pos[1], n[1]); err != nil || string(got) != "second" {
		t.Fatalf("read of the spilled object: %q, %v", got, err)
	}

	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(s.path(id), past, past); err != nil {
		t.Fatal(err)
	}
	if err := EnsureObject(s.Dir(), id, frames); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.path(id)); err != nil || !fi.ModTime().Equal(past) {
		t.Fatalf("the replay wrote a spilled object again (%v, %v)", fi.ModTime(), err)
	}
	for _, damage := range []func(string) error{
		func(p string) error { return os.Truncate(p, HeaderSize+3) },
		os.Remove,
	} {
		if err := damage(s.path(id)); err != nil {
			t.Fatal(err)
		}
		if err := EnsureObject(s.Dir(), id, frames); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(s.path(id)); err != nil || !bytes.Equal(got, written) {
			t.Fatalf("rewritten object differs from the spilled one (%v)", err)
		}
	}

	// SpillOlder leaves what is younger, then takes it; SyncObjects skips
	// what was collected meanwhile.
	if err := s.SpillOlder(time.Hour); err != nil || !s.Held(other) {
		t.Fatalf("SpillOlder(1h) took a young object (%v)", err)
	}
	if err := s.SpillOlder(0); err != nil || s.Held(other) || s.HeldBytes() != 0 {
		t.Fatalf("SpillOlder(0): held %v, %d bytes, %v", s.Held(other), s.HeldBytes(), err)
	}
	if err := SyncObjects(s.Dir(), []uint64{id, other, other + 1000}); err != nil {
		t.Fatal(err)
	}
}

// TestHeldBytesAreBounded: past MaxHeldBytes the oldest held objects are
// written to files in the background until half the bound is left.
func TestHeldBytesAreBounded(t *testing.T) {
	t.Parallel()
	const limit = 8 << 10
	s := openInternal(t, Options{MaxHeldBytes: limit})
	frames := AppendFrame(nil, make([]byte, 1000))
	var ids []uint64
	for range 3 * limit / len(frames) {
		id, err := s.Hold(frames)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	testwait.Until(t, 10*time.Second, fmt.Sprintf("at most %d bytes are held (bound %d)", limit/2, limit), func() bool {
		return s.HeldBytes() <= limit/2
	})
	// Oldest first: the first is a file, the last still held.
	if s.Held(ids[0]) || !s.Held(ids[len(ids)-1]) {
		t.Fatalf("spilled out of order: first held %v, last held %v", s.Held(ids[0]), s.Held(ids[len(ids)-1]))
	}
	if _, err := os.Stat(s.path(ids[0])); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got, err := s.ReadFrame(id, HeaderSize, int64(len(frames))); err != nil || len(got) != 1000 {
			t.Fatalf("object %d: %d bytes, %v", id, len(got), err)
		}
	}
}

// TestCloseForgetsHeldObjects: what is held is the log's to restore; Close
// writes nothing, and Hold after it fails.
func TestCloseForgetsHeldObjects(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{})
	id, err := s.Hold(AppendFrame(nil, []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.path(id)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Close wrote a held object: %v", err)
	}
	if _, err := s.Hold(AppendFrame(nil, []byte("y"))); !errors.Is(err, ErrClosed) {
		t.Fatalf("Hold after Close: %v, want ErrClosed", err)
	}
}

// TestRestoreHoldsReplayedObjects: Restore holds a replayed object again
// under its own id; an intact file of it is kept (not held), a damaged one
// removed (held, and a later Spill writes it whole); ids the store never
// handed out, or pool files, are refused.
func TestRestoreHoldsReplayedObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/objects"
	frames, pos, n := heldFrames("one", "two")
	// Objects 1-3 were committed before the store opens on MinNextID 4.
	if err := PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := writeObjectFile(fileNameIn(dir, 2), 2, frames, os.O_EXCL, "test"); err != nil {
		t.Fatal(err)
	}
	if err := writeObjectFile(fileNameIn(dir, 3), 3, frames, os.O_EXCL, "test"); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(fileNameIn(dir, 3), HeaderSize+3); err != nil { // torn
		t.Fatal(err)
	}
	intact, err := os.Stat(fileNameIn(dir, 2))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{MinNextID: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, wantHeld := range map[uint64]bool{1: true, 2: false, 3: true} {
		held, err := s.Restore(id, frames)
		if err != nil || held != wantHeld || s.Held(id) != wantHeld {
			t.Fatalf("restore %d: held %v (%v), %v; want held %v", id, held, s.Held(id), err, wantHeld)
		}
		got, err := s.ReadFrames(id, pos[0], n)
		if err != nil || string(got[0]) != "one" || string(got[1]) != "two" {
			t.Fatalf("object %d reads %q, %v", id, got, err)
		}
	}
	if again, err := os.Stat(fileNameIn(dir, 2)); err != nil || !again.ModTime().Equal(intact.ModTime()) {
		t.Fatalf("intact file of object 2 rewritten or gone: %v", err)
	}
	if _, err := os.Stat(fileNameIn(dir, 3)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("torn file of object 3 kept: %v", err)
	}
	if s.HeldBytes() != int64(2*len(frames)) {
		t.Fatalf("%d bytes held, want %d", s.HeldBytes(), 2*len(frames))
	}
	if err := s.Spill([]uint64{1, 3}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 3} {
		if !sameObject(fileNameIn(dir, id), id, frames) || s.Held(id) {
			t.Fatalf("object %d after the spill: held %v, file whole %v", id, s.Held(id), sameObject(fileNameIn(dir, id), id, frames))
		}
	}
	s.mu.Lock()
	var pooled uint64
	for id := range s.pooled {
		pooled = id
	}
	next := s.nextID
	s.mu.Unlock()
	for _, id := range []uint64{0, next, pooled} {
		if _, err := s.Restore(id, frames); err == nil {
			t.Fatalf("restore of object %d (next id %d, pooled %d) accepted", id, next, pooled)
		}
	}
}
