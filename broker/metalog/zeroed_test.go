package metalog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/picomq/picomq/internal/testwait"
)

// waitSpare waits until z has a spare ready.
func waitSpare(t *testing.T, z *zeroedFS) {
	t.Helper()
	testwait.Until(t, 30*time.Second, "a spare WAL segment is ready", func() bool {
		z.mu.Lock()
		defer z.mu.Unlock()
		return z.ready
	})
}

// checkZeros fails unless path holds exactly size zero bytes.
func checkZeros(t *testing.T, path string, size int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != size || bytes.IndexFunc(b, func(r rune) bool { return r != 0 }) >= 0 {
		t.Fatalf("%s: %d bytes, not %d zeros", path, len(b), size)
	}
}

// A fresh log's first segment is a spare written out in zeros before Open
// returns; each Create takes the spare (as the segment asked for, synced
// with fdatasync) and the next spare is written behind it.
func TestZeroedFSGivesSegmentsFromSpares(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const size = 2 << 20
	z, err := newZeroedFS(dir, size, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	checkZeros(t, filepath.Join(dir, spareSegment), size)

	for i := range 3 {
		if i > 0 {
			waitSpare(t, z)
		}
		name := fmt.Sprintf("%020d-%020d.wal", i+1, i+1)
		f, err := z.Create(dir, name, size)
		if err != nil {
			t.Fatalf("Create %s: %v", name, err)
		}
		if _, ok := f.(*zeroedFile); !ok {
			t.Fatalf("Create %s gave a %T, not a segment from the spare", name, f)
		}
		if _, err := f.WriteAt([]byte("entry"), 64); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) != size || string(b[64:69]) != "entry" {
			t.Fatalf("segment %s: %d bytes (err %v), want %d with the write at 64", name, len(b), err, size)
		}
	}
	if got := z.fromSpare.Load(); got != 3 || z.fallocated.Load() != 0 {
		t.Fatalf("%d segments from spares, want 3", got)
	}
	waitSpare(t, z)
	checkZeros(t, filepath.Join(dir, spareSegment), size)

	// Create refuses a name that exists, as raft-wal's VFS must, and keeps
	// the spare for the next.
	if _, err := z.Create(dir, fmt.Sprintf("%020d-%020d.wal", 1, 1), size); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Create over an existing segment: %v, want ErrExist", err)
	}
}

// Without a spare of the size asked for, Create falls back to raft-wal's
// fallocated file.
func TestZeroedFSFallsBackWithoutASpare(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	z, err := newZeroedFS(dir, 1<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	f, err := z.Create(dir, "00000000000000000001-00000000000000000001.wal", 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.(*zeroedFile); ok {
		t.Fatal("a segment of another size came from the spare")
	}
	if z.fallocated.Load() != 1 || z.fromSpare.Load() != 0 {
		t.Fatalf("fallocated %d, from spares %d; want 1 and 0", z.fallocated.Load(), z.fromSpare.Load())
	}
}

// A crash between Create's link and unlink leaves the spare's name on a live
// segment: the next start unlinks that name and writes a new spare without
// touching the segment.
func TestZeroedFSLeavesASegmentSharingTheSpareName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seg := filepath.Join(dir, "00000000000000000001-00000000000000000001.wal")
	want := bytes.Repeat([]byte("committed"), 1000)
	if err := os.WriteFile(seg, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(seg, filepath.Join(dir, spareSegment)); err != nil {
		t.Fatal(err)
	}
	z, err := newZeroedFS(dir, 1<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	waitSpare(t, z)
	if got, err := os.ReadFile(seg); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("segment after start: %d bytes (err %v), want its %d committed bytes", len(got), err, len(want))
	}
	checkZeros(t, filepath.Join(dir, spareSegment), 1<<20)
}

// Close stops a spare being written and leaves no half-written spare.
func TestZeroedFSCloseStopsTheSpare(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000001-00000000000000000001.wal"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	z, err := newZeroedFS(dir, 1<<30, hclog.NewNullLogger()) // not fresh: written in the background
	if err != nil {
		t.Fatal(err)
	}
	z.Close()
	if _, err := os.Stat(filepath.Join(dir, spareSegment)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spare after Close: %v, want none", err)
	}
	if _, err := z.Create(dir, "00000000000000000002-00000000000000000002.wal", 1<<30); err != nil {
		t.Fatalf("Create after Close (fallocated): %v", err)
	}
}

// Through the log: segments rotated into are the spares, and what was
// written into them is all there after a reopen.
func TestLogRotatesIntoZeroedSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.SegmentBytes = 1 << 20
	l := open(t, cfg, newToyFSM())
	pad := strings.Repeat("k", 8<<10)
	const n = 400 // ~3.2 MiB: three rotations or more
	for i := range n {
		waitSpare(t, l.store.files)
		apply(t, l, mustCmd("add", fmt.Sprintf("%s%d", pad, i), int64(i)))
	}
	if l.UnzeroedSegments() != 0 || l.store.files.fromSpare.Load() < 4 {
		t.Fatalf("segments: %d from spares, %d fallocated; want every one (at least 4) from a spare",
			l.store.files.fromSpare.Load(), l.store.files.fallocated.Load())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fsm := newToyFSM()
	open(t, cfg, fsm)
	got := fsm.state()
	for i := range n {
		if k := fmt.Sprintf("%s%d", pad, i); got[k] != int64(i) {
			t.Fatalf("after reopen entry %d = %d, want %d", i, got[k], i)
		}
	}
}

// Without spares (here: one cannot be written) every rotation falls back
// to a fallocated segment, counted by UnzeroedSegments, and the log works
// as before.
func TestLogWithoutSparesFallsBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.SegmentBytes = 1 << 20
	l := open(t, cfg, newToyFSM())
	apply(t, l, mustCmd("add", "first", 1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A non-empty directory where the spare goes: it can be neither
	// removed nor created.
	spare := filepath.Join(dir, walDir, spareSegment)
	if err := os.Remove(spare); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(spare, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	fsm := newToyFSM()
	l = open(t, cfg, fsm)
	pad := strings.Repeat("k", 8<<10)
	for i := range 300 { // ~2.4 MiB: two rotations or more
		apply(t, l, mustCmd("add", fmt.Sprintf("%s%d", pad, i), int64(i)))
	}
	if n := l.UnzeroedSegments(); n < 2 {
		t.Fatalf("UnzeroedSegments = %d after rotations with no spare, want >= 2", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fsm = newToyFSM()
	open(t, cfg, fsm)
	if got := fsm.state(); got["first"] != 1 || got[pad+"299"] != 299 {
		t.Fatalf("after reopen: first = %d, last = %d", got["first"], got[pad+"299"])
	}
}
