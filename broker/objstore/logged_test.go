package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"
)

// TestCreateLoggedTakesARecycledFile: an object whose bytes a log keeps
// needs no durable name, so it reuses a recycled file without the directory
// fsync a pool file waits for; CloseUnsynced leaves it readable, and its
// Frames are exactly what EnsureObject writes back.
func TestCreateLoggedTakesARecycledFile(t *testing.T) {
	s := openInternal(t, Options{})
	old, _, _ := writeOne(t, s, []byte("old object"))
	if err := s.Remove(old); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	spare := s.spare[0]
	s.mu.Unlock()
	syncs := s.dirSyncs.Load()

	w, err := s.CreateLogged()
	if err != nil {
		t.Fatal(err)
	}
	if w.ID() != spare {
		t.Fatalf("CreateLogged gave object %d, want the recycled %d", w.ID(), spare)
	}
	var pos, n [2]int64
	for i, p := range []string{"first", "second"} {
		if pos[i], n[i], err = w.AppendFrame([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	frames, ok := w.Frames()
	if !ok || int64(len(frames)) != w.Size()-HeaderSize {
		t.Fatalf("Frames = %d bytes, %v; want %d", len(frames), ok, w.Size()-HeaderSize)
	}
	if err := w.CloseUnsynced(); err != nil {
		t.Fatal(err)
	}
	if got := s.dirSyncs.Load(); got != syncs {
		t.Fatalf("%d directory fsyncs for an unsynced object", got-syncs)
	}
	for i, want := range []string{"first", "second"} {
		if got, err := s.ReadFrame(spare, pos[i], n[i]); err != nil || string(got) != want {
			t.Fatalf("frame %d: %q, %v", i, got, err)
		}
	}
	written, err := os.ReadFile(s.path(spare))
	if err != nil {
		t.Fatal(err)
	}

	// A replay finding the file intact leaves it alone ...
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(s.path(spare), past, past); err != nil {
		t.Fatal(err)
	}
	if err := EnsureObject(s.Dir(), spare, frames); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.path(spare)); err != nil || !fi.ModTime().Equal(past) {
		t.Fatalf("an intact object was written again (%v, %v)", fi.ModTime(), err)
	}
	// ... and writes a torn or missing one back byte for byte.
	for _, damage := range []func(string) error{
		func(p string) error { return os.Truncate(p, HeaderSize+3) },
		os.Remove,
	} {
		if err := damage(s.path(spare)); err != nil {
			t.Fatal(err)
		}
		if err := EnsureObject(s.Dir(), spare, frames); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(s.path(spare)); err != nil || !bytes.Equal(got, written) {
			t.Fatalf("rewritten object differs from the one written (%v)", err)
		}
	}
	s.cache.evict(spare) // the handle read above is on the removed file
	if got, err := s.ReadFrame(spare, pos[1], n[1]); err != nil || string(got) != "second" {
		t.Fatalf("read of the rewritten object: %q, %v", got, err)
	}

	// SyncObjects skips what was collected meanwhile.
	if err := SyncObjects(s.Dir(), []uint64{spare, spare + 1000}); err != nil {
		t.Fatal(err)
	}
}

// TestLoggedWriterSyncMakesItsNameDurable: should an object from
// CreateLogged be synced after all, its new name is made durable with it.
func TestLoggedWriterSyncMakesItsNameDurable(t *testing.T) {
	s := openInternal(t, Options{})
	old, _, _ := writeOne(t, s, []byte("old object"))
	if err := s.Remove(old); err != nil {
		t.Fatal(err)
	}
	syncs := s.dirSyncs.Load()
	w, err := s.CreateLogged()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrame([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if s.dirSyncs.Load() != syncs+1 {
		t.Fatalf("%d directory fsyncs, want 1", s.dirSyncs.Load()-syncs)
	}
}

// TestFramesRefusedOnceWritten: Frames is only for an object still wholly
// in the writer's buffer.
func TestFramesRefusedOnceWritten(t *testing.T) {
	s := openInternal(t, Options{})
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if _, _, err := w.AppendFrame(make([]byte, flushThreshold)); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Frames(); ok {
		t.Fatal("Frames of an object partly handed to the file")
	}
}

// TestCreateLoggedNeverSyncsTheDirectory: with no recycled file waiting,
// CreateLogged takes files created ahead without a directory fsync, or
// makes one itself, still without. List and Remove ignore the files not yet
// taken, and Close deletes them.
func TestCreateLoggedNeverSyncsTheDirectory(t *testing.T) {
	s := openInternal(t, Options{})
	syncs := s.dirSyncs.Load()
	ahead := looseIDs(s) // Open creates them before it returns
	if len(ahead) != looseSize {
		t.Fatalf("%d files created ahead for CreateLogged, want %d", len(ahead), looseSize)
	}
	if err := s.Remove(ahead[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.path(ahead[0])); err != nil {
		t.Fatalf("Remove took a file created ahead: %v", err)
	}
	const objects = 3 * looseSize
	for i := range objects {
		w, err := s.CreateLogged()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := w.AppendFrame([]byte(fmt.Sprint("object ", i))); err != nil {
			t.Fatal(err)
		}
		if err := w.CloseUnsynced(); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.dirSyncs.Load(); got != syncs {
		t.Fatalf("%d directory fsyncs for %d logged objects", got-syncs, objects)
	}
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != objects {
		t.Fatalf("List shows %d objects, want the %d written (not the files created ahead)", len(infos), objects)
	}

	s2 := openInternal(t, Options{})
	ahead = looseIDs(s2)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ahead {
		if _, err := os.Stat(s2.path(id)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("file %d created ahead survives Close: %v", id, err)
		}
	}
}

func looseIDs(s *Store) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []uint64
	for _, pf := range s.loose {
		ids = append(ids, pf.id)
	}
	return ids
}
