package diskspace

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/node"
)

const mib = 1 << 20

func TestHeadroomFor(t *testing.T) {
	for _, tc := range []struct {
		h     string
		total int64
		want  int64
	}{
		{"auto", 64 * mib, 16 * mib},    // a quarter of a small volume
		{"auto", 1 << 30, 64 * mib},     // at least 64 MiB
		{"auto", 10 << 30, 512 * mib},   // 5%
		{"auto", 1000 << 30, 5 << 30},   // at most 5 GiB
		{"0", 1 << 30, 0},               // disabled
		{"128MiB", 64 * mib, 128 * mib}, // as given, even past the volume
		{"1048576", 1 << 30, mib},
	} {
		h, err := ParseHeadroom(tc.h)
		if err != nil {
			t.Fatalf("%q: %v", tc.h, err)
		}
		if got := h.For(tc.total); got != tc.want {
			t.Errorf("%q on %d bytes: %d, want %d", tc.h, tc.total, got, tc.want)
		}
	}
	for _, bad := range []string{"-1", "5%", "lots", "1TiB"} {
		if _, err := ParseHeadroom(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// fakeVolume is a volume whose free space the test sets; files the
// monitor writes (the reserve) count against it.
type fakeVolume struct {
	mu          sync.Mutex
	free, total int64
	dir         string
}

func (v *fakeVolume) set(free int64) { v.mu.Lock(); v.free = free; v.mu.Unlock() }

func (v *fakeVolume) stat(string) (Usage, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	free := v.free
	if fi, err := os.Stat(filepath.Join(v.dir, reserveFile)); err == nil {
		free -= fi.Size()
	}
	return Usage{Free: free, Total: v.total}, nil
}

func TestMonitorRefusesBelowHeadroomAndRecovers(t *testing.T) {
	dir := t.TempDir()
	vol := &fakeVolume{free: 40 * mib, total: 64 * mib, dir: dir}
	m, err := New(Options{Dir: dir, Stat: vol.stat, ReserveBytes: mib})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Admit(); err != nil {
		t.Fatalf("40 MiB free, headroom 16 MiB: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, reserveFile)); err != nil {
		t.Fatalf("no reserve file made while there is room: %v", err)
	}

	vol.set(10 * mib)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	err = m.Admit()
	if !errors.Is(err, node.StorageFull) {
		t.Fatalf("10 MiB free under a 16 MiB headroom: %v, want STORAGE_FULL", err)
	}
	if st := errs.HTTPStatus(err); st != 503 {
		t.Errorf("STORAGE_FULL maps to %d, want 503", st)
	}
	if !m.Full() {
		t.Error("Full is false while appends are refused")
	}
	if _, err := os.Stat(filepath.Join(dir, reserveFile)); err != nil {
		t.Errorf("the reserve was released while the volume still had 9 MiB free (%v): it is for a volume truly full", err)
	}

	// Truly full: the reserve goes, for the metadata log's commits.
	vol.set(mib / 2)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, reserveFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reserve still present on a full volume: %v", err)
	}

	vol.set(30 * mib)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	if err := m.Admit(); err != nil {
		t.Fatalf("space returned, appends still refused: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, reserveFile)); err != nil {
		t.Fatalf("the reserve was not made again once space returned: %v", err)
	}
}

func TestMonitorHeadroomZeroNeverRefuses(t *testing.T) {
	dir := t.TempDir()
	vol := &fakeVolume{free: 0, total: 64 * mib, dir: dir}
	m, err := New(Options{Dir: dir, Stat: vol.stat, Headroom: Headroom{Fixed: true}, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Admit(); err != nil {
		t.Fatalf("--disk-headroom=0 refused an append: %v", err)
	}
}

func TestFailLatches(t *testing.T) {
	dir := t.TempDir()
	vol := &fakeVolume{free: 40 * mib, total: 64 * mib, dir: dir}
	m, err := New(Options{Dir: dir, Stat: vol.stat, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	m.Fail("objstore.fdatasync", "x.obj", syscall.EIO)
	m.Fail("metalog.fdatasync", "y.wal", syscall.ENOSPC)
	err = m.Admit()
	if !errors.Is(err, node.StorageFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("after an fsync failure: %v, want STORAGE_FAILED wrapping the first cause", err)
	}
	vol.set(60 * mib)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	if m.Admit() == nil {
		t.Fatal("STORAGE_FAILED cleared by free space: only a restart clears it")
	}
}
