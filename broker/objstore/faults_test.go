package objstore_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/picomq/picomq/broker/diskio"
	"github.com/picomq/picomq/broker/objstore"
)

// acked writes one object through the store and checks it is acknowledged
// (synced and closed).
func acked(t *testing.T, s *objstore.Store, p []byte) (uint64, frame) {
	t.Helper()
	id, frames := writeObject(t, s, p)
	return id, frames[0]
}

// readsBack checks that an acknowledged object still holds its frame.
func readsBack(t *testing.T, s *objstore.Store, id uint64, f frame) {
	t.Helper()
	got, err := s.ReadFrame(id, f.pos, f.n)
	if err != nil {
		t.Fatalf("object %d acknowledged before the fault: %v", id, err)
	}
	if !bytes.Equal(got, f.payload) {
		t.Fatalf("object %d acknowledged before the fault reads back changed", id)
	}
}

// failedWrite creates an object, arms the fault, appends to the object and
// returns Sync's error: the append is acknowledged only when it is nil.
func failedWrite(t *testing.T, s *objstore.Store, faults *diskio.Faulty, rule diskio.Rule, payload []byte) error {
	t.Helper()
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	faults.Add(rule)
	if _, _, err := w.AppendFrame(payload); err != nil {
		return err
	}
	err = w.Sync()
	if err == nil {
		t.Fatal("Sync succeeded through an injected fault: the append would be acknowledged")
	}
	if again := w.Sync(); again == nil {
		t.Fatal("a second Sync after a failed one succeeded: a failed writer must stay failed")
	}
	if w.Close() == nil {
		t.Fatal("Close succeeded after a failed Sync")
	}
	return err
}

func TestInjectedWriteFaultsAreNeverAcknowledged(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule diskio.Rule
	}{
		{"EIO on write", diskio.Rule{Op: diskio.OpWrite, Path: ".obj", Count: 1, Err: syscall.EIO}},
		{"ENOSPC on write", diskio.Rule{Op: diskio.OpWrite, Path: ".obj", Count: 1, Err: syscall.ENOSPC}},
		{"short write", diskio.Rule{Op: diskio.OpWrite, Path: ".obj", Count: 1, Short: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faults := &diskio.Faulty{}
			var syncFailed int
			s, _ := openStore(t, objstore.Options{FS: faults, PoolSize: -1, SyncFailed: func(string, string, error) { syncFailed++ }})
			before := bytes.Repeat([]byte("acknowledged "), 300)
			id, f := acked(t, s, before)

			if err := failedWrite(t, s, faults, tc.rule, bytes.Repeat([]byte("lost "), 1000)); err == nil {
				t.Fatal("no error")
			}
			if faults.Injected() != 1 {
				t.Fatalf("%d faults injected, want 1: the test did not reach the write", faults.Injected())
			}
			readsBack(t, s, id, f)
			// A failed write is the writer's alone: nothing was synced
			// over it, the store keeps acknowledging new objects.
			if syncFailed != 0 || s.Failed() != nil {
				t.Fatalf("a write failure latched the store as failed (%v)", s.Failed())
			}
			id2, f2 := acked(t, s, []byte("after"))
			readsBack(t, s, id2, f2)
			readsBack(t, s, id, f)
		})
	}
}

func TestFsyncFailureStopsAcknowledging(t *testing.T) {
	faults := &diskio.Faulty{}
	var causes []error
	s, _ := openStore(t, objstore.Options{FS: faults, PoolSize: -1, SyncFailed: func(op, path string, err error) { causes = append(causes, err) }})
	id, f := acked(t, s, []byte("acknowledged before"))

	rule := diskio.Rule{Op: diskio.OpSync, Path: ".obj", Count: 1, Err: syscall.EIO}
	if err := failedWrite(t, s, faults, rule, []byte("never acknowledged")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync answered %v, want the fsync's EIO", err)
	}
	// The fault is gone: a retried fsync would now report success for
	// pages the kernel may have dropped. The store must not retry it.
	faults.Clear()
	if len(causes) != 1 {
		t.Fatalf("SyncFailed told %d times, want once", len(causes))
	}
	if s.Failed() == nil {
		t.Fatal("Failed is nil after an fsync failure")
	}
	if w, err := s.Create(); err == nil {
		w.Abort()
		t.Fatal("Create succeeded after an fsync failure: the store must stop acknowledging")
	}
	readsBack(t, s, id, f)
}
