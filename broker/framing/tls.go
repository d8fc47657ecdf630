package framing

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// ListenTLS serves TLS on ln and guards its HTTP/1.1 connections as Listen
// does. The handshake is done here, before net/http sees a connection, so
// that ALPN decides what it gets: an HTTP/2 connection ("h2") is handed
// over as the *tls.Conn net/http needs to serve HTTP/2 (which frames its
// own messages), an HTTP/1.1 one wrapped by the head checks.
//
// Handshakes run one goroutine each, as net/http's would, bounded by
// handshakeTimeout (0: 10 s): a client that never finishes one holds its
// goroutine that long and never blocks Accept.
func ListenTLS(ln net.Listener, conf *tls.Config, lim Limits, handshakeTimeout time.Duration) net.Listener {
	if handshakeTimeout <= 0 {
		handshakeTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &tlsListener{Listener: ln, conf: conf, lim: lim.WithDefaults(), timeout: handshakeTimeout,
		ready: make(chan net.Conn), ctx: ctx, cancel: cancel}
	go l.acceptLoop()
	return l
}

type tlsListener struct {
	net.Listener
	conf    *tls.Config
	lim     Limits
	timeout time.Duration
	ready   chan net.Conn

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error // Accept's error once the loop ended
}

func (l *tlsListener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && l.ctx.Err() == nil {
				// As net/http does with a temporary error (EMFILE when
				// a client holds every descriptor, say): back off and go
				// on, never stop serving for it.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.ctx.Done():
				}
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.cancel()
			return
		}
		delay = 0
		go l.handshake(c)
	}
}

func (l *tlsListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.conf)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = c.Close() // net/http would log it; a failed handshake is the client's
		return
	}
	var out net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		g := newConn(tc, l.lim)
		g.fresh = false // HTTP/2 is ALPN's to choose here, never a preface's
		out = &tlsGuarded{conn: g, tc: tc}
	}
	select {
	case l.ready <- out:
	case <-l.ctx.Done():
		_ = c.Close()
	}
}

func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		if l.ctx.Err() != nil {
			// Closed as this one was handed over: nobody would close it.
			_ = c.Close()
			return nil, net.ErrClosed
		}
		return c, nil
	case <-l.ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err == nil {
			return nil, net.ErrClosed
		}
		return nil, l.err
	}
}

func (l *tlsListener) Close() error {
	l.cancel()
	return l.Listener.Close()
}

// tlsGuarded is a guarded HTTP/1.1 connection over TLS that still tells
// net/http its TLS state (Request.TLS), which it reads from any connection
// with a ConnectionState method.
type tlsGuarded struct {
	*conn
	tc *tls.Conn
}

func (g *tlsGuarded) ConnectionState() tls.ConnectionState { return g.tc.ConnectionState() }
