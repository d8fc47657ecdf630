// Package peer is a clustered broker's peer port: one listener carrying the
// metadata log's raft traffic and an HTTP API between brokers (command
// forwarding, joins, object replicas, status), and the addressing that
// finds a peer by its node name — a stable DNS name in a StatefulSet, or a
// static table outside Kubernetes — resolved at every dial, never pinned to
// an IP.
//
// The protocols share the port: a raft connection starts with the byte
// RaftTag, a journal append stream (broker/journalpeer) with JournalTag,
// and neither is how an HTTP request starts (a request line starts with a
// method's capital letters).
package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// RaftTag is the first byte of every raft connection to a peer port.
const RaftTag = 0x01

// JournalTag is the first byte of every journal append stream.
const JournalTag = 0x02

// Mux accepts the peer port's connections and hands each to the protocol
// it starts with.
type Mux struct {
	ln      net.Listener
	raft    *chanListener
	journal *chanListener
	http    *chanListener

	closeOnce sync.Once
}

// Listen opens the peer port on addr.
func Listen(addr string) (*Mux, error) { return ListenTLS(addr, nil) }

// ListenTLS opens the peer port on addr, serving TLS with conf when it is
// set (conf.ClientAuth decides whether peers must present a certificate).
// Both protocols then run inside TLS: the raft tag is the first byte after
// the handshake, which happens within the sniff timeout.
func ListenTLS(addr string, conf *tls.Config) (*Mux, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("peer: listen on %s: %w", addr, err)
	}
	if conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	m := &Mux{ln: ln, raft: newChanListener(ln.Addr()), journal: newChanListener(ln.Addr()), http: newChanListener(ln.Addr())}
	go m.accept()
	return m, nil
}

// Addr is the address the port listens on.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Raft is the listener of the raft connections.
func (m *Mux) Raft() net.Listener { return m.raft }

// Journal is the listener of the journal append streams.
func (m *Mux) Journal() net.Listener { return m.journal }

// HTTP is the listener of the HTTP connections.
func (m *Mux) HTTP() net.Listener { return m.http }

// Close closes the port and both listeners.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		err = m.ln.Close()
		m.raft.close()
		m.journal.close()
		m.http.close()
	})
	return err
}

// sniffTimeout bounds how long a new connection may take to send its first
// byte: a connection that sends nothing holds no goroutine for long.
const sniffTimeout = 10 * time.Second

func (m *Mux) accept() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a transient accept error (EMFILE): do not spin
			continue
		}
		go m.route(c)
	}
}

func (m *Mux) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, 1)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch first[0] {
	case RaftTag:
		_, _ = br.Discard(1)
		m.raft.deliver(&bufferedConn{Conn: c, r: br})
		return
	case JournalTag:
		_, _ = br.Discard(1)
		m.journal.deliver(&bufferedConn{Conn: c, r: br})
		return
	}
	m.http.deliver(&bufferedConn{Conn: c, r: br})
}

// bufferedConn is a connection whose first bytes were peeked.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chanListener is a net.Listener fed by the mux.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) close() { l.closed.Do(func() { close(l.done) }) }

func (l *chanListener) Close() error { l.close(); return nil }

func (l *chanListener) Addr() net.Addr { return l.addr }

// Addresses finds a peer's ports from its node name.
type Addresses struct {
	// Static, when set, maps node names to their addresses (outside
	// Kubernetes); nodes not listed are unknown.
	Static map[string]Static
	// Service is the headless Service's DNS name: node X's ports are at
	// X.<Service>, PeerPort and ClientPort.
	Service              string
	PeerPort, ClientPort string
}

// Static is a node's two addresses in a static table.
type Static struct {
	Peer, Client string
}

// Advertise is the address node is known by in the metadata log's
// configuration: its name in a static table (which the table resolves),
// else its DNS name and peer port.
func (a Addresses) Advertise(node string) string {
	if a.Static != nil {
		return node
	}
	return net.JoinHostPort(node+"."+a.Service, a.PeerPort)
}

// Peer resolves a configuration address (Advertise's) to the peer port to
// dial: a static name is looked up, anything else is a DNS name that the
// dialer resolves.
func (a Addresses) Peer(addr string) (string, error) {
	if a.Static != nil {
		s, ok := a.Static[addr]
		if !ok {
			return "", fmt.Errorf("peer: no node %q in the static peer list", addr)
		}
		return s.Peer, nil
	}
	return addr, nil
}

// Client is node's client API address.
func (a Addresses) Client(node string) (string, error) {
	if a.Static != nil {
		s, ok := a.Static[node]
		if !ok {
			return "", fmt.Errorf("peer: no node %q in the static peer list", node)
		}
		return s.Client, nil
	}
	return net.JoinHostPort(node+"."+a.Service, a.ClientPort), nil
}

// NodeOf is the node name a configuration address stands for.
func (a Addresses) NodeOf(addr string) string {
	if a.Static != nil {
		return addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	node, _, _ := strings.Cut(host, ".")
	return node
}

// Dialer dials peers by configuration address, resolving at each dial.
type Dialer struct {
	Addresses Addresses
	// Timeout bounds a dial (default 5s).
	Timeout time.Duration
	// TLS, when set, is the client side of the peer port's TLS: the
	// connection is handshaken before it is returned, the server verified
	// against TLS.RootCAs (the cluster's CA) under the host it was dialled
	// at, unless TLS.ServerName says otherwise.
	TLS *tls.Config
}

// Dial connects to the peer port of the node at addr.
func (d Dialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	real, err := d.Addresses.Peer(addr)
	if err != nil {
		return nil, err
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	nd := net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}
	c, err := nd.DialContext(ctx, "tcp", real)
	if err != nil || d.TLS == nil {
		return c, err
	}
	conf := d.TLS.Clone()
	if conf.ServerName == "" {
		host, _, err := net.SplitHostPort(real)
		if err != nil {
			host = real
		}
		conf.ServerName = host
	}
	tc := tls.Client(c, conf)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("peer: TLS handshake with %s: %w", real, err)
	}
	return tc, nil
}

// DialRaft connects to the raft of the node at addr.
func (d Dialer) DialRaft(ctx context.Context, addr string) (net.Conn, error) {
	return d.dialTagged(ctx, addr, RaftTag)
}

// DialJournal connects to the journal append stream of the node at addr.
func (d Dialer) DialJournal(ctx context.Context, addr string) (net.Conn, error) {
	return d.dialTagged(ctx, addr, JournalTag)
}

func (d Dialer) dialTagged(ctx context.Context, addr string, tag byte) (net.Conn, error) {
	c, err := d.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{tag}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
