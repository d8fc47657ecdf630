package crashfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"testing"
)

func mustWrite(t *testing.T, f *File, p string, off int64) {
	t.Helper()
	if n, err := f.WriteAt([]byte(p), off); err != nil || n != len(p) {
		t.Fatalf("write %q at %d: %d, %v", p, off, n, err)
	}
}

func contents(t *testing.T, d *Dir, name string) string {
	t.Helper()
	f, err := d.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(buf)
}

// TestCrashKeepsWhatSyncsCovered: bytes written after a file's last Sync,
// and entries changed after the directory's last SyncDir, are gone after a
// crash; what both covered is there.
func TestCrashKeepsWhatSyncsCovered(t *testing.T) {
	var d Dir
	a, _ := d.Create("a")
	mustWrite(t, a, "durable", 0)
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.SyncDir(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, a, "-lost", 7)
	b, _ := d.Create("b") // synced, but its entry never was
	mustWrite(t, b, "orphan", 0)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, &d, "a"); got != "durable-lost" {
		t.Fatalf("before the crash a reads %q", got)
	}
	d.Crash()
	if got := d.List(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("entries after the crash: %v, want [a] (b's entry was never synced)", got)
	}
	if got := contents(t, &d, "a"); got != "durable" {
		t.Fatalf("a after the crash: %q, want what its Sync covered", got)
	}
	if _, err := a.WriteAt([]byte("x"), 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("a File from before the crash wrote: %v", err)
	}
}

// TestCrashUndoesUnsyncedRemovesAndRenames: a remove or a rename not
// followed by SyncDir is undone by a crash, with the file's durable bytes.
func TestCrashUndoesUnsyncedRemovesAndRenames(t *testing.T) {
	var d Dir
	for _, name := range []string{"gone", "moved", "target"} {
		f, _ := d.Create(name)
		mustWrite(t, f, name, 0)
		_ = f.Sync()
	}
	_ = d.SyncDir()
	if err := d.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	if err := d.Rename("moved", "target"); err != nil {
		t.Fatal(err)
	}
	if got := d.List(); !slices.Equal(got, []string{"target"}) {
		t.Fatalf("entries before the crash: %v", got)
	}
	d.Crash()
	if got := d.List(); !slices.Equal(got, []string{"gone", "moved", "target"}) {
		t.Fatalf("entries after the crash: %v, want the remove and the rename undone", got)
	}
	for _, name := range []string{"gone", "moved", "target"} {
		if got := contents(t, &d, name); got != name {
			t.Fatalf("%s after the crash holds %q", name, got)
		}
	}
	// Made durable, they stay.
	_ = d.Remove("gone")
	_ = d.Rename("moved", "target")
	_ = d.SyncDir()
	d.Crash()
	if got := d.List(); !slices.Equal(got, []string{"target"}) || contents(t, &d, "target") != "moved" {
		t.Fatalf("after a synced remove and rename: %v, target %q", got, contents(t, &d, "target"))
	}
}

// TestTruncateIsDurableOnlyOnceSynced: a truncation after the last Sync is
// lost at a crash, the bytes it cut are back.
func TestTruncateIsDurableOnlyOnceSynced(t *testing.T) {
	var d Dir
	f, _ := d.Create("j")
	_ = d.SyncDir()
	mustWrite(t, f, "0123456789", 0)
	_ = f.Sync()
	_ = f.Truncate(4)
	d.Crash()
	if got := contents(t, &d, "j"); got != "0123456789" {
		t.Fatalf("an unsynced truncation survived the crash: %q", got)
	}
	f, _ = d.Open("j")
	_ = f.Truncate(4)
	_ = f.Sync()
	d.Crash()
	if got := contents(t, &d, "j"); got != "0123" {
		t.Fatalf("a synced truncation: %q", got)
	}
}

// TestCrashTornKeepsAPrefixOfThePendingWrites: a torn crash keeps the
// writes since the last Sync in order — some whole, then a part of the
// next, never a later write without the earlier ones — and always all that
// the Sync covered.
func TestCrashTornKeepsAPrefixOfThePendingWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := map[int]bool{}
	for range 200 {
		var d Dir
		f, _ := d.Create("j")
		_ = d.SyncDir()
		mustWrite(t, f, "head|", 0)
		_ = f.Sync()
		all := "head|"
		for i := range 5 {
			rec := string(rune('a'+i)) + "bcdefgh|"
			mustWrite(t, f, rec, int64(len(all)))
			all += rec
		}
		d.CrashTorn(rng)
		got := contents(t, &d, "j")
		if !bytes.HasPrefix([]byte(all), []byte(got)) || len(got) < len("head|") {
			t.Fatalf("torn crash left %q, not a prefix of %q holding the synced head", got, all)
		}
		lengths[len(got)] = true
	}
	if len(lengths) < 10 {
		t.Fatalf("200 torn crashes left only %d different lengths: the tear is not exercised", len(lengths))
	}
}

// TestSyncedSaysWhatACrashWouldKeep: Synced is true exactly for ranges a
// crash now would keep as they read.
func TestSyncedSaysWhatACrashWouldKeep(t *testing.T) {
	var d Dir
	f, _ := d.Create("j")
	mustWrite(t, f, "aaaa", 0)
	_ = f.Sync()
	if d.Synced("j", 0, 4) {
		t.Fatal("Synced before the directory entry was made durable")
	}
	_ = d.SyncDir()
	if !d.Synced("j", 0, 4) {
		t.Fatal("not Synced after Sync and SyncDir")
	}
	mustWrite(t, f, "bb", 4)
	if d.Synced("j", 0, 6) || !d.Synced("j", 0, 4) {
		t.Fatal("a pending append counted as durable, or spoiled the synced range")
	}
	mustWrite(t, f, "X", 1)
	if d.Synced("j", 0, 4) || !d.Synced("j", 2, 2) {
		t.Fatal("a range rewritten since its Sync counted as durable (or its neighbours did not)")
	}
	_ = f.Sync()
	if !d.Synced("j", 0, 6) {
		t.Fatal("not Synced after the second Sync")
	}
	if files, dirs := d.Syncs(); files != 2 || dirs != 1 {
		t.Fatalf("Syncs = %d files, %d dirs; want 2, 1", files, dirs)
	}
}

// TestErrorsAreFileSystemErrors: what a program checks with errors.Is.
func TestErrorsAreFileSystemErrors(t *testing.T) {
	var d Dir
	if _, err := d.Open("none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("open of a missing file: %v", err)
	}
	_, _ = d.Create("x")
	if _, err := d.Create("x"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create of an existing file: %v", err)
	}
	if err := d.Remove("none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("remove of a missing file: %v", err)
	}
	if err := d.Rename("none", "y"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rename of a missing file: %v", err)
	}
	f, _ := d.Open("x")
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, io.EOF) {
		t.Errorf("read past the end: %v", err)
	}
}

// TestKillKeepsThePageCache: a killed process's files die, its unsynced
// writes and entries stay (unsynced: a crash after still loses them).
func TestKillKeepsThePageCache(t *testing.T) {
	var d Dir
	f, _ := d.Create("j")
	mustWrite(t, f, "unsynced", 0)
	d.Kill()
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("a File from before the kill wrote: %v", err)
	}
	if got := contents(t, &d, "j"); got != "unsynced" || d.Synced("j", 0, 8) {
		t.Fatalf("after a kill: %q (synced %v), want the page cache, unsynced", got, d.Synced("j", 0, 8))
	}
	d.Crash()
	if got := d.List(); len(got) != 0 {
		t.Fatalf("a crash after the kill kept %v", got)
	}
}

// TestCrashTornIsDeterministic: the same seed tears the same files the
// same way, however many files hold unsynced writes.
func TestCrashTornIsDeterministic(t *testing.T) {
	run := func() []string {
		var d Dir
		for i := range 5 {
			f, _ := d.Create(string(rune('a' + i)))
			_ = d.SyncDir()
			mustWrite(t, f, "0123456789", 0)
		}
		d.CrashTorn(rand.New(rand.NewPCG(3, 4)))
		var out []string
		for _, name := range d.List() {
			out = append(out, contents(t, &d, name))
		}
		return out
	}
	first := run()
	for range 20 {
		if got := run(); !slices.Equal(got, first) {
			t.Fatalf("same seed, other files: %q then %q", first, got)
		}
	}
}
