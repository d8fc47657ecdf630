package objstore

import (
	"fmt"
	"os"
	"sync"

	"github.com/picomq/picomq/broker/stream"
)

const (
	// flushThreshold is how many buffered bytes AppendFrame lets pile up
	// before handing them to the file without syncing. A group commit batch
	// stays below it and costs one write at Sync; a segment merge writing
	// 64 MiB does not hold it all in memory.
	flushThreshold = 4 << 20

	// maxPooledBuffer is the largest buffer returned to bufPool, so that one
	// huge frame does not pin its buffer for good.
	maxPooledBuffer = 8 << 20

	// maxRefs is how many pieces (headers and payloads) AppendFrameRef lets
	// wait before writing them: one pwritev takes at most 1,024.
	maxRefs = 1024
)

// bufPool recycles writers' buffers: the flusher makes one object per batch,
// and a fresh buffer each time would be garbage each time.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// Writer appends frames to one new object. It is not safe for concurrent use;
// ID and Size may be called at any time from the writing goroutine.
//
// Frames are buffered in memory and handed to the file in one write at Sync
// (or whenever 4 MiB are waiting). The usual life is
//
//	w, err := s.Create()
//	defer w.Abort() // does nothing once Close succeeded
//	pos, n, err := w.AppendFrame(batch) // for each batch
//	err = w.Sync()                      // durable from here
//	err = w.Close()
type Writer struct {
	s  *Store
	id uint64
	f  *os.File

	bufp *[]byte // buffer from bufPool, given back at Close or Abort
	buf  []byte  // frames not yet written to the file

	// Frames appended by AppendFrameRef, not yet written: each frame's
	// header (in hdrs) and its caller's payload, written with one pwritev.
	// Either buf or refs is empty: each is written before the other grows.
	refs     [][]byte
	refBytes int64
	hdrs     []byte

	size    int64 // end of the object: written plus buffered
	written int64 // bytes handed to the file
	dirty   bool  // written bytes not yet fdatasynced

	err     error // the first write or sync failure, returned from then on
	closed  bool  // Close or Abort ran
	kept    bool  // Close succeeded: the object stays, Abort does nothing
	aborted bool  // Abort ran: the object is gone
}

func newWriter(s *Store, id uint64, f *os.File) *Writer {
	bp := bufPool.Get().(*[]byte)
	return &Writer{
		s: s, id: id, f: f,
		bufp: bp, buf: (*bp)[:0],
		size: HeaderSize, written: HeaderSize,
		dirty: true, // the header, written when the file was created, is not synced yet
	}
}

// ID returns the object's id.
func (w *Writer) ID() uint64 { return w.id }

// Size returns the object's length so far, header and buffered frames
// included: the position the next frame will get.
func (w *Writer) Size() int64 { return w.size }

// AppendFrame appends one frame holding payload and returns the frame's
// position and total length, the arguments ReadFrame takes. The payload is
// copied; it is durable once Sync returns nil. An empty payload or one above
// MaxPayload is refused with ErrFrameSize and leaves the writer usable.
func (w *Writer) AppendFrame(payload []byte) (pos int64, n int64, err error) {
	if err := w.admit(payload, len(w.refs) > 0); err != nil {
		return 0, 0, err
	}
	pos, n = w.size, int64(FrameHeaderSize+len(payload))
	w.buf = appendFrameHeader(w.buf, payload)
	w.buf = append(w.buf, payload...)
	w.size += n
	if len(w.buf) >= flushThreshold {
		if err := w.flush(); err != nil {
			return 0, 0, err
		}
	}
	return pos, n, nil
}

// admit checks that the writer can take payload as a frame and, when
// frames of the other kind are waiting (copied ones for AppendFrameRef,
// referenced ones for AppendFrame), writes them first, so the file keeps
// the frames in the order they came.
func (w *Writer) admit(payload []byte, otherWaiting bool) error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if len(payload) == 0 || len(payload) > MaxPayload {
		return fmt.Errorf("objstore: payload of %d bytes: %w", len(payload), ErrFrameSize)
	}
	if otherWaiting {
		return w.flush()
	}
	return nil
}

// AppendFrameRef is AppendFrame without copying payload: the writer
// writes it from the caller's memory, which must not change until Sync (or
// Close) returns. The group commit's batches are encoded once and kept until
// answered; copying megabytes of them into one buffer cost more than
// writing them.
func (w *Writer) AppendFrameRef(payload []byte) (pos int64, n int64, err error) {
	if err := w.admit(payload, len(w.buf) > 0); err != nil {
		return 0, 0, err
	}
	pos, n = w.size, int64(FrameHeaderSize+len(payload))
	// Appending may move hdrs to a new array: the headers already in refs
	// keep the old one, unchanged.
	at := len(w.hdrs)
	w.hdrs = appendFrameHeader(w.hdrs, payload)
	w.refs = append(w.refs, w.hdrs[at:len(w.hdrs):len(w.hdrs)], payload)
	w.refBytes += n
	w.size += n
	if len(w.refs) >= maxRefs || w.refBytes >= flushThreshold {
		if err := w.flush(); err != nil {
			return 0, 0, err
		}
	}
	return pos, n, nil
}

// flush hands the waiting frames to the file: the copied ones with one
// pwrite, those appended by reference with pwritev.
func (w *Writer) flush() error {
	if len(w.refs) > 0 {
		if err := w.s.fs.WriteV(w.f, w.refs, w.written); err != nil {
			w.err = stream.StreamBackendFailed.Wrap(err, "op", "objstore.write", "object", w.id)
			return w.err
		}
		w.written += w.refBytes
		w.dropRefs()
		w.dirty = true
		return nil
	}
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.s.fs.WriteAt(w.f, w.buf, w.written); err != nil {
		w.err = stream.StreamBackendFailed.Wrap(err, "op", "objstore.write", "object", w.id)
		return w.err
	}
	w.written += int64(len(w.buf))
	w.buf = w.buf[:0]
	w.dirty = true
	return nil
}

// Sync writes every buffered frame and fdatasyncs the file: when it returns
// nil, the object up to Size is durable (its directory entry already was).
// After a failure the writer is unusable: see the package documentation.
func (w *Writer) Sync() error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if err := w.flush(); err != nil {
		return err
	}
	if !w.dirty {
		return nil
	}
	if err := w.s.fs.Sync(w.f); err != nil {
		w.err = stream.StreamBackendFailed.Wrap(err, "op", "objstore.fdatasync", "object", w.id)
		w.s.fail("objstore.fdatasync", w.f.Name(), w.err)
		return w.err
	}
	w.dirty = false
	return nil
}

// Close syncs what Sync has not yet (so Close alone makes the object
// durable) and closes the file. The object stays, whatever the outcome; after
// a failed Close, Abort removes it.
func (w *Writer) Close() error {
	if w.closed {
		if w.kept {
			return nil
		}
		return ErrClosed
	}
	err := w.Sync()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = stream.StreamBackendFailed.Wrap(cerr, "op", "objstore.close", "object", w.id)
	}
	w.release()
	w.kept = err == nil
	if w.kept {
		w.s.wrote(w.id, w.size)
	}
	return err
}

// Abort closes the writer, if Close has not, and removes the object. It does
// nothing after a successful Close, so a deferred Abort guards every error
// path. A failure to remove is not reported: the file is an orphan and the
// broker's collection removes it later.
func (w *Writer) Abort() {
	if w.kept || w.aborted {
		return
	}
	if !w.closed {
		w.f.Close()
		w.release()
	}
	w.aborted = true
	w.s.cache.evict(w.id)
	os.Remove(w.s.path(w.id))
}

// release gives the buffer back and tells the store the object is no longer
// being written.
func (w *Writer) release() {
	w.closed = true
	if cap(w.buf) <= maxPooledBuffer {
		*w.bufp = w.buf[:0]
		bufPool.Put(w.bufp)
	}
	w.buf, w.bufp = nil, nil
	w.dropRefs()
	w.s.doneWriting(w.id)
}

// dropRefs forgets the frames appended by reference, written or not, so
// that the writer no longer keeps its callers' payloads.
func (w *Writer) dropRefs() {
	clear(w.refs)
	w.refs, w.refBytes, w.hdrs = w.refs[:0], 0, w.hdrs[:0]
}
