package diskspace

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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

// TestBackgroundWorkKeepsTheHeadroom: background work may write into what
// is free above the headroom; below it only work that frees at least as
// much as it writes runs — those bytes, and what was put off, counted.
func TestBackgroundWorkKeepsTheHeadroom(t *testing.T) {
	dir := t.TempDir()
	vol := &fakeVolume{free: 40 * mib, total: 64 * mib, dir: dir}
	reg := prometheus.NewRegistry()
	m, err := New(Options{Dir: dir, Stat: vol.stat, ReserveBytes: -1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// 40 MiB free, 16 MiB headroom: 24 MiB to spend.
	if got := m.BackgroundBudget(); got != 24*mib {
		t.Errorf("budget with 40 MiB free: %d, want 24 MiB", got)
	}
	if !m.Background("merge", 20*mib, 0) {
		t.Error("a 20 MiB merge refused with 24 MiB above the headroom")
	}
	if m.Background("merge", 30*mib, 0) {
		t.Error("a 30 MiB merge freeing nothing ran into the headroom")
	}
	if !m.Background("merge", 30*mib, 30*mib) {
		t.Error("a 30 MiB merge freeing as much was refused")
	}
	// (It dipped into the headroom: its bytes are counted.)

	// Below the headroom: nothing that frees less than it writes.
	vol.set(12 * mib)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	if m.Background("spill", 1, 0) {
		t.Error("a spill (frees nothing) ran below the headroom")
	}
	if m.Background("merge", 2*mib, mib) {
		t.Error("a merge freeing half what it writes ran below the headroom")
	}
	if !m.Background("merge", 2*mib, 4*mib) {
		t.Error("a merge freeing twice what it writes was refused below the headroom")
	}
	m.WroteWhileFull("snapshot", 3*mib)
	// (12 - 16/4) / 4 MiB: work that frees goes in small steps, whose
	// frees come a grace after their writes.
	if got := m.BackgroundBudget(); got != 2*mib {
		t.Errorf("budget with 12 MiB free under a 16 MiB headroom: %d, want 2 MiB", got)
	}
	vol.set(2 * mib)
	if err := m.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := m.BackgroundBudget(); got != 0 {
		t.Errorf("budget with 2 MiB free: %d, want 0", got)
	}

	want := map[string]float64{
		`picomq_disk_background_written_while_full_bytes_total{work="merge"}`:    (30 + 2) * mib,
		`picomq_disk_background_written_while_full_bytes_total{work="snapshot"}`: 3 * mib,
		`picomq_disk_background_deferred_total{work="merge"}`:                    2,
		`picomq_disk_background_deferred_total{work="spill"}`:                    1,
	}
	for name, v := range want {
		if got := counterValue(t, reg, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}

	// No headroom kept: background work is never held back.
	m2, err := New(Options{Dir: t.TempDir(), Stat: vol.stat, Headroom: Headroom{Fixed: true}, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !m2.Background("merge", 64*mib, 0) || m2.BackgroundBudget() < 64*mib {
		t.Error("--disk-headroom=0 held background work back")
	}
}

// counterValue is the value of the counter name (with its labels, as
// exposed) in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			id := mf.GetName()
			if len(m.GetLabel()) > 0 {
				id += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						id += ","
					}
					id += l.GetName() + `="` + l.GetValue() + `"`
				}
				id += "}"
			}
			if id == name {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
