package clusterharness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does with the bytes of its link.
type Mode int

const (
	// Pass forwards everything (after the configured delay, if any).
	Pass Mode = iota
	// Cut refuses new connections (accepted, then closed at once) and has
	// closed every existing one: the peer sees a reset or an EOF, as when a
	// process on the other side died.
	Cut
	// Blackhole accepts connections and holds every byte: nothing is
	// lost, nothing passes, until Heal. This is a partition that TCP does
	// not notice, as when packets are dropped and retransmitted: the
	// sender's writes succeed until its socket buffer fills, then block.
	Blackhole
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy is one direction of one link: a TCP listener on 127.0.0.1 that
// forwards every connection to a target. Connections are initiated by the
// link's source only, so cutting A→B does not touch the connections B
// opens to A: the two directions of a pair are two proxies.
type Proxy struct {
	name string
	ln   net.Listener

	mu      sync.Mutex
	target  string
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed and replaced on every change of mode
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free port of 127.0.0.1 (never one a broker was
// given) and forwards to target.
func NewProxy(name, target string) (*Proxy, error) {
	ln, err := listenFresh()
	if err != nil {
		return nil, err
	}
	p := &Proxy{name: name, ln: ln, target: target, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Name is the link's name ("broker-0→broker-1 peer", ...), for messages.
func (p *Proxy) Name() string { return p.name }

// Addr is the address the link's source dials.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget changes where new connections go (a broker restarted on
// another port); existing connections keep their old target.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Cut refuses new connections and closes the existing ones.
func (p *Proxy) Cut() { p.set(Cut, -1) }

// Blackhole holds every byte of new and existing connections until Heal.
func (p *Proxy) Blackhole() { p.set(Blackhole, -1) }

// Delay adds d to every chunk of bytes in both directions of the link's
// connections, keeping their order (it does not throttle: chunks in flight
// overlap). Delay(0) removes it.
func (p *Proxy) Delay(d time.Duration) { p.set(-1, d) }

// Heal passes bytes again, without delay; held bytes flow on.
func (p *Proxy) Heal() { p.set(Pass, 0) }

// set changes the mode (m >= 0) and the delay (d >= 0).
func (p *Proxy) set(m Mode, d time.Duration) {
	p.mu.Lock()
	if m >= 0 {
		p.mode = m
	}
	if d >= 0 {
		p.delay = d
	}
	close(p.changed)
	p.changed = make(chan struct{})
	var victims []*proxyConn
	if p.mode == Cut {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.close()
	}
}

// state is the mode, the delay and the channel closed at the next change.
func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

// waitPass blocks while the link is blackholed; it reports false when the
// link is cut (or the proxy or connection closed) instead.
func (p *Proxy) waitPass(done <-chan struct{}) bool {
	for {
		m, _, ch := p.state()
		switch m {
		case Pass:
			return true
		case Cut:
			return false
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// Close stops the listener and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*proxyConn
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range all {
		c.close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed || p.mode == Cut {
			p.mu.Unlock()
			in.Close() // refused: the source sees the connection end at once
			continue
		}
		c := &proxyConn{in: in, done: make(chan struct{})}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// proxyConn is one forwarded connection.
type proxyConn struct {
	in, out net.Conn
	mu      sync.Mutex
	done    chan struct{}
	once    sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.in.Close()
		c.mu.Lock()
		if c.out != nil {
			c.out.Close()
		}
		c.mu.Unlock()
	})
}

func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	// A blackholed link holds a new connection before dialling: the source
	// has connected, and hears nothing.
	if !p.waitPass(c.done) {
		return
	}
	out, err := net.DialTimeout("tcp", p.Target(), 5*time.Second)
	if err != nil {
		return // the target is down: the source sees its connection end
	}
	c.mu.Lock()
	c.out = out
	c.mu.Unlock()
	select {
	case <-c.done: // cut while dialling
		out.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, out, c.in) }()
	go func() { defer wg.Done(); p.pipe(c, c.in, out) }()
	wg.Wait()
}

// chunk is bytes read from one side, stamped with when they may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through the link's mode and delay: a reader
// stamps each chunk, a writer waits for its due time and for the link to
// pass, so a delay delays without serializing, and a blackhole holds bytes
// already read instead of dropping them.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn) {
	clean := false // a half-close passed on: the other direction goes on
	defer func() {
		if !clean {
			c.close()
		}
	}()
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			// Hold reads too while blackholed, so the kernel buffers fill
			// and the sender blocks, as on a real silent network.
			if !p.waitPass(c.done) {
				return
			}
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				_, d, _ := p.state()
				select {
				case chunks <- chunk{b: buf[:n], due: time.Now().Add(d)}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					return
				}
				// Half-close: pass the EOF on once the bytes before it are out.
				select {
				case chunks <- chunk{}:
				case <-c.done:
				}
				return
			}
		}
	}()
	for ch := range chunks {
		if wait := time.Until(ch.due); wait > 0 {
			// Not a wait for a condition: the link's configured latency.
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		}
		if !p.waitPass(c.done) {
			return
		}
		if ch.b == nil {
			if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
				clean = true
			}
			return
		}
		if _, err := dst.Write(ch.b); err != nil {
			return
		}
	}
}
