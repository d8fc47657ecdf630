package metalog

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A second Open of a directory whose Log is open is refused at once, naming
// the lock, instead of blocking or sharing the WAL; after Close it works.
func TestOpenRefusesADirectoryInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	l := open(t, cfg, newToyFSM())
	apply(t, l, mustCmd("add", "a", 1))

	if l2, err := Open(cfg, newToyFSM()); err == nil {
		l2.Close()
		t.Fatal("a second Open of an open directory succeeded")
	} else if !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), lockFile) {
		t.Fatalf("second Open: %v, want an 'in use' error naming %s", err, lockFile)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	fsm := newToyFSM()
	open(t, cfg, fsm)
	if got := fsm.state()["a"]; got != 1 {
		t.Fatalf("after reopen a = %d, want 1", got)
	}
}

// A directory written before the WAL (raft-boltdb's raft.db) is migrated on
// Open: every entry is replayed, the term is kept, and raft.db is renamed
// so the next Open does not copy it again.
func TestOpenMigratesRaftDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	want := writeBoltLog(t, cfg, 40)

	fsm := newToyFSM()
	l := open(t, cfg, fsm)
	if got := fsm.state(); !maps.Equal(got, want) {
		t.Fatalf("state after migration = %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, boltFile)); !os.IsNotExist(err) {
		t.Fatalf("raft.db still in place after migration (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, boltFile+".migrated")); err != nil {
		t.Fatalf("raft.db.migrated: %v", err)
	}
	if term := l.Stats()["term"]; term == "0" || term == "1" {
		t.Fatalf("term %s after migration: the stored term 5 was lost", term)
	}
	apply(t, l, mustCmd("add", "z", 1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: from the WAL alone, the new entry included.
	fsm2 := newToyFSM()
	open(t, cfg, fsm2)
	want["z"] = 1
	if got := fsm2.state(); !maps.Equal(got, want) {
		t.Fatalf("state after reopen = %v, want %v", got, want)
	}
}

// A crash between the migration's two renames leaves the complete wal and
// raft.db side by side; Open finishes the migration from the WAL.
func TestOpenFinishesAnInterruptedMigration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	want := writeBoltLog(t, cfg, 10)
	// Do the copy by hand, stopping before raft.db is renamed.
	if err := migrateBolt(dir, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, boltFile+".migrated"), filepath.Join(dir, boltFile)); err != nil {
		t.Fatal(err)
	}
	fsm := newToyFSM()
	open(t, cfg, fsm)
	if got := fsm.state(); !maps.Equal(got, want) {
		t.Fatalf("state = %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, boltFile)); !os.IsNotExist(err) {
		t.Fatalf("raft.db still in place (stat: %v)", err)
	}
}

// writeBoltLog writes a one-voter log the way Open did before the WAL —
// bootstrap configuration, then n commands at term 5 — into raft.db, and
// returns the state those commands build.
func writeBoltLog(t *testing.T, cfg Config, n int) map[string]int64 {
	t.Helper()
	store, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, boltFile))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, snapshotRetain, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	rc := c.raftConfig()
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID))
	boot := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: trans.LocalAddr()}}}
	if err := raft.BootstrapCluster(rc, store, store, snaps, trans, boot); err != nil {
		t.Fatal(err)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 5); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	var logs []*raft.Log
	for i := range n {
		key := string(rune('a' + i%4))
		want[key] += int64(i)
		logs = append(logs, &raft.Log{Index: uint64(2 + i), Term: 5, Type: raft.LogCommand, Data: mustCmd("add", key, int64(i))})
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	return want
}
