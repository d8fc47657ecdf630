package objstore

import (
	"bufio"
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/picomq/picomq/broker/stream"
)

// handle is one read-only file descriptor of an object, shared by the reads
// that hold a reference to it. It is closed when it has left the cache and
// its last reader released it, so eviction never closes a file under a read.
type handle struct {
	id   uint64
	f    *os.File
	refs int
	elem *list.Element // place in the LRU list; nil once out of the cache
}

// handleCache keeps up to max read handles open, least recently used out
// first, so that a hot object costs a pread and not an open per read.
type handleCache struct {
	dir string
	max int

	mu       sync.Mutex
	closed   bool
	m        map[uint64]*handle
	lru      list.List // of *handle, most recently used at the front
	removals uint64    // evict calls so far: see acquire

	// live counts, per object, the handles acquired and not released,
	// cached or not — counted before the file is even opened, so that
	// retire can tell that no reader holds the file or is opening it.
	// retired marks the objects being recycled: acquire treats them as gone.
	live    map[uint64]int
	retired map[uint64]bool
}

func newHandleCache(dir string, max int) *handleCache {
	if max <= 0 {
		max = defaultMaxOpenFiles
	}
	return &handleCache{dir: dir, max: max, m: make(map[uint64]*handle), live: make(map[uint64]int), retired: make(map[uint64]bool)}
}

// acquire returns a referenced handle on object id, opening the file and
// checking its header if it is not cached. The caller releases it.
func (c *handleCache) acquire(id uint64) (*handle, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.retired[id] {
		c.mu.Unlock()
		return nil, stream.StreamBackendFailed.Wrap(fs.ErrNotExist, "op", "objstore.open", "object", id)
	}
	c.live[id]++
	if h, ok := c.m[id]; ok {
		h.refs++
		c.lru.MoveToFront(h.elem)
		c.mu.Unlock()
		return h, nil
	}
	removals := c.removals
	c.mu.Unlock()

	// Open outside the lock: an open can be slow, and reads of other,
	// cached objects must not wait behind it.
	f, err := c.open(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.closed {
		f.Close()
		err = ErrClosed
	}
	if err != nil {
		c.unlive(id)
		return nil, err
	}
	if h, ok := c.m[id]; ok { // another reader opened it meanwhile
		f.Close()
		h.refs++
		c.lru.MoveToFront(h.elem)
		return h, nil
	}
	h := &handle{id: id, f: f, refs: 1}
	if c.removals != removals {
		// An object was removed while we opened: perhaps this one, after our
		// open found it. Use the handle for this read only, so the cache
		// never serves a removed object.
		return h, nil
	}
	h.elem = c.lru.PushFront(h)
	c.m[id] = h
	for c.lru.Len() > c.max {
		c.drop(c.lru.Back().Value.(*handle))
	}
	return h, nil
}

// open opens object id's file and checks its header.
func (c *handleCache) open(id uint64) (*os.File, error) {
	f, err := os.Open(filepath.Join(c.dir, fileName(id)))
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "objstore.open", "object", id)
	}
	var hdr [HeaderSize]byte
	if k, err := f.ReadAt(hdr[:], 0); k < HeaderSize {
		f.Close()
		if err != io.EOF {
			return nil, stream.StreamBackendFailed.Wrap(err, "op", "objstore.read", "object", id)
		}
		return nil, checkHeader(hdr[:k], id)
	}
	if err := checkHeader(hdr[:], id); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// unlive forgets one acquisition of id. The caller holds c.mu.
func (c *handleCache) unlive(id uint64) {
	if c.live[id]--; c.live[id] <= 0 {
		delete(c.live, id)
	}
}

// retire marks object id as going away for good and drops its cached
// handle, if no reader holds or is opening a handle of it; it returns false
// (and changes nothing) otherwise. From a true answer until unretire,
// acquire(id) fails as for a missing file, so the caller may reuse the
// file: no reader can see it any more.
func (c *handleCache) retire(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[id] > 0 || c.closed {
		return false
	}
	c.retired[id] = true
	c.removals++
	if h, ok := c.m[id]; ok {
		c.drop(h)
	}
	return true
}

// unretire ends retire(id), once the file no longer has id's name.
func (c *handleCache) unretire(id uint64) {
	c.mu.Lock()
	delete(c.retired, id)
	c.mu.Unlock()
}

// release gives back a reference taken by acquire.
func (c *handleCache) release(h *handle) {
	c.mu.Lock()
	c.unlive(h.id)
	h.refs--
	closeIt := h.refs == 0 && h.elem == nil
	c.mu.Unlock()
	if closeIt {
		h.f.Close()
	}
}

// drop takes h out of the cache, closing it unless a read still holds it.
// The caller holds c.mu.
func (c *handleCache) drop(h *handle) {
	c.lru.Remove(h.elem)
	h.elem = nil
	delete(c.m, h.id)
	if h.refs == 0 {
		h.f.Close()
	}
}

// evict forgets object id's handle, before the object is removed.
func (c *handleCache) evict(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removals++
	if h, ok := c.m[id]; ok {
		c.drop(h)
	}
}

func (c *handleCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for c.lru.Len() > 0 {
		c.drop(c.lru.Back().Value.(*handle))
	}
}

// len returns the number of cached handles, for tests.
func (c *handleCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// ReadFrame reads the frame of n bytes at pos in object id, as AppendFrame
// returned them, and returns its payload after checking its length and CRC.
// Bytes that do not check are ErrCorrupt (a *CorruptError); a file that
// cannot be opened or read is stream.StreamBackendFailed, wrapping the
// system's error (errors.Is(err, fs.ErrNotExist) for a missing object).
// It uses one pread on a cached handle, or none for a held object (whose
// payload it returns without a copy: callers never modify a payload), and
// is safe for concurrent use.
func (s *Store) ReadFrame(id uint64, pos, n int64) ([]byte, error) {
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
	return checkFrame(id, pos, buf)
}

// pread reads n bytes of object id from pos with one pread on a cached
// handle, or slices them from a held object. An object that ends first is
// no error here: k < n says so, for the caller to report in its own terms.
func (s *Store) pread(id uint64, pos, n int64) (buf []byte, k int64, err error) {
	if buf, k, ok := s.heldSpan(id, pos, n); ok {
		return buf, k, nil
	}
	h, err := s.cache.acquire(id)
	if err != nil {
		return nil, 0, err
	}
	defer s.cache.release(h)
	buf = make([]byte, n)
	got, err := h.f.ReadAt(buf, pos)
	if got < len(buf) && err != io.EOF {
		return nil, 0, stream.StreamBackendFailed.Wrap(err, "op", "objstore.read", "object", id)
	}
	return buf, int64(got), nil
}

// ReadFrames reads len(lens) consecutive frames of object id, the first at
// pos, each of the length AppendFrame returned, with one pread, and returns
// their payloads after checking each as ReadFrame does. It is for readers
// of many small frames at once (merging), where one read per frame would
// cost a system call each.
func (s *Store) ReadFrames(id uint64, pos int64, lens []int64) ([][]byte, error) {
	var total int64
	for _, n := range lens {
		if n <= FrameHeaderSize || n > FrameHeaderSize+MaxPayload {
			return nil, fmt.Errorf("objstore: frame of %d bytes in object %016x: %w", n, id, ErrFrameSize)
		}
		total += n
	}
	if pos < HeaderSize || len(lens) == 0 {
		return nil, fmt.Errorf("objstore: %d frames at %d in object %016x: %w", len(lens), pos, id, ErrFrameSize)
	}
	buf, k, err := s.pread(id, pos, total)
	if err != nil {
		return nil, err
	}
	if k < total {
		return nil, corrupt(id, pos, "%d frames of %d bytes announced, the object ends after %d", len(lens), total, k)
	}
	out := make([][]byte, len(lens))
	var off int64
	for i, n := range lens {
		p, err := checkFrame(id, pos+off, buf[off:off+n:off+n])
		if err != nil {
			return nil, err
		}
		out[i] = p
		off += n
	}
	return out, nil
}

// checkFrame checks a whole frame read from pos and returns its payload.
func checkFrame(id uint64, pos int64, frame []byte) ([]byte, error) {
	length := binary.LittleEndian.Uint32(frame[0:4])
	if int64(length) != int64(len(frame)-FrameHeaderSize) {
		return nil, corrupt(id, pos, "frame holds %d payload bytes, %d expected", length, len(frame)-FrameHeaderSize)
	}
	payload := frame[FrameHeaderSize:]
	if want, got := binary.LittleEndian.Uint32(frame[4:8]), checksum(payload); want != got {
		return nil, corrupt(id, pos, "CRC-32C %08x, frame says %08x", got, want)
	}
	return payload, nil
}

// Scan walks object id's frames in order, from the header on, calling fn with
// each frame's position, length and payload (a fresh slice fn may keep). It
// returns validEnd, the offset where the frames that checked end:
//
//   - nil error: the object ends exactly at validEnd, after whole frames;
//   - ErrCorrupt (a *CorruptError at validEnd): what follows validEnd is a
//     torn or corrupt frame (or, with validEnd 0, the header is not this
//     object's) and Scan stopped there;
//   - fn's error: fn refused the frame at validEnd;
//   - stream.StreamBackendFailed: the file could not be read.
//
// Scan reads the object as it is when Scan starts; it is meant for recovery
// and tooling, not the read path.
func (s *Store) Scan(id uint64, fn func(pos, n int64, payload []byte) error) (validEnd int64, err error) {
	h, err := s.cache.acquire(id)
	if err != nil {
		return 0, err
	}
	defer s.cache.release(h)
	fi, err := h.f.Stat()
	if err != nil {
		return HeaderSize, stream.StreamBackendFailed.Wrap(err, "op", "objstore.stat", "object", id)
	}
	size := fi.Size()

	r := bufio.NewReaderSize(io.NewSectionReader(h.f, HeaderSize, size-HeaderSize), 256<<10)
	pos := int64(HeaderSize)
	var fh [FrameHeaderSize]byte
	for {
		if _, err := io.ReadFull(r, fh[:]); err != nil {
			switch {
			case err == io.EOF:
				return pos, nil
			case errors.Is(err, io.ErrUnexpectedEOF):
				return pos, corrupt(id, pos, "torn frame header: the object ends %d bytes into it", size-pos)
			default:
				return pos, stream.StreamBackendFailed.Wrap(err, "op", "objstore.read", "object", id)
			}
		}
		length := int64(binary.LittleEndian.Uint32(fh[0:4]))
		if length == 0 || length > MaxPayload {
			return pos, corrupt(id, pos, "frame length %d out of range", length)
		}
		n := FrameHeaderSize + length
		if pos+n > size {
			return pos, corrupt(id, pos, "torn frame: %d bytes announced, the object ends after %d", n, size-pos)
		}
		payload := make([]byte, length)
		if _, err := io.ReadFull(r, payload); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF { // shrank under us
				return pos, corrupt(id, pos, "torn frame: the object ends inside it")
			}
			return pos, stream.StreamBackendFailed.Wrap(err, "op", "objstore.read", "object", id)
		}
		if want, got := binary.LittleEndian.Uint32(fh[4:8]), checksum(payload); want != got {
			return pos, corrupt(id, pos, "CRC-32C %08x, frame says %08x", got, want)
		}
		if err := fn(pos, n, payload); err != nil {
			return pos, err
		}
		pos += n
	}
}
