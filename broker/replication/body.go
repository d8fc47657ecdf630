package replication

import (
	"errors"
	"io"
	"sync"
)

// errReleased ends a request body read after its copy gave up on it.
var errReleased = errors.New("replication: the copy is over")

// body is an object's bytes, in the pieces they were appended as, as a
// request body. The pieces include callers' payloads (AppendFrameRef),
// valid only until Sync returns, and an HTTP transport may go on reading a
// body after the request failed: release makes every later read fail, and
// returns only once no read is in progress, so no byte of a payload is
// read after Sync returned.
type body struct {
	mu       sync.Mutex
	pieces   [][]byte // what is left to read; its own slice, never the writer's
	released bool
}

func newBody(pieces [][]byte) *body {
	return &body{pieces: append([][]byte(nil), pieces...)}
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return 0, errReleased
	}
	n := 0
	for n < len(p) && len(b.pieces) > 0 {
		c := copy(p[n:], b.pieces[0])
		n += c
		if b.pieces[0] = b.pieces[0][c:]; len(b.pieces[0]) == 0 {
			b.pieces = b.pieces[1:]
		}
	}
	if n == 0 && len(b.pieces) == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo hands each piece to w as it is, so that a large payload goes to
// the connection without a copy through a small buffer (io.Copy prefers
// it to Read).
func (b *body) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		b.mu.Lock()
		if b.released {
			b.mu.Unlock()
			return total, errReleased
		}
		if len(b.pieces) == 0 {
			b.mu.Unlock()
			return total, nil
		}
		p := b.pieces[0]
		n, err := w.Write(p)
		total += int64(n)
		if b.pieces[0] = p[n:]; len(b.pieces[0]) == 0 {
			b.pieces = b.pieces[1:]
		}
		b.mu.Unlock()
		if err != nil {
			return total, err
		}
	}
}

// Close is a no-op: the transport closes bodies, and only release ends one.
func (b *body) Close() error { return nil }

func (b *body) release() {
	b.mu.Lock()
	b.released = true
	b.pieces = nil
	b.mu.Unlock()
}
