package metalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/migrate"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/picomq/picomq/broker/diskio"
	"go.etcd.io/bbolt"
)

// boltFile is where data directories written before the WAL kept the log:
// one raft-boltdb database. Open migrates it (migrateBolt).
const boltFile = "raft.db"

// lockDir takes an exclusive, non-blocking flock on dir/LOCK (dir exists).
// The lock goes with the process, so a broker killed with -9 leaves nothing
// to clean up.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("metalog: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("metalog: %s is in use by another open metadata log (lock %s held)", dir, path)
		}
		return nil, fmt.Errorf("metalog: lock %s: %w", path, err)
	}
	return f, nil
}

// walStore is raft's LogStore and StableStore. It owns the WAL's meta
// database because WAL.Close (v0.4.0) leaves that bbolt file open — and
// locked, so the next Open in the same process would block on it.
//
// It also works around raft-wal v0.4.0's known faults (walfix.go): its
// StoreLogs and DeleteRange are serialized here and StoreLogs returns only
// once a segment rotation it started has finished; and an append whose
// write failed (a full volume, EIO) leaves raft-wal's in-memory tail ahead
// of its file, so that every later append fails as non-monotonic and a
// one-voter log never regains its leader: StoreLogs then reopens the WAL,
// which recovers the tail from the file — the last good commit.
type walStore struct {
	dir          string
	segmentBytes int
	logger       hclog.Logger

	rw    sync.RWMutex // held for writing only while the WAL is reopened
	wal   *wal.WAL     // nil after a reopen failed: calls fail until one succeeds
	meta  *metadb.BoltMetaDB
	files *zeroedFS
	seals *sealWatch

	mu sync.Mutex // serializes StoreLogs and DeleteRange (see sealWatch)

	syncFailed func(path string, err error) // Config.SyncFailed
	inject     diskio.Injector              // Config.FS, when it injects faults
}

// errWALClosed answers calls between a failed reopen and the next.
var errWALClosed = errors.New("metalog: the WAL could not be reopened after a failed write")

func (s *walStore) Close() error {
	s.rw.Lock()
	defer s.rw.Unlock()
	return s.closeLocked()
}

func (s *walStore) closeLocked() error {
	if s.wal == nil {
		return nil
	}
	err := s.wal.Close()
	s.files.Close()
	err = errors.Join(err, s.meta.Close())
	s.wal = nil
	return err
}

func openWAL(dir string, segmentBytes int, logger hclog.Logger) (*walStore, error) {
	return openWALWith(dir, segmentBytes, logger, nil, nil)
}

// openWALWith is openWAL telling syncFailed of failed segment fsyncs (see
// Config.SyncFailed) and asking inject, when set, before each segment
// write and sync (tests).
func openWALWith(dir string, segmentBytes int, logger hclog.Logger, syncFailed func(string, error), inject diskio.Injector) (*walStore, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("metalog: create %s: %w", dir, err)
	}
	s := &walStore{dir: dir, segmentBytes: segmentBytes, logger: logger, syncFailed: syncFailed, inject: inject}
	if err := s.openLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *walStore) openLocked() error {
	files, err := newZeroedFS(s.dir, s.segmentBytes, s.logger.Named("wal"))
	if err != nil {
		return err
	}
	files.syncFailed, files.inject = s.syncFailed, s.inject
	if old := s.files; old != nil { // a reopen: the counts run on
		files.fromSpare.Store(old.fromSpare.Load())
		files.fallocated.Store(old.fallocated.Load())
	}
	meta := &metadb.BoltMetaDB{}
	seals := &sealWatch{}
	filer := segment.NewFiler(s.dir, files)
	if err := finishRotation(s.dir, meta, filer, s.logger); err != nil {
		files.Close()
		meta.Close()
		return err
	}
	w, err := wal.Open(s.dir, wal.WithLogger(s.logger.Named("wal")), wal.WithMetaStore(meta), wal.WithSegmentSize(s.segmentBytes),
		wal.WithSegmentFiler(repairingFiler{Filer: filer, seals: seals}))
	if err != nil {
		files.Close()
		meta.Close()
		return fmt.Errorf("metalog: open the log in %s: %w", s.dir, err)
	}
	s.wal, s.meta, s.files, s.seals = w, meta, files, seals
	return nil
}

// reopen closes the WAL and opens it again from its files, after a failed
// append. The caller holds s.mu, not s.rw.
func (s *walStore) reopen(cause error) {
	s.rw.Lock()
	defer s.rw.Unlock()
	if err := s.closeLocked(); err != nil {
		s.logger.Warn("closing the WAL after a failed append", "error", err)
	}
	if err := s.openLocked(); err != nil {
		s.logger.Error("cannot reopen the WAL after a failed append; the next append tries again", "cause", cause, "error", err)
		return
	}
	s.logger.Warn("reopened the WAL after a failed append: its tail is the last good commit", "cause", cause)
}

// current returns the open WAL with s.rw read-locked; the caller unlocks.
func (s *walStore) current() (*wal.WAL, error) {
	s.rw.RLock()
	if s.wal == nil {
		s.rw.RUnlock()
		return nil, errWALClosed
	}
	return s.wal, nil
}

func (s *walStore) FirstIndex() (uint64, error) {
	w, err := s.current()
	if err != nil {
		return 0, err
	}
	defer s.rw.RUnlock()
	return w.FirstIndex()
}

func (s *walStore) LastIndex() (uint64, error) {
	w, err := s.current()
	if err != nil {
		return 0, err
	}
	defer s.rw.RUnlock()
	return w.LastIndex()
}

func (s *walStore) GetLog(index uint64, log *raft.Log) error {
	w, err := s.current()
	if err != nil {
		return err
	}
	defer s.rw.RUnlock()
	return w.GetLog(index, log)
}

func (s *walStore) Set(key, val []byte) error {
	w, err := s.current()
	if err != nil {
		return err
	}
	defer s.rw.RUnlock()
	return w.Set(key, val)
}

func (s *walStore) Get(key []byte) ([]byte, error) {
	w, err := s.current()
	if err != nil {
		return nil, err
	}
	defer s.rw.RUnlock()
	return w.Get(key)
}

func (s *walStore) SetUint64(key []byte, val uint64) error {
	w, err := s.current()
	if err != nil {
		return err
	}
	defer s.rw.RUnlock()
	return w.SetUint64(key, val)
}

func (s *walStore) GetUint64(key []byte) (uint64, error) {
	w, err := s.current()
	if err != nil {
		return 0, err
	}
	defer s.rw.RUnlock()
	return w.GetUint64(key)
}

// migrateBolt moves a log kept in raft.db (raft-boltdb, before the WAL) into
// a WAL, once. It copies into wal.migrating and renames that to wal only when
// every entry and the term and vote are in and synced, so a crash part way
// leaves raft.db authoritative and the next start copies again; raft.db is
// then renamed raft.db.migrated, kept for the operator to delete.
func migrateBolt(dir string, logger hclog.Logger) error {
	src := filepath.Join(dir, boltFile)
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("metalog: stat %s: %w", src, err)
	}
	final := filepath.Join(dir, walDir)
	if _, err := os.Stat(final); err == nil {
		// wal appears only once it holds the whole copy: a crash came
		// between the two renames. Finish the second.
		return finishMigration(dir, src, logger)
	}
	tmp := filepath.Join(dir, walDir+".migrating")
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("metalog: clear %s: %w", tmp, err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: src, BoltOptions: &bbolt.Options{Timeout: time.Second, ReadOnly: true}})
	if err != nil {
		return fmt.Errorf("metalog: open %s to migrate it: %w", src, err)
	}
	defer bolt.Close()
	w, err := openWAL(tmp, DefaultSegmentBytes, logger)
	if err != nil {
		return err
	}
	copyErr := migrate.CopyLogs(context.Background(), w, bolt, 1<<20, nil)
	if copyErr == nil {
		copyErr = copyStable(w, bolt)
	}
	if err := errors.Join(copyErr, w.Close()); err != nil {
		return fmt.Errorf("metalog: migrate %s to a WAL: %w", src, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("metalog: rename %s: %w", tmp, err)
	}
	return finishMigration(dir, src, logger)
}

// copyStable copies the keys hashicorp/raft keeps in its StableStore.
// migrate.CopyStable would do it but fails on a key never written, and a
// node that never voted has no LastVoteTerm.
func copyStable(dst raft.StableStore, src *raftboltdb.BoltStore) error {
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		v, err := src.GetUint64([]byte(k))
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if err := dst.SetUint64([]byte(k), v); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	v, err := src.Get([]byte("LastVoteCand"))
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read LastVoteCand: %w", err)
	}
	return dst.Set([]byte("LastVoteCand"), v)
}

func finishMigration(dir, src string, logger hclog.Logger) error {
	if err := os.Rename(src, src+".migrated"); err != nil {
		return fmt.Errorf("metalog: rename %s: %w", src, err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	logger.Info("migrated the metadata log from raft.db to a WAL; raft.db.migrated may be deleted", "dir", dir)
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("metalog: open %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("metalog: fsync %s: %w", dir, err)
	}
	return nil
}
