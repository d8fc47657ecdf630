package objstore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// Held objects.
//
// A small object whose frames travel in the metadata command that commits
// it (core's inline commits) is already durable in the metadata log: it
// need not be a file at once. Hold keeps its frames in memory under a new
// id, and ReadFrame and ReadFrames serve them from there. Most such objects
// are merged into segments, and removed, within seconds: they never cost a
// file creation, a write, a close and an unlink. The others are written to
// files (without fdatasync) by Spill, before the metadata log may drop the
// entries that hold them, once they are held for long, or when more than
// Options.MaxHeldBytes are held (oldest first). Close forgets what is held:
// the metadata log still has it, and its replay holds it again (Restore).

// heldObject is one object kept in memory.
type heldObject struct {
	frames []byte // the object past its header; never modified
	since  time.Time
}

// AppendFrame appends one frame holding payload to frames, the bytes of an
// object past its header: what Hold takes. The frame starts at position
// HeaderSize+len(frames) of the object.
func AppendFrame(frames, payload []byte) []byte {
	return append(appendFrameHeader(frames, payload), payload...)
}

// Hold keeps frames (built with AppendFrame; the store keeps the slice, the
// caller must not modify it) as a new object in memory and returns its id.
// The caller keeps the bytes durable elsewhere until Spill and SyncObjects.
func (s *Store) Hold(frames []byte) (uint64, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, ErrClosed
	}
	ids, err := s.allocate(1)
	if err != nil {
		s.mu.Unlock()
		return 0, err
	}
	id := ids[0]
	s.holdLocked(id, frames)
	return id, nil
}

// holdLocked keeps frames as object id, unless it is held already, and
// unlocks s.mu; past MaxHeldBytes it has the refill goroutine spill the
// oldest.
func (s *Store) holdLocked(id uint64, frames []byte) {
	if _, ok := s.held[id]; !ok {
		s.held[id] = &heldObject{frames: frames, since: time.Now()}
		s.heldOrder = append(s.heldOrder, id)
		s.heldBytes += int64(len(frames))
	}
	over := s.maxHeld > 0 && s.heldBytes > s.maxHeld
	s.mu.Unlock()
	if over {
		s.kickRefill() // the refill goroutine spills too
	}
}

// Restore holds frames again as object id, an object committed earlier
// whose bytes the caller replayed from where they are durable (the
// metadata log). A file of id left by an earlier spill is kept when it
// holds exactly header + frames, and the object is not held then; any
// other file of id (torn, truncated or corrupted by a crash before it was
// synced) is removed first, so that a later Spill writes the object whole.
// It reports whether the object is held.
func (s *Store) Restore(id uint64, frames []byte) (bool, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return false, ErrClosed
	case id == 0 || s.pooled[id] || (s.own(id) && id >= s.nextID):
		s.mu.Unlock()
		return false, stream.StreamBackendFailed.With("op", "objstore.restore", "object", id, "reason", "not an id of a committed object")
	}
	if _, ok := s.held[id]; ok {
		s.mu.Unlock()
		return true, nil
	}
	s.mu.Unlock()
	path := s.path(id)
	if fi, err := os.Stat(path); err == nil {
		if fi.Size() == int64(HeaderSize+len(frames)) && sameObject(path, id, frames) {
			return false, nil
		}
		s.cache.evict(id)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, stream.StreamBackendFailed.Wrap(err, "op", "objstore.restore", "object", id)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, ErrClosed
	}
	s.holdLocked(id, frames)
	return true, nil
}

// sameObject reports whether the file at path holds exactly object id's
// header followed by frames.
func sameObject(path string, id uint64, frames []byte) bool {
	have, err := os.ReadFile(path)
	if err != nil || len(have) != HeaderSize+len(frames) {
		return false
	}
	var hdr [HeaderSize]byte
	return bytes.Equal(have[:HeaderSize], appendHeader(hdr[:0], id)) && bytes.Equal(have[HeaderSize:], frames)
}

// Held reports whether object id is held in memory (not yet a file).
func (s *Store) Held(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.held[id]
	return ok
}

// HeldBytes returns how many frame bytes are held in memory.
func (s *Store) HeldBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldBytes
}

// Spilled returns how many held objects were written to files so far.
func (s *Store) Spilled() int64 { return s.spilled.Load() }

// SpilledBytes returns how many bytes spills wrote so far.
func (s *Store) SpilledBytes() int64 { return s.spilledBytes.Load() }

// heldSpan returns n bytes of held object id from pos (shared, read-only),
// k < n when the object ends first, and false when id is not held.
func (s *Store) heldSpan(id uint64, pos, n int64) (buf []byte, k int64, ok bool) {
	s.mu.Lock()
	h, ok := s.held[id]
	s.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	end := int64(HeaderSize + len(h.frames))
	if pos >= end {
		return nil, 0, true
	}
	from := pos - HeaderSize
	to := min(from+n, end-HeaderSize)
	return h.frames[from:to:to], to - from, true
}

// dropHeld forgets held object id; it reports whether it was held.
func (s *Store) dropHeld(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropHeldLocked(id)
}

// dropHeldLocked is dropHeld for a caller holding s.mu.
func (s *Store) dropHeldLocked(id uint64) bool {
	h, ok := s.held[id]
	if ok {
		delete(s.held, id)
		s.heldBytes -= int64(len(h.frames))
	}
	return ok
}

// Spill writes the held objects among ids to their files, without
// fdatasync (SyncObjects makes them durable), and stops holding them.
func (s *Store) Spill(ids []uint64) error {
	for _, id := range ids {
		if err := s.spill(id); err != nil {
			return err
		}
	}
	return nil
}

// SpillOlder spills every object held for longer than age, oldest first.
func (s *Store) SpillOlder(age time.Duration) error {
	return s.spillWhile(func(h *heldObject, _ int64) bool { return time.Since(h.since) > age })
}

// spillOver spills the oldest held objects while more than half of
// Options.MaxHeldBytes are held, once more than all of it is.
func (s *Store) spillOver() error {
	s.mu.Lock()
	over := s.maxHeld > 0 && s.heldBytes > s.maxHeld
	s.mu.Unlock()
	if !over {
		return nil
	}
	return s.spillWhile(func(_ *heldObject, heldBytes int64) bool { return heldBytes > s.maxHeld/2 })
}

// spillWhile spills held objects, oldest first, while more returns true
// for the oldest.
func (s *Store) spillWhile(more func(h *heldObject, heldBytes int64) bool) error {
	for {
		s.mu.Lock()
		// heldOrder keeps the ids in the order they were held; ids no
		// longer held are skipped here.
		for len(s.heldOrder) > 0 && s.held[s.heldOrder[0]] == nil {
			s.heldOrder = s.heldOrder[1:]
		}
		if len(s.heldOrder) == 0 || !more(s.held[s.heldOrder[0]], s.heldBytes) {
			s.mu.Unlock()
			return nil
		}
		id := s.heldOrder[0]
		s.mu.Unlock()
		if err := s.spill(id); err != nil {
			return err
		}
	}
}

// spill writes held object id to its file and stops holding it. Spills run
// one at a time; reads go on from memory until the file is complete.
func (s *Store) spill(id uint64) error {
	s.spillMu.Lock()
	defer s.spillMu.Unlock()
	s.mu.Lock()
	h, ok := s.held[id]
	s.mu.Unlock()
	if !ok {
		return nil // removed, or spilled already
	}
	if err := writeObjectFile(s.path(id), id, h.frames, os.O_EXCL, "objstore.spill"); err != nil {
		return err
	}
	if !s.dropHeld(id) {
		// Removed while it was being written: nobody wants the file.
		os.Remove(s.path(id))
	}
	s.spilled.Add(1)
	s.spilledBytes.Add(int64(HeaderSize + len(h.frames)))
	return nil
}

// writeObjectFile writes header + frames to path without fdatasync. flag
// adds to O_WRONLY|O_CREATE: O_EXCL for a new object, O_TRUNC to replace a
// torn one; op names the operation in errors.
func writeObjectFile(path string, id uint64, frames []byte, flag int, op string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = errors.Join(err, errors.New("an object file with this id exists already"))
		}
		return stream.StreamBackendFailed.Wrap(err, "op", op, "object", id)
	}
	var hdr [HeaderSize]byte
	_, err = f.Write(appendHeader(hdr[:0], id))
	if err == nil {
		_, err = f.Write(frames)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return stream.StreamBackendFailed.Wrap(err, "op", op, "object", id)
	}
	return nil
}
