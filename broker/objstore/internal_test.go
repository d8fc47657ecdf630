package objstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

func openInternal(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "objects"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCreateSkipsDirectoryFsync checks the point of the pool: objects come
// with their directory entries made durable in batches, not one directory
// fsync each.
func TestCreateSkipsDirectoryFsync(t *testing.T) {
	s := openInternal(t, Options{})
	const objects = 40
	for range objects {
		w, err := s.Create()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := w.AppendFrame([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Each refill syncs the directory once for half the pool (two files),
	// plus one for the initial fill; a Create that outran the refills and
	// found the pool empty pays its own.
	if got, slow := s.dirSyncs.Load(), s.slowCreates.Load(); got > 1+objects/2+slow {
		t.Fatalf("%d directory fsyncs for %d objects", got, objects)
	} else {
		t.Logf("%d directory fsyncs for %d objects, %d Creates found the pool empty", got, objects, s.slowCreates.Load())
	}

	// Without a pool every Create pays one.
	s2 := openInternal(t, Options{PoolSize: -1})
	for range 5 {
		w, err := s2.Create()
		if err != nil {
			t.Fatal(err)
		}
		w.Abort()
	}
	if got := s2.dirSyncs.Load(); got != 5 || s2.slowCreates.Load() != 5 {
		t.Fatalf("no pool: %d directory fsyncs for 5 objects", got)
	}
}

func TestHandleCacheBounded(t *testing.T) {
	s := openInternal(t, Options{MaxOpenFiles: 3})
	type loc struct {
		id     uint64
		pos, n int64
	}
	var locs []loc
	for i := range 10 {
		w, err := s.Create()
		if err != nil {
			t.Fatal(err)
		}
		pos, n, err := w.AppendFrame([]byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc{w.ID(), pos, n})
	}
	for round := range 2 {
		for i, l := range locs {
			got, err := s.ReadFrame(l.id, l.pos, l.n)
			if err != nil || string(got) != fmt.Sprint(i) {
				t.Fatalf("round %d object %d: %q, %v", round, i, got, err)
			}
			if n := s.cache.len(); n > 3 {
				t.Fatalf("%d handles cached, max 3", n)
			}
		}
	}
	// A handle held by a read survives its eviction until released.
	h, err := s.cache.acquire(locs[0].id)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range locs[1:] {
		if _, err := s.ReadFrame(l.id, l.pos, l.n); err != nil {
			t.Fatal(err)
		}
	}
	if h.elem != nil {
		t.Fatal("handle not evicted")
	}
	buf := make([]byte, 1)
	if _, err := h.f.ReadAt(buf, 0); err != nil {
		t.Fatalf("evicted handle closed under its reader: %v", err)
	}
	s.cache.release(h)
	if _, err := h.f.ReadAt(buf, 0); err == nil {
		t.Fatal("released, evicted handle still open")
	}
}

// TestWriterFailureSticks checks that a writer whose write failed keeps
// failing, with the coded error naming the operation, and that Abort still
// removes its object.
func TestWriterFailureSticks(t *testing.T) {
	s := openInternal(t, Options{})
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrame([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	w.f.Close() // the disk, as far as the writer can tell, went away
	err = w.Sync()
	if !errors.Is(err, stream.StreamBackendFailed) || !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Sync: %v", err)
	}
	if op, _ := errs.FieldOf(err, "op"); op != "objstore.write" {
		t.Fatalf("op = %v", op)
	}
	if _, _, err2 := w.AppendFrame([]byte("more")); err2 != err {
		t.Fatalf("AppendFrame after failure: %v", err2)
	}
	if err2 := w.Sync(); err2 != err {
		t.Fatalf("Sync after failure: %v", err2)
	}
	if err2 := w.Close(); err2 == nil {
		t.Fatal("Close after failure succeeded")
	}
	path := s.path(w.ID())
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("failed Close removed the object: %v", err)
	}
	w.Abort()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("Abort left the object: %v", err)
	}
	if s.Remove(w.ID()) != nil {
		t.Fatal("Remove after Abort")
	}
}

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name string
		id   uint64
		ok   bool
	}{
		{"0000000000000001.obj", 1, true},
		{"ffffffffffffffff.obj", 1<<64 - 1, true},
		{fileName(0xabc), 0xabc, true},
		{"000000000000000A.obj", 0, false},
		{"0000000000000001.pool", 0, false},
		{"1.obj", 0, false},
		{".picomq-probe-123", 0, false},
		{"+000000000000001.obj", 0, false},
	} {
		id, ok := parseName(c.name)
		if id != c.id || ok != c.ok {
			t.Errorf("parseName(%q) = %d, %v; want %d, %v", c.name, id, ok, c.id, c.ok)
		}
	}
}
