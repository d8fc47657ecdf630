package objstore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"

	"github.com/picomq/picomq/broker/stream"
)

// Objects kept durable by a log.
//
// A small object's frames may travel inside the metadata command that
// commits it: the metadata log's fsync then makes them durable, and the
// object's own fdatasync, a second one on the append's path, can wait. Such
// an object is written with CloseUnsynced, written again from the log by
// EnsureObject when the log is replayed (after a power loss its file may be
// torn or gone), and made durable by SyncObjects before the log may drop the
// entries that hold its bytes.

// Frames returns a copy of the frames appended so far (the object past its
// header), or false when some were already handed to the file (an object
// above 4 MiB, too large to travel in a log entry anyway).
func (w *Writer) Frames() ([]byte, bool) {
	if w.closed || w.err != nil || w.written != HeaderSize {
		return nil, false
	}
	return append([]byte(nil), w.buf...), true
}

// CloseUnsynced writes the buffered frames and closes the file without
// fdatasync. The object is not durable: the caller keeps its bytes durable
// elsewhere (see above) until SyncObjects. After a failure the object stays;
// Abort removes it.
func (w *Writer) CloseUnsynced() error {
	if w.closed {
		if w.kept {
			return nil
		}
		return ErrClosed
	}
	err := w.err
	if err == nil {
		err = w.flush()
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = stream.StreamBackendFailed.Wrap(cerr, "op", "objstore.close", "object", w.id)
	}
	w.release()
	w.kept = err == nil
	return err
}

// EnsureObject makes object id's file in dir hold header + frames, exactly
// as the Writer that first wrote it left it, writing it (without fdatasync)
// unless it already does. It is for the replay of a log holding the
// object's frames, before a Store is open on dir.
func EnsureObject(dir string, id uint64, frames []byte) error {
	path := fileNameIn(dir, id)
	want := make([]byte, 0, HeaderSize+len(frames))
	want = append(appendHeader(want, id), frames...)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil
	}
	if err := PrepareDir(dir); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.rewrite", "object", id)
	}
	_, err = f.Write(want)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.rewrite", "object", id)
	}
	return nil
}

// errSyncFSUnsupported: the system has no syncfs.
var errSyncFSUnsupported = errors.New("objstore: syncfs unsupported")

// SyncObjects makes the files of objects ids in dir, and their names,
// survive a power loss. On Linux one syncfs(2) does it for all (thousands
// of objects may be waiting: an fdatasync each would keep the disk from the
// log's own fsyncs); elsewhere each file is fdatasynced, skipping those
// collected since (nothing references them any more), then dir.
func SyncObjects(dir string, ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := syncFS(dir); err == nil {
		return nil
	} else if !errors.Is(err, errSyncFSUnsupported) {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.syncfs", "path", dir)
	}
	for _, id := range ids {
		f, err := os.OpenFile(fileNameIn(dir, id), os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return stream.StreamBackendFailed.Wrap(err, "op", "objstore.open", "object", id)
		}
		err = fdatasync(f)
		f.Close()
		if err != nil {
			return stream.StreamBackendFailed.Wrap(err, "op", "objstore.fdatasync", "object", id)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.opendir", "path", dir)
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.fsyncdir", "path", dir)
	}
	return nil
}

// CreateLogged returns a Writer on a new object whose bytes a log keeps
// durable, meant to be closed with CloseUnsynced. As a crash may lose its
// name as well as its bytes, it takes a recycled file when one waits (no
// file creation, no directory fsync: ~0.4 ms of CPU and an fsync saved per
// object), else one of the files created ahead for it, else a file it
// creates — never with a directory fsync. Should the object be synced
// after all, its Sync also fsyncs the directory.
func (s *Store) CreateLogged() (*Writer, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	for len(s.spare) > 0 {
		// The most recently recycled file: its pages are the likeliest cached.
		id := s.spare[len(s.spare)-1]
		s.spare = s.spare[:len(s.spare)-1]
		delete(s.pooled, id)
		s.writing[id] = struct{}{}
		s.mu.Unlock()
		f, err := os.OpenFile(s.path(id), os.O_RDWR, 0)
		if err == nil {
			w := newWriter(s, id, f)
			w.nameUnsynced = true
			return w, nil
		}
		os.Remove(s.path(id))
		s.mu.Lock()
		delete(s.writing, id)
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
	}
	pf, ok := s.takeLocked(&s.loose)
	low := len(s.loose) <= looseSize/2
	s.mu.Unlock()
	if low {
		s.kickRefill()
	}
	if !ok {
		// Made here, on the append's path, but still without a directory
		// fsync.
		var err error
		if pf, err = s.createOne(false); err != nil {
			return nil, err
		}
	}
	w := newWriter(s, pf.id, pf.f)
	w.nameUnsynced = true
	return w, nil
}

// looseSize is how many files the store keeps created ahead for
// CreateLogged when no recycled file waits (at start, before the first
// collection).
const looseSize = 8

// refillLoose tops up the files CreateLogged takes when there is no spare:
// created ahead, off the append's path, like the pool's, but without the
// directory fsync their objects do not need. It runs where refill does.
func (s *Store) refillLoose() error {
	s.mu.Lock()
	if s.closed || s.poolSize <= 0 {
		s.mu.Unlock()
		return nil
	}
	want := looseSize - len(s.loose)
	// Spares serve CreateLogged first: while they last, no file is made.
	if len(s.loose) > looseSize/2 || want <= 0 || len(s.spare) >= want {
		s.mu.Unlock()
		return nil
	}
	ids, err := s.allocate(want)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	for _, id := range ids {
		s.pooled[id] = true
	}
	s.mu.Unlock()

	files, err := s.createFiles(ids, false)
	return s.addToPool(&s.loose, ids, files, err)
}
