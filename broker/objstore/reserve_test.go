package objstore

import (
	"os"
	"path/filepath"
	"testing"
)

// TestIDRangeAndReservation: a store with a range hands out its own ids
// only, is not moved by other members' files in its directory, and never
// hands an id out twice across a restart, even when the objects it held
// left no file.
func TestIDRangeAndReservation(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "objects")
	const base = 3 << 48
	s, err := Open(dir, Options{IDBase: base, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	if w.ID() != base {
		t.Fatalf("first id %x, want the range's base %x", w.ID(), uint64(base))
	}
	w.Abort()
	held, err := s.Hold(AppendFrame(nil, []byte("in memory only")))
	if err != nil {
		t.Fatal(err)
	}
	// Another member's object, replicated here: outside the range.
	other := uint64(5<<48 + 77)
	if err := EnsureObject(dir, other, AppendFrame(nil, []byte("theirs"))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(other+1, AppendFrame(nil, []byte("replayed, theirs"))); err != nil {
		t.Fatalf("restoring another member's object: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Restarted with nothing but the directory: the held id left no file.
	s, err = Open(dir, Options{IDBase: base, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err = s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if w.ID() <= held || w.ID() >= 4<<48 {
		t.Fatalf("id after a restart %x: want above the held %x and inside the range", w.ID(), held)
	}
	if _, err := s.Restore(w.ID()+1, AppendFrame(nil, []byte("x"))); err == nil {
		t.Fatal("Restore took an id of this range never handed out")
	}

	// A corrupt reservation is refused, not guessed around.
	if err := os.WriteFile(filepath.Join(dir, reservationFile), []byte("garbage!"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{IDBase: base, PoolSize: -1}); err == nil {
		t.Fatal("a store opened on a corrupt reservation")
	}
}
