package metalog

import (
	"context"
	"maps"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/diskio"
)

// TestFailedWriteKeepsTheLeader: a segment write that fails (a full
// volume) fails that Apply only; the one-voter log keeps or regains its
// leader and commits the next one, and nothing applied before is lost —
// raft-wal's tail had run ahead of its file and refused every later append.
func TestFailedWriteKeepsTheLeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	faults := &diskio.Faulty{}
	cfg := testConfig(t, dir)
	cfg.FS = faults
	fsm := newToyFSM()
	l := open(t, cfg, fsm)
	for i := range 20 {
		apply(t, l, mustCmd("add", "a", int64(i)))
	}
	faults.Add(diskio.Rule{Op: diskio.OpWrite, Path: ".wal", Count: 1, Err: syscall.ENOSPC})
	if _, err := l.Apply(context.Background(), mustCmd("add", "a", 1000)); err == nil {
		t.Fatal("an Apply whose write failed succeeded")
	}
	if faults.Injected() != 1 {
		t.Fatalf("%d faults injected: the Apply did not meet the fault", faults.Injected())
	}
	// The next command commits, once the log has its leader again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := l.Apply(ctx, mustCmd("add", "b", 1))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no command committed within 30s of a failed write: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := fsm.state()
	if want["a"] != 190 || want["b"] != 1 {
		t.Fatalf("state %v: want a=190 (0..19, not the failed 1000) and b=1", want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fsm2 := newToyFSM()
	open(t, testConfig(t, dir), fsm2)
	if got := fsm2.state(); !maps.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// TestFailedFsyncIsReported: a failed segment fsync is told to
// Config.SyncFailed, for the broker to stop acknowledging.
func TestFailedFsyncIsReported(t *testing.T) {
	t.Parallel()
	faults := &diskio.Faulty{}
	cfg := testConfig(t, t.TempDir())
	cfg.FS = faults
	var mu sync.Mutex
	var failed []string
	cfg.SyncFailed = func(path string, err error) {
		mu.Lock()
		failed = append(failed, path)
		mu.Unlock()
	}
	l := open(t, cfg, newToyFSM())
	apply(t, l, mustCmd("add", "a", 1))
	faults.Add(diskio.Rule{Op: diskio.OpSync, Path: ".wal", Count: 1, Err: syscall.EIO})
	if _, err := l.Apply(context.Background(), mustCmd("add", "a", 2)); err == nil {
		t.Fatal("an Apply whose fsync failed succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 1 {
		t.Fatalf("SyncFailed told %d times (%v), want once", len(failed), failed)
	}
}
