package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/internal/testwait"
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// writeOne writes one synced object holding payload and returns its id and
// the frame's place.
func writeOne(t *testing.T, s *Store, payload []byte) (uint64, int64, int64) {
	t.Helper()
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	pos, n := finishOne(t, w, payload)
	return w.ID(), pos, n
}

// finishOne writes payload as w's one frame, syncs and closes w, and
// returns the frame's place.
func finishOne(t *testing.T, w *Writer, payload []byte) (int64, int64) {
	t.Helper()
	pos, n, err := w.AppendFrame(payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return pos, n
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestRemoveRecyclesTheFile: a removed object's file goes back to the pool
// under a new id, truncated to a bare header, its new name made durable by
// a directory fsync; the old id reads as missing; an object written into
// the recycled file holds only its own frames.
func TestRemoveRecyclesTheFile(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{})
	big := bytes.Repeat([]byte("old"), 100_000)
	id, pos, n := writeOne(t, s, big)
	ino := inode(t, s.path(id))
	if _, err := s.ReadFrame(id, pos, n); err != nil { // cache a handle
		t.Fatal(err)
	}
	syncs := s.dirSyncs.Load()
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	if s.recycled.Load() != 1 {
		t.Fatalf("recycled %d files, want 1", s.recycled.Load())
	}
	if _, err := s.ReadFrame(id, pos, n); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of the removed object: %v, want not exist", err)
	}
	s.mu.Lock()
	if len(s.spare) != 1 {
		s.mu.Unlock()
		t.Fatalf("%d spare files after one Remove, want 1", len(s.spare))
	}
	nid := s.spare[0]
	s.mu.Unlock()
	if nid <= id {
		t.Fatalf("recycled file got id %d, not above %d", nid, id)
	}
	if got := inode(t, s.path(nid)); got != ino {
		t.Fatalf("spare %d is inode %d, not the removed object's %d", nid, got, ino)
	}
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.ID == id || info.ID == nid {
			t.Fatalf("List shows %d: a removed object or a pool file", info.ID)
		}
	}
	// Take files until the recycled one comes out of the pool: a refill
	// must have made its new name durable first. Each take waits for the
	// pool to hold a file (the refill a take kicks runs beside it, and
	// under load lags it): a take from an empty pool makes a new file and
	// never meets the recycled one.
	for range 50 {
		if !testwait.Poll(10*time.Second, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.ready) > 0
		}) {
			t.Fatal("the pool stayed empty")
		}
		w, err := s.Create()
		if err != nil {
			t.Fatal(err)
		}
		if w.ID() != nid {
			w.Abort()
			continue
		}
		if s.dirSyncs.Load() == syncs {
			t.Fatal("the recycled file was handed out before a directory fsync")
		}
		p2, n2 := finishOne(t, w, []byte("new"))
		got, err := s.ReadFrame(nid, p2, n2)
		if err != nil || string(got) != "new" {
			t.Fatalf("read of the new object: %q, %v", got, err)
		}
		var frames int
		end, err := s.Scan(nid, func(int64, int64, []byte) error { frames++; return nil })
		if err != nil || frames != 1 || end != HeaderSize+n2 {
			t.Fatalf("Scan of the recycled object: %d frames, end %d, %v; want 1 frame ending at %d", frames, end, err, HeaderSize+n2)
		}
		return
	}
	t.Fatal("the recycled file never came out of the pool")
}

// TestRemoveUnlinksAFileAReaderHolds: while a read has the object open,
// truncating it would hand the reader wrong bytes, so Remove unlinks it
// instead and the reader still gets its frame.
func TestRemoveUnlinksAFileAReaderHolds(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{})
	id, pos, n := writeOne(t, s, []byte("held"))
	h, err := s.cache.acquire(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	if s.recycled.Load() != 0 {
		t.Fatal("a file a reader holds was recycled")
	}
	buf := make([]byte, n)
	if _, err := h.f.ReadAt(buf, pos); err != nil {
		t.Fatal(err)
	}
	if got, err := checkFrame(id, pos, buf); err != nil || string(got) != "held" {
		t.Fatalf("the holder read %q, %v", got, err)
	}
	s.cache.release(h)
	if _, err := os.Stat(s.path(id)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the object's name is still there: %v", err)
	}
}
