package framing

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/errs"
)

// Listen wraps ln: every connection it accepts has its request heads
// checked before the server reads them. It sees what the server would read,
// so over TLS it must see decrypted bytes: ListenTLS does the handshake
// first and wraps only connections that speak HTTP/1.1.
//
// A connection opening with HTTP/2's preface (h2c with prior knowledge,
// RFC 9113 §3.3) is passed through unchecked from its first byte: HTTP/2
// frames its messages itself, with lengths that cannot be read two ways,
// and net/http's HTTP/2 server bounds its header lists (MaxHeaderBytes).
func Listen(ln net.Listener, lim Limits) net.Listener {
	return &listener{Listener: ln, lim: lim.WithDefaults()}
}

type listener struct {
	net.Listener
	lim Limits
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newConn(c, l.lim), nil
}

// conn holds each head back until the scanner has seen all of it. A refused
// head ends the stream for net/http (io.EOF: it finishes answering what it
// already read, then closes), and Close answers the refusal before it
// closes, so the refusal never interleaves with another response.
//
// An idle connection holds no buffer of its own: a server keeps thousands
// of them open (live readers between pages), each blocked in Read. Bytes
// are read into the caller's buffer where it is large enough, and only
// what must outlive the call — the rest of a read past what it returns, a
// head arriving in pieces — is kept, in a buffer given back once drained.
type conn struct {
	net.Conn
	s    *Scanner
	rbuf *[]byte // owned read buffer, from readBuffers; nil when none is held
	in   []byte  // read, not scanned yet: in rbuf, or during a call in its p (inP)
	inP  bool
	one  [1]byte // an idle wait's read
	hold []byte  // the head being held back, when it arrives in pieces
	out  []byte  // scanned, for net/http
	err  error   // sticky: what Read answers once out is drained
	rerr error   // the underlying Read's error, once in is scanned

	// fresh: no byte of the connection scanned yet, so it may still be
	// HTTP/2's preface; raw: it was, and bytes pass through unchecked.
	fresh, raw bool

	closeOnce sync.Once
	refusal   atomic.Pointer[errs.Error] // set by Read, answered by Close (Shutdown closes idle conns from another goroutine)
	closeErr  error
}

// readBufferBytes is the size of an owned read buffer, net/http's own.
const readBufferBytes = 4096

// directReadMin is the smallest caller's buffer read into directly; a
// smaller one (net/http's one-byte background read) is read through an
// owned buffer, so that a head is not gathered a byte per system call.
var directReadMin = 512

var readBuffers = sync.Pool{New: func() any { b := make([]byte, readBufferBytes); return &b }}

func newConn(c net.Conn, lim Limits) *conn {
	return &conn{Conn: c, s: NewScanner(lim), fresh: true}
}

// h2Preface opens every HTTP/2 connection (RFC 9113 §3.4).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

func (c *conn) Read(p []byte) (int, error) {
	for {
		if c.raw {
			if len(c.out) > 0 {
				n := copy(p, c.out)
				c.out = c.out[n:]
				return n, nil
			}
			return c.Conn.Read(p)
		}
		switch {
		case len(c.out) > 0:
			// What is left of in may lie in p: keep it before out is
			// copied over it.
			c.keepIn()
			n := copy(p, c.out)
			c.out = c.out[n:]
			c.release()
			return n, nil
		case c.err != nil:
			c.release()
			return 0, c.err
		case len(c.in) > 0:
			c.scan()
			continue
		case c.rerr != nil && isTimeout(c.rerr):
			// A deadline (net/http's own, or its abort of a background
			// read): said once, the connection goes on.
			err := c.rerr
			c.rerr = nil
			return 0, err
		case c.rerr != nil:
			// The stream ended: a head cut short is dropped, net/http
			// sees the end as it would between requests.
			c.err, c.hold = c.rerr, nil
			continue
		case len(p) == 0:
			return 0, nil
		case !c.s.InHead():
			// Body bytes: read straight into p, give what belongs to the
			// body, keep a head that starts after it.
			c.release()
			n, err := c.Conn.Read(p)
			c.rerr = err
			k, _, serr := c.s.Scan(p[:n])
			if serr != nil {
				c.stop(serr)
			} else if k < n {
				c.in, c.inP = p[k:n], true
				c.keepIn()
			}
			if k > 0 {
				return k, nil
			}
			continue
		}
		if len(p) >= directReadMin {
			n, err := c.Conn.Read(p)
			c.in, c.inP, c.rerr = p[:n], true, err
			continue
		}
		if c.rbuf == nil {
			// Wait for the next byte without a buffer: this is where a
			// live reader's connection idles (net/http's background
			// read). The rest of what arrived is read into one next.
			n, err := c.Conn.Read(c.one[:])
			c.rerr = err
			if n > 0 {
				buf := c.buffer()
				buf[0] = c.one[0]
				c.in, c.inP = buf[:1], false
			}
			continue
		}
		n, err := c.Conn.Read(*c.rbuf)
		c.in, c.inP, c.rerr = (*c.rbuf)[:n], false, err
	}
}

// buffer returns the owned read buffer, taken from the pool when none is
// held.
func (c *conn) buffer() []byte {
	if c.rbuf == nil {
		c.rbuf = readBuffers.Get().(*[]byte)
	}
	return *c.rbuf
}

// keepIn moves in out of the caller's buffer into the owned one (in never
// outgrows it: it is what one read left).
func (c *conn) keepIn() {
	if c.inP && len(c.in) > 0 {
		buf := c.buffer()
		c.in = buf[:copy(buf, c.in)]
	}
	c.inP = false
}

// release gives the owned buffer back once nothing is left in it, so that
// a connection waiting for its next request holds none.
func (c *conn) release() {
	if c.rbuf == nil || len(c.in) > 0 || len(c.out) > 0 {
		return
	}
	readBuffers.Put(c.rbuf)
	c.rbuf = nil
}

// scan runs the scanner over in and moves what it took to hold or out. A
// head that arrived whole is given out where it lies; one arriving in
// pieces is gathered in hold, which is let go once given out.
func (c *conn) scan() {
	if c.fresh && !c.sniff() {
		return
	}
	head, in := c.s.InHead(), c.in
	k, headEnd, err := c.s.Scan(in)
	c.in = in[k:]
	switch {
	case err != nil:
		c.stop(err)
		if !head {
			c.out = in[:k] // the body bytes before the fault
		}
	case head && headEnd && len(c.hold) == 0:
		c.out = in[:k]
	case head:
		c.hold = append(c.hold, in[:k]...)
		if headEnd {
			c.out, c.hold = c.hold, nil
		}
	default:
		c.out = in[:k]
	}
}

// sniff looks at a connection's first bytes for HTTP/2's preface: it
// reports whether scanning goes on as HTTP/1.1. A part of the preface is
// held until the rest arrives (or the bytes differ).
func (c *conn) sniff() bool {
	in, joined := c.in, len(c.hold) > 0
	if joined {
		in = append(c.hold, c.in...)
		c.hold = nil
	}
	switch {
	case bytes.HasPrefix(in, h2Preface):
		c.fresh, c.raw = false, true
		c.out, c.in, c.inP = bytes.Clone(in), nil, false
		c.release()
		return false
	case len(in) < len(h2Preface) && bytes.HasPrefix(h2Preface, in):
		c.hold, c.in, c.inP = bytes.Clone(in), nil, false
		return false
	}
	c.fresh = false
	if joined {
		c.in, c.inP = in, false // owned, neither the caller's nor rbuf
	}
	return true
}

// stop ends the stream for net/http: a refused head is answered at Close,
// a cut is not.
func (c *conn) stop(err error) {
	refusal := Refusal(err)
	c.refusal.Store(refusal)
	c.err = io.EOF
	if refusal == nil {
		c.err = io.ErrUnexpectedEOF
	}
	c.in, c.hold = nil, nil
}

// Close answers a refused head, then closes. The answer is followed by a
// half-close and a short drain, so the client reads it rather than a reset
// caused by the bytes it sent after the head.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		if refusal := c.refusal.Load(); refusal != nil {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Conn.Write(Response(refusal)); err == nil {
				if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
					_ = c.Conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
					_, _ = io.CopyN(io.Discard, c.Conn, 256<<10)
				}
			}
		}
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

// Response is the whole HTTP/1.1 response refusing a head: the coded
// problem, and Connection: close.
func Response(coded *errs.Error) []byte {
	status := errs.HTTPStatus(coded)
	body, err := errs.Marshal(coded)
	if err != nil {
		body = []byte(coded.Error())
	}
	b := make([]byte, 0, 256+len(body))
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nContent-Type: application/problem+json\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
