package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Transport is the http.RoundTripper NewHTTPClient uses: over keep-alive
// connections to plain-HTTP brokers it writes each request and reads its
// answer on the calling goroutine. net/http's Transport hands every request
// to two goroutines of its connection — one writes it, one reads the answer
// — and each hand-off may wake a thread; on a small machine that costs an
// append's round trip ~40 µs at the median and ~100 µs at p99 (a 1 KiB
// POST answered after an fdatasync: p50 0.23-0.25 against 0.27-0.29 ms,
// p99 0.50-0.82 against 0.61-1.03 ms). HTTPS and proxied requests go to
// Fallback, which speaks HTTP/2 where the broker offers it by ALPN (every
// broker does over TLS): one connection then carries many long-polls. This
// one speaks HTTP/1.1 only; plain HTTP stays on it (the broker serves h2c
// too, but a round trip here is cheaper than one through net/http's).
//
// A kept-alive connection is checked before use: one the broker closed
// (idle, or restarted) is dropped, and the request goes on a new one. A
// request that fails on a kept-alive connection before its answer arrives
// is sent again only if it is a GET, HEAD or OPTIONS, as net/http's
// Transport does: an append is never sent twice.
type Transport struct {
	// Fallback carries the requests this transport does not: https, and
	// those Proxy sends through a proxy. Nil: http.DefaultTransport.
	Fallback http.RoundTripper
	// Proxy picks a proxy per request, as http.Transport's does; nil: none.
	Proxy func(*http.Request) (*url.URL, error)
	// DialContext opens connections; nil: a net.Dialer with a 5s timeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost is how many idle connections are kept per broker
	// (default 64); IdleTimeout how long one is kept (default 90s).
	MaxIdlePerHost int
	IdleTimeout    time.Duration

	mu   sync.Mutex
	idle map[string][]*persistConn // by host:port, most recently used last
}

// persistConn is one kept-alive connection.
type persistConn struct {
	conn      net.Conn
	br        *bufio.Reader
	w         *requestWriter
	idleSince time.Time
	reused    bool
}

// aLongTimeAgo, as a deadline, fails blocked reads and writes at once.
var aLongTimeAgo = time.Unix(1, 0)

func (t *Transport) fallback() http.RoundTripper {
	if t.Fallback != nil {
		return t.Fallback
	}
	return http.DefaultTransport
}

// RoundTrip sends req and returns its answer; the answer's body must be
// read to its end or closed, which gives the connection back.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.fallback().RoundTrip(req)
	}
	if t.Proxy != nil {
		if p, err := t.Proxy(req); err != nil {
			closeBody(req)
			return nil, err
		} else if p != nil {
			return t.fallback().RoundTrip(req)
		}
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	for {
		if ctx.Err() != nil {
			closeBody(req)
			return nil, context.Cause(ctx)
		}
		pc, err := t.get(ctx, addr)
		if err != nil {
			closeBody(req)
			if ctx.Err() != nil {
				return nil, context.Cause(ctx) // the dial's error names a timeout, not the ctx
			}
			return nil, err
		}
		resp, err := t.send(pc, req, addr)
		if err == nil {
			return resp, nil
		}
		var retry retryable
		if !errors.As(err, &retry) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, retry.error
		}
		// A kept-alive connection the broker had closed: again, on a
		// new or another kept one.
		if req.Body != nil && req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// retryable marks a failure on a kept-alive connection after which the
// request may be sent again.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// send writes req on pc and reads the answer's head; the body keeps pc
// until it is read or closed.
func (t *Transport) send(pc *persistConn, req *http.Request, addr string) (*http.Response, error) {
	ctx := req.Context()
	// A ctx that ends fails the connection's pending reads and writes; the
	// connection is then closed, never kept.
	stop := context.AfterFunc(ctx, func() { pc.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) error {
		stop()
		pc.conn.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	err := req.Write(pc.w)
	if err == nil {
		err = pc.w.Flush()
	}
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(pc.br, req)
	}
	if err != nil {
		err = fail(err)
		// On a kept-alive connection the likeliest cause is that the
		// broker had just closed it; only a request that may be applied
		// twice goes again.
		if pc.reused && idempotent(req.Method) && (req.Body == nil || req.GetBody != nil) {
			return nil, retryable{err}
		}
		return nil, err
	}
	keep := !resp.Close && !req.Close
	resp.Body = &connBody{body: resp.Body, t: t, pc: pc, addr: addr, stop: stop, keep: keep}
	return resp, nil
}

func idempotent(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// connBody is an answer's body; it gives its connection back at its end.
type connBody struct {
	body io.ReadCloser
	t    *Transport
	pc   *persistConn
	addr string
	stop func() bool
	keep bool

	mu    sync.Mutex // held by Read; Close finding it held aborts the read
	done  bool
	after error // what Read returns once done
}

var errBodyClosed = errors.New("client: read on a closed response body")

func (b *connBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, b.after
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
		b.after = err
	}
	return n, err
}

// Close gives the connection back once what is left of the body (up to
// 64 KiB) is read; a read in progress is aborted and the connection closed.
func (b *connBody) Close() error {
	if !b.mu.TryLock() {
		b.pc.conn.SetDeadline(aLongTimeAgo)
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if !b.done {
		_, err := io.CopyN(io.Discard, b.body, 64<<10)
		b.finish(err == io.EOF)
	}
	b.after = errBodyClosed
	return nil
}

// finish ends the body: the connection goes back when it is reusable and
// no ctx deadline was set on it meanwhile. Called with mu held.
func (b *connBody) finish(reusable bool) {
	b.done = true
	b.body.Close()
	if b.stop() && reusable && b.keep {
		b.t.put(b.addr, b.pc)
		return
	}
	b.pc.conn.Close()
}

// get returns a kept-alive connection to addr that is still open, or dials
// a new one.
func (t *Transport) get(ctx context.Context, addr string) (*persistConn, error) {
	timeout := t.idleTimeout()
	for {
		t.mu.Lock()
		list := t.idle[addr]
		var pc *persistConn
		if n := len(list); n > 0 {
			pc = list[n-1]
			list[n-1] = nil
			t.idle[addr] = list[:n-1]
		}
		t.mu.Unlock()
		if pc == nil {
			break
		}
		if time.Since(pc.idleSince) < timeout && open(pc) {
			pc.reused = true
			return pc, nil
		}
		pc.conn.Close()
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &persistConn{conn: conn, br: bufio.NewReaderSize(conn, 16<<10), w: &requestWriter{conn: conn, buf: make([]byte, 0, 4<<10)}}, nil
}

// open reports whether an idle connection is still open: no end of stream
// or reset waiting on it (a broker closes idle connections after a while,
// and all of them when it restarts), nor stray bytes.
func open(pc *persistConn) bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	sc, ok := pc.conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		// Nothing to read: open. Zero bytes: closed. Bytes: stray.
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for the poller
	})
	return err == nil && alive
}

// put keeps pc for the next request to addr, unless enough are kept. The
// connections kept longest are at the front of the list: those idle past
// IdleTimeout are closed here (a burst of concurrent requests leaves
// connections that fewer requests after it never take again).
func (t *Transport) put(addr string, pc *persistConn) {
	max := t.MaxIdlePerHost
	if max <= 0 {
		max = 64
	}
	timeout := t.idleTimeout()
	now := time.Now()
	pc.idleSince = now
	var stale []*persistConn
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*persistConn{}
	}
	list := t.idle[addr]
	i := 0
	for i < len(list) && now.Sub(list[i].idleSince) >= timeout {
		i++
	}
	stale = append(stale, list[:i]...)
	list = slices.Delete(list, 0, i)
	if len(list) < max {
		list = append(list, pc)
	} else {
		stale = append(stale, pc)
	}
	t.idle[addr] = list
	t.mu.Unlock()
	for _, c := range stale {
		c.conn.Close()
	}
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return 90 * time.Second
}

// CloseIdleConnections closes the kept-alive connections, and the
// fallback's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.conn.Close()
		}
	}
	if c, ok := t.fallback().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
