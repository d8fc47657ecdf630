package client

import (
	"io"
	"net"
)

// requestWriter is what Transport writes a request into. It gathers the
// request's head and, when the body is one it can see whole (a
// *bytes.Reader, or an append's recycled buffer), writes head and body with
// one writev: one system call, no copy of the body, and on loopback one
// wake-up of the broker. net/http's Request.Write copies a body of known
// length through io.LimitReader, which hides every fast path: a 100 KiB
// append went out as a 16 KiB buffered write and then 32 KiB writes from a
// buffer allocated for each request — five system calls, each waking the
// broker's reader, and a copy of every byte.
//
// It implements io.ByteWriter so that Request.Write does not wrap it in a
// bufio.Writer of its own, and io.ReaderFrom, which Request.Write's body
// copy (io.Copy) hands the body to.
type requestWriter struct {
	conn net.Conn
	buf  []byte // written, not yet sent: the head, or a body's small pieces
	iov  [2][]byte
	bufs net.Buffers // over iov
}

// sendAt is how much a request writer gathers before it sends: bodies of
// unknown length (chunked) are sent in pieces of about this size.
const sendAt = 32 << 10

func (w *requestWriter) Write(p []byte) (int, error) {
	if len(w.buf)+len(p) > sendAt {
		// Large: sent with what is gathered, from where it is.
		if err := w.send(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *requestWriter) WriteString(s string) (int, error) {
	if len(w.buf)+len(s) > sendAt {
		return w.Write([]byte(s))
	}
	w.buf = append(w.buf, s...)
	return len(s), nil
}

func (w *requestWriter) WriteByte(c byte) error {
	w.buf = append(w.buf, c)
	return nil
}

// wholeBody is a body whose unread bytes WriteTo writes in one Write call.
type wholeBody interface {
	io.WriterTo
	Len() int // unread bytes
}

// ReadFrom writes a body. Request.Write passes one of known length as an
// *io.LimitedReader over the body itself; when that body is a wholeBody
// with exactly that many bytes left, its bytes go out with the head.
func (w *requestWriter) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if b, ok := lr.R.(wholeBody); ok && lr.N > 0 && int64(b.Len()) == lr.N {
			n, err := b.WriteTo(writerOnly{w})
			lr.N -= n
			return n, err
		}
	}
	// Anything else is copied through w's own buffer.
	return io.CopyBuffer(writerOnly{w}, r, make([]byte, sendAt))
}

// writerOnly hides requestWriter's ReadFrom from io.Copy.
type writerOnly struct{ w *requestWriter }

func (o writerOnly) Write(p []byte) (int, error) { return o.w.Write(p) }

// send writes what is gathered and then p (which may be nil) to the
// connection, with one writev where the connection has it.
func (w *requestWriter) send(p []byte) error {
	w.bufs = w.iov[:0]
	for _, b := range [2][]byte{w.buf, p} {
		if len(b) > 0 { // a pipe, say, would wait for a reader of nothing
			w.bufs = append(w.bufs, b)
		}
	}
	_, err := w.bufs.WriteTo(w.conn) // consumes w.bufs, not iov
	w.iov = [2][]byte{}              // keep no reference to the caller's body
	w.buf = w.buf[:0]
	return err
}

// Flush sends what is gathered.
func (w *requestWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	return w.send(nil)
}
