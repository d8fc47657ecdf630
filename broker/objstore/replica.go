package objstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// Replicas: copies of other members' objects.
//
// In a cluster an object file written on one member is copied to others
// before the commit naming them is proposed. The copy arrives here as the
// object's bytes, header and frames; WriteReplica checks every frame as it
// streams them to a file aside, and only then gives it the object's name
// and makes file and name durable (fdatasync, directory fsync) before it
// returns — so the object's name only ever stands for a whole, checked
// copy, and a reader never sees one half written. ReadFrameRaw serves a frame, header
// included, for a member that fetches it (and checks it again itself).

var (
	// ErrReplicaID reports an id a replica may not take here: 0, one of
	// this store's unclaimed pool files, an object being written or held,
	// or an id of this store's own range it has not handed out (taking it
	// would collide with a later Create). A store without a range
	// (Options.IDBase 0) hands out every id, so it takes no replica above
	// the ids it handed out.
	ErrReplicaID = errors.New("objstore: not an id a replica may take here")

	// ErrReplicaConflict reports a replica of an object this store already
	// holds a different, valid copy of (neither the same bytes nor a
	// shorter version of them): ids are never reused, so one of the two is
	// wrong, and the copy in place is kept.
	ErrReplicaConflict = errors.New("objstore: a different object is stored under this id")
)

// partPrefix starts the names of replicas being received. No object name
// starts with it, so List, Remove and the orphan collection never see them;
// RemovePartialReplicas deletes those a crash left.
const partPrefix = ".replica-"

// AppendObjectHeader appends the header of object id to b: the first
// HeaderSize bytes of its file.
func AppendObjectHeader(b []byte, id uint64) []byte { return appendHeader(b, id) }

// AppendFrameHeader appends the FrameHeaderSize-byte header of a frame
// holding payload to b (its length and CRC-32C), as AppendFrame writes it.
func AppendFrameHeader(b, payload []byte) []byte { return appendFrameHeader(b, payload) }

// AppendHeader appends object id's file header to b: with its frames
// after it, the bytes of the object's file (a copy served from elsewhere
// than the file, as a journal).
func AppendHeader(b []byte, id uint64) []byte { return appendHeader(b, id) }

// CheckFrame checks a whole frame of object id read from pos — header and
// payload, as ReadFrameRaw returns it — and returns its payload (a slice of
// frame). A length or CRC that does not match is ErrCorrupt.
func CheckFrame(id uint64, pos int64, frame []byte) ([]byte, error) {
	if len(frame) <= FrameHeaderSize {
		return nil, corrupt(id, pos, "frame of %d bytes is no longer than its header", len(frame))
	}
	return checkFrame(id, pos, frame)
}

// ReadFrameRaw is ReadFrame returning the whole frame, header included, so
// that whoever it is sent to can check it again: the same checks, the same
// errors.
func (s *Store) ReadFrameRaw(id uint64, pos, n int64) ([]byte, error) {
	if pos < HeaderSize || n <= FrameHeaderSize || n > FrameHeaderSize+MaxPayload {
		return nil, fmt.Errorf("objstore: frame of %d bytes at %d in object %016x: %w", n, pos, id, ErrFrameSize)
	}
	buf, k, err := s.pread(id, pos, n)
	if err != nil {
		return nil, err
	}
	if k < n {
		return nil, corrupt(id, pos, "frame of %d bytes announced, the object ends after %d", n, k)
	}
	if _, err := checkFrame(id, pos, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// WriteReplica reads a copy of object id — its header and frames, to EOF —
// from r and makes it this store's file of id, durably: when it returns
// nil the file holds exactly those bytes, fdatasynced, under a name the
// directory's fsync made durable. It returns the object's size.
//
// Every frame is checked as it streams by; a header that is not id's, a
// frame whose length or CRC does not match or a body that ends inside a
// frame is ErrCorrupt, and nothing is left behind. A failure to read r is
// returned as r gave it (wrapped). The same bytes again are no error (the
// file is synced again and its time refreshed, so that the orphan
// collection gives it a fresh grace); a longer version of them, or bytes
// replacing a torn or corrupt file, replace it atomically; a different
// valid object is ErrReplicaConflict. See ErrReplicaID for the ids refused.
func (s *Store) WriteReplica(id uint64, r io.Reader) (int64, error) {
	if err := s.beginReplica(id); err != nil {
		return 0, err
	}
	defer s.doneWriting(id)

	f, err := os.CreateTemp(s.dir, fmt.Sprintf("%s%016x-*", partPrefix, id))
	if err != nil {
		return 0, stream.StreamBackendFailed.Wrap(err, "op", "objstore.replica.create", "object", id)
	}
	tmp := f.Name()
	size, err := receiveObject(f, id, r)
	if err == nil {
		err = s.placeReplica(id, f, tmp)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = stream.StreamBackendFailed.Wrap(cerr, "op", "objstore.replica.close", "object", id)
	}
	if err != nil {
		os.Remove(tmp) // gone already once renamed
		return 0, err
	}
	return size, nil
}

// beginReplica refuses an id a replica may not take and marks it as being
// written, so that the orphan collection leaves it alone, Remove refuses it
// and a second copy of it waits for no one: it is refused with ErrInUse.
func (s *Store) beginReplica(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	_, held := s.held[id]
	if id == 0 || s.pooled[id] || held || (s.own(id) && id >= s.nextID) {
		return fmt.Errorf("objstore: replica of object %016x: %w", id, ErrReplicaID)
	}
	if _, ok := s.writing[id]; ok {
		return fmt.Errorf("objstore: replica of object %016x: %w", id, ErrInUse)
	}
	s.writing[id] = struct{}{}
	return nil
}

// receiveObject streams object id from r into w, checking its header and
// every frame, and returns its size. Memory stays bounded whatever the
// frames' sizes: payloads are checked and written piece by piece.
func receiveObject(w io.Writer, id uint64, r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	bw := bufio.NewWriterSize(w, 256<<10)
	readFail := func(err error) error { return fmt.Errorf("objstore: receiving object %016x: %w", id, err) }
	writeFail := func(err error) error {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.replica.write", "object", id)
	}
	var hdr [HeaderSize]byte
	if k, err := io.ReadFull(br, hdr[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, checkHeader(hdr[:k], id)
		}
		return 0, readFail(err)
	}
	if err := checkHeader(hdr[:], id); err != nil {
		return 0, err
	}
	if _, err := bw.Write(hdr[:]); err != nil {
		return 0, writeFail(err)
	}
	pos := int64(HeaderSize)
	chunk := make([]byte, 64<<10)
	var fh [FrameHeaderSize]byte
	for {
		if _, err := io.ReadFull(br, fh[:]); err != nil {
			switch err {
			case io.EOF:
				if err := bw.Flush(); err != nil {
					return 0, writeFail(err)
				}
				return pos, nil
			case io.ErrUnexpectedEOF:
				return 0, corrupt(id, pos, "torn frame header: the copy ends inside it")
			default:
				return 0, readFail(err)
			}
		}
		length := int64(binary.LittleEndian.Uint32(fh[0:4]))
		if length == 0 || length > MaxPayload {
			return 0, corrupt(id, pos, "frame length %d out of range", length)
		}
		if _, err := bw.Write(fh[:]); err != nil {
			return 0, writeFail(err)
		}
		var crc uint32
		for left := length; left > 0; {
			p := chunk[:min(left, int64(len(chunk)))]
			if _, err := io.ReadFull(br, p); err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					return 0, corrupt(id, pos, "torn frame: %d bytes announced, the copy ends inside it", FrameHeaderSize+length)
				}
				return 0, readFail(err)
			}
			crc = crc32.Update(crc, castagnoli, p)
			if _, err := bw.Write(p); err != nil {
				return 0, writeFail(err)
			}
			left -= int64(len(p))
		}
		if want := binary.LittleEndian.Uint32(fh[4:8]); crc != want {
			return 0, corrupt(id, pos, "CRC-32C %08x, frame says %08x", crc, want)
		}
		pos += FrameHeaderSize + length
	}
}

// placeReplica gives f, the checked copy written at tmp, object id's
// name, unless the name already holds the same bytes, and makes file and
// name durable.
//
// The rename comes before the fdatasync: the name never stands for bytes
// that did not check, and on a journalling file system (ext4, XFS) the
// file's fdatasync commits the rename with it, which leaves the
// directory's fsync next to nothing to do — one journal commit per copy
// instead of two. Until both returned the copy is not answered, so nobody
// relies on it; a crash in between leaves a file that either checks (the
// same copy sent again finds it) or is torn (and is replaced).
func (s *Store) placeReplica(id uint64, f *os.File, tmp string) error {
	final := s.path(id)
	fail := func(op string, err error) error {
		return stream.StreamBackendFailed.Wrap(err, "op", op, "object", id)
	}
	switch have, err := compareFiles(final, tmp); {
	case err != nil:
		return fail("objstore.replica.compare", err)
	case have == sameBytes:
		// A copy sent again (the sender retried): make sure what is there
		// is durable, name included, and leave it in place so that no read
		// of it is disturbed.
		os.Remove(tmp)
		now := time.Now()
		if err := os.Chtimes(final, now, now); err != nil {
			return fail("objstore.replica.touch", err)
		}
		g, err := os.OpenFile(final, os.O_RDONLY, 0)
		if err != nil {
			return fail("objstore.replica.open", err)
		}
		err = fdatasync(g)
		g.Close()
		if err != nil {
			return fail("objstore.replica.fdatasync", err)
		}
	case have == differentBytes && validObjectFile(final, id):
		return fmt.Errorf("objstore: replica of object %016x: %w", id, ErrReplicaConflict)
	default: // no file, a shorter version, or a torn or corrupt one
		if err := os.Rename(tmp, final); err != nil {
			return fail("objstore.replica.rename", err)
		}
		// A handle cached for the file replaced would go on reading it.
		s.cache.evict(id)
		if err := fdatasync(f); err != nil {
			// The kernel may have dropped the pages that failed: a later
			// sync of this file could succeed without them. The name goes,
			// so that the next copy is written afresh.
			os.Remove(final)
			s.cache.evict(id)
			return fail("objstore.replica.fdatasync", err)
		}
	}
	if err := s.dirf.Sync(); err != nil {
		return fail("objstore.fsyncdir", err)
	}
	s.dirSyncs.Add(1)
	return nil
}

// How an object's file in place compares with a copy received.
const (
	noFile = iota
	sameBytes
	prefixBytes // the file in place is a strict prefix of the copy
	differentBytes
)

// compareFiles compares the file at have (which may be missing) with the
// file at got.
func compareFiles(have, got string) (int, error) {
	a, err := os.Open(have)
	if errors.Is(err, fs.ErrNotExist) {
		return noFile, nil
	}
	if err != nil {
		return 0, err
	}
	defer a.Close()
	b, err := os.Open(got)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	ra, rb := bufio.NewReaderSize(a, 64<<10), bufio.NewReaderSize(b, 64<<10)
	pa, pb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(ra, pa)
		nb, errb := io.ReadFull(rb, pb)
		if erra != nil && erra != io.EOF && erra != io.ErrUnexpectedEOF {
			return 0, erra
		}
		if errb != nil && errb != io.EOF && errb != io.ErrUnexpectedEOF {
			return 0, errb
		}
		k := min(na, nb)
		if !bytes.Equal(pa[:k], pb[:k]) {
			return differentBytes, nil
		}
		switch {
		case na == nb && erra != nil: // both ended here
			return sameBytes, nil
		case na < nb: // have ended first
			return prefixBytes, nil
		case na > nb:
			return differentBytes, nil // got is shorter
		}
	}
}

// validObjectFile reports whether the file at path is a whole, valid copy
// of object id: its header, then frames that all check, to its end.
func validObjectFile(path string, id uint64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = receiveObject(io.Discard, id, f)
	return err == nil
}

// RemovePartialReplicas deletes the replicas a crash left half received.
// Call it at start, before any replica is received.
func (s *Store) RemovePartialReplicas() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.readdir", "path", s.dir)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), partPrefix) {
			if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return stream.StreamBackendFailed.Wrap(err, "op", "objstore.remove", "path", e.Name())
			}
		}
	}
	return nil
}

// OpenObject opens the file of object id for reading it whole, as a copy
// is sent to another member (a repair or a drain): the receiver checks
// every frame (WriteReplica), so nothing is checked here. It returns the
// file's size; an object this store holds no file of is fs.ErrNotExist.
func (s *Store) OpenObject(id uint64) (*os.File, int64, error) {
	f, err := os.Open(s.path(id))
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, stream.StreamBackendFailed.Wrap(err, "op", "objstore.open", "object", id)
	}
	return f, st.Size(), nil
}
