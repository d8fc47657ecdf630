package metalog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// raft-wal v0.4.0, the newest release the module proxy here serves, has
// three faults that lose the log or stop it; this file works around each
// with the library's exported API. Each has a test in walfix_test.go that
// fails without its workaround.
//
//  1. A tail truncation — raft clearing a suffix of its log, as a follower
//     does when a new leader's entries conflict with a deposed leader's —
//     marks the tail segment sealed in the meta database but never writes
//     the index block a sealed segment is read through. The running
//     process reads it from the writer's memory; the next Open cannot read
//     it ("sealed segment has no index block") and raft.NewRaft panics, so
//     the broker never starts on its directory again (hashicorp/raft-wal#31,
//     fixed upstream by #33). repairingFiler.Open reads such a segment the
//     way a crashed tail is read: its frames scanned and checksummed.
//
//  2. StoreLogs rotates a full segment in the background, and DeleteRange
//     does not wait for that rotation: raft's compaction (DeleteRange of a
//     prefix, from the snapshot goroutine) or a tail truncation landing in
//     between makes the rotation seal the wrong segment and start the next
//     one at index 1, after which every append fails. walStore serializes
//     the two and StoreLogs returns only once its rotation has finished
//     (sealWatch): a rotation costs the append that fills a segment one
//     segment creation, which the zeroed spare makes a link and an open.
//
//  3. A process killed after the append that sealed a segment but before
//     the rotation committed leaves the tail sealed in its file and unsealed
//     in the meta database; Open recovers it as the tail, and every append
//     after fails with "segment is sealed". finishRotation completes such a
//     rotation in the meta database before Open.

// repairingFiler is raft-wal's segment filer with faults 1 and 2 worked
// around: it opens segments sealed without an index block, and it tells
// seals when a rotation has created the next segment.
type repairingFiler struct {
	*segment.Filer
	seals *sealWatch
}

func (f repairingFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	if info.IndexStart == 0 && !info.SealTime.IsZero() {
		// Only entries the meta database still counts are asked of it: the
		// WAL reads an index from the segment with the greatest base at or
		// below it, and the segment after a truncation starts at the
		// cleared suffix.
		return f.Filer.RecoverTail(info)
	}
	return f.Filer.Open(info)
}

func (f repairingFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	w, err := f.Filer.Create(info)
	if err != nil {
		return nil, err
	}
	f.seals.created()
	return watchedWriter{SegmentWriter: w, seals: f.seals}, nil
}

func (f repairingFiler) RecoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	w, err := f.Filer.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	return watchedWriter{SegmentWriter: w, seals: f.seals}, nil
}

// watchedWriter is a tail segment's writer that tells seals when the WAL
// learns the segment is full (the WAL asks Sealed after each append, and
// rotates when it says yes).
type watchedWriter struct {
	types.SegmentWriter
	seals *sealWatch
}

func (w watchedWriter) Sealed() (bool, uint64, error) {
	sealed, indexStart, err := w.SegmentWriter.Sealed()
	if sealed && err == nil {
		w.seals.sealed()
	}
	return sealed, indexStart, err
}

// sealWatch follows the WAL's background rotations: pending from the seal
// a rotation starts on until the filer creates the next segment.
type sealWatch struct {
	mu      sync.Mutex
	pending chan struct{} // nil when no rotation is under way
}

func (s *sealWatch) sealed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = make(chan struct{})
	}
}

func (s *sealWatch) created() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending != nil {
		close(s.pending)
		s.pending = nil
	}
}

func (s *sealWatch) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// rotationWait bounds how long an append waits for the rotation it
// started: the rotation is a meta database commit and a file creation, so
// a rotation that takes this long has failed (raft-wal logs why) and the
// append is reported failed rather than left hanging.
const rotationWait = 30 * time.Second

func (s *walStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends, and waits for the segment rotation the append
// started, if any (fault 2).
func (s *walStore) StoreLogs(logs []*raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wal == nil { // a reopen failed (s.mu keeps it from changing now)
		s.reopen(errWALClosed)
	}
	w, err := s.current()
	if err != nil {
		return err
	}
	err = w.StoreLogs(logs)
	seals := s.seals
	s.rw.RUnlock()
	if err != nil {
		s.reopen(err)
		return err
	}
	if done := seals.wait(); done != nil {
		select {
		case <-done:
		case <-time.After(rotationWait):
			// The entries are in, committed and synced: only the next
			// segment is missing (a full volume). Failing the append
			// would leave raft's last index behind the WAL's, and every
			// later append non-monotonic; reopening seals the tail and
			// makes the next segment, or fails until there is room.
			s.reopen(fmt.Errorf("metalog: the WAL's segment rotation did not finish within %s (the WAL's log says why)", rotationWait))
		}
	}
	return nil
}

// DeleteRange truncates the log's head or tail, never while a rotation is
// under way (fault 2).
func (s *walStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.current()
	if err != nil {
		return err
	}
	defer s.rw.RUnlock()
	return w.DeleteRange(min, max)
}

// finishRotation completes in the meta database a rotation that a crash
// interrupted (fault 3): when the tail segment's file is sealed, the tail
// is recorded sealed at its last committed entry — read, like a truncated
// tail, by scanning its frames, since the index block of a torn final
// write may be torn too — and an empty tail after it, whose file the WAL
// creates on Open (as after a crash between a rotation's commit and its
// file's creation).
func finishRotation(dir string, meta *metadb.BoltMetaDB, filer *segment.Filer, logger hclog.Logger) error {
	ps, err := meta.Load(dir)
	if err != nil {
		return fmt.Errorf("metalog: load the WAL's meta database in %s: %w", dir, err)
	}
	if len(ps.Segments) == 0 {
		return nil
	}
	tail := ps.Segments[len(ps.Segments)-1]
	if !tail.SealTime.IsZero() {
		return nil
	}
	w, err := filer.RecoverTail(tail)
	if errors.Is(err, os.ErrNotExist) {
		return nil // created by Open
	}
	if err != nil {
		return fmt.Errorf("metalog: recover the WAL's tail segment %s in %s: %w", segment.FileName(tail), dir, err)
	}
	sealed, _, serr := w.Sealed()
	last := w.LastIndex()
	if err := errors.Join(serr, w.Close()); err != nil {
		return fmt.Errorf("metalog: recover the WAL's tail segment %s in %s: %w", segment.FileName(tail), dir, err)
	}
	if !sealed || last == 0 {
		return nil
	}
	now := time.Now()
	tail.SealTime = now
	tail.MaxIndex = last
	tail.IndexStart = 0
	ps.Segments[len(ps.Segments)-1] = tail
	ps.Segments = append(ps.Segments, types.SegmentInfo{
		ID:         ps.NextSegmentID,
		BaseIndex:  last + 1,
		MinIndex:   last + 1,
		Codec:      tail.Codec,
		SizeLimit:  tail.SizeLimit,
		CreateTime: now,
	})
	ps.NextSegmentID++
	if err := meta.CommitState(ps); err != nil {
		return fmt.Errorf("metalog: record the interrupted rotation of %s in %s: %w", segment.FileName(tail), dir, err)
	}
	logger.Warn("finished a WAL segment rotation a crash interrupted", "segment", segment.FileName(tail), "lastIndex", last)
	return nil
}
