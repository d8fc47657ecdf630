package journalpeer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/stream"
)

// The append stream: the hot path of the peer API, an owner's objects to
// its ensemble's members, on a connection of its own instead of one HTTP
// request each. HTTP cost a member about a tenth of its CPU per object
// under load (headers written and parsed, a goroutine hand-off each way on
// the client) and carried one object per request; the stream carries
// every object queued meanwhile in one write and answers in one, in any
// order, by request id.
//
// A connection opens with the peer port's JournalTag (broker/peer) and
// then, both ways, the hello "PMQJ/1\r\n\r\n" (an older build's HTTP server
// answers it at once with a 400, and the sender goes back to HTTP). Then
// (little-endian):
//
//	request = n:u32 req:u64 object      object: n bytes, EncodeObject's form
//	answer  = req:u64 status:u8 [n:u32 problem]   status 0: durable here;
//	                                              1: refused, a coded problem
//
// Each object is answered exactly as POST objects would answer it: after
// the fdatasync that covers it, or with the journal's refusal. A request
// whose answer never came (a broken connection, the caller's ctx) says
// nothing of whether it was written — the caller resends the same bytes.
// Fences and reads stay HTTP requests: they are rare, and their answers are
// larger.

// streamHello opens both sides of a connection.
var streamHello = []byte("PMQJ/1\r\n\r\n")

const (
	answerDurable = 0
	answerRefused = 1

	// streamInFlight bounds the objects one connection has in the member's
	// journal at once; past it the member stops reading (TCP pushes back).
	streamInFlight = 256
	// answerTimeout is how long a connection with requests outstanding may
	// stay silent before it is given up (a peer that vanished without a
	// reset): the HTTP client's response-header timeout.
	answerTimeout = 30 * time.Second
	// oldPeerFor is how long a member that did not answer the hello (an
	// older build, which serves only POST objects) is sent objects over
	// HTTP before the stream is tried again.
	oldPeerFor = time.Minute
)

// StreamDialer dials a member's append stream: its peer port, the
// JournalTag written (broker/peer.Dialer.DialJournal).
type StreamDialer func(ctx context.Context, addr string) (net.Conn, error)

// ServeStream serves append streams accepted on ln into j until ln is
// closed; it returns once every connection's work is answered or cut.
func ServeStream(ln net.Listener, j *journal.Journal, log *slog.Logger, maxObjectBytes int64) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxObjectBytes <= 0 {
		maxObjectBytes = DefaultMaxObjectBytes
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	defer func() {
		// The port closed: cut the streams, whose senders resend elsewhere
		// or later; what was appended meanwhile is still answered.
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		open[c] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mu.Lock(); delete(open, c); mu.Unlock() }()
			if err := serveConn(c, j, maxObjectBytes); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Debug("journal append stream ended", "remote", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

type answer struct {
	req uint64
	err error
}

// serveConn reads requests, appends each in a goroutine of its own (the
// journal batches those that wait together into one fdatasync), and
// writes their answers as they come, flushing when none is waiting.
func serveConn(c net.Conn, j *journal.Journal, max int64) error {
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(answerTimeout))
	hello := make([]byte, len(streamHello))
	if _, err := io.ReadFull(r, hello); err != nil {
		return err
	}
	if string(hello) != string(streamHello) {
		return fmt.Errorf("journalpeer: stream hello %q, want %q", hello, streamHello)
	}
	_ = c.SetReadDeadline(time.Time{})
	answers := make(chan answer, streamInFlight)
	writerDone := make(chan error, 1)
	go func() { writerDone <- writeAnswers(c, answers) }()
	slots := make(chan struct{}, streamInFlight)
	var appends sync.WaitGroup
	err := func() error {
		var head [12]byte
		for {
			if _, err := io.ReadFull(r, head[:]); err != nil {
				return err
			}
			n, req := binary.LittleEndian.Uint32(head[:4]), binary.LittleEndian.Uint64(head[4:])
			if int64(n) > max {
				// Its bytes cannot be skipped safely on a stream that
				// may be lying: answer, then end the connection.
				answers <- answer{req, TooLarge.With("bytes", n, "max", max)}
				return fmt.Errorf("journalpeer: a %d-byte object, over %d", n, max)
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return err
			}
			o, err := DecodeObject(body)
			if err != nil {
				answers <- answer{req, err}
				continue
			}
			slots <- struct{}{}
			appends.Add(1)
			go func() {
				defer appends.Done()
				err := j.Append(o)
				<-slots
				answers <- answer{req, err}
			}()
		}
	}()
	appends.Wait()
	close(answers)
	if werr := <-writerDone; err == nil {
		err = werr
	}
	return err
}

// writeAnswers writes answers until the channel closes, flushing whenever
// none is waiting; a failed write closes c, so that the reader ends too.
func writeAnswers(c net.Conn, answers <-chan answer) error {
	w := bufio.NewWriterSize(c, 16<<10)
	var failed error
	if _, err := w.Write(streamHello); err != nil {
		failed = err
	} else if err := w.Flush(); err != nil {
		failed = err
	}
	for a := range answers {
		if failed != nil {
			continue // drain, so that no append blocks on an answer
		}
		failed = writeAnswer(w, a)
		if failed == nil && len(answers) == 0 {
			_ = c.SetWriteDeadline(time.Now().Add(answerTimeout))
			failed = w.Flush()
		}
		if failed != nil {
			c.Close()
		}
	}
	if failed == nil {
		failed = w.Flush()
	}
	return failed
}

func writeAnswer(w *bufio.Writer, a answer) error {
	var b [13]byte
	binary.LittleEndian.PutUint64(b[:8], a.req)
	if a.err == nil {
		_, err := w.Write(b[:9])
		return err
	}
	coded, ok := errs.As(a.err)
	if !ok {
		coded = stream.StreamBackendFailed.Wrap(a.err, "op", "journalpeer stream append")
	}
	problem, err := errs.Marshal(coded)
	if err != nil {
		return err
	}
	b[8] = answerRefused
	binary.LittleEndian.PutUint32(b[9:], uint32(len(problem)))
	if _, err := w.Write(b[:]); err != nil {
		return err
	}
	_, err = w.Write(problem)
	return err
}

// streams is the client side: one append stream per member address, dialled
// at the first object and again after it broke.
type streams struct {
	dial StreamDialer

	mu    sync.Mutex
	conns map[string]*streamConn
	old   map[string]time.Time // members that did not answer the hello, until
}

// errOldPeer says a member does not serve the stream.
var errOldPeer = errors.New("journalpeer: the member serves no append stream")

func (s *streams) append(ctx context.Context, addr string, o journal.Object) error {
	sc, err := s.conn(ctx, addr)
	if err != nil {
		return err
	}
	return sc.append(ctx, o)
}

// conn is addr's live stream, dialled when there is none (concurrent
// callers wait for one dial).
func (s *streams) conn(ctx context.Context, addr string) (*streamConn, error) {
	s.mu.Lock()
	if until, ok := s.old[addr]; ok {
		if time.Now().Before(until) {
			s.mu.Unlock()
			return nil, errOldPeer
		}
		delete(s.old, addr)
	}
	sc := s.conns[addr]
	if sc == nil || sc.isBroken() {
		sc = &streamConn{pending: map[uint64]chan error{}, ready: make(chan struct{}), wake: make(chan struct{}, 1), dead: make(chan struct{})}
		s.conns[addr] = sc
		go s.open(addr, sc)
	}
	s.mu.Unlock()
	select {
	case <-sc.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if sc.dialErr != nil {
		return nil, sc.dialErr
	}
	return sc, nil
}

// open dials sc's connection and exchanges the hellos; a member that
// answers something else is an older build, sent HTTP requests a while.
func (s *streams) open(addr string, sc *streamConn) {
	defer close(sc.ready)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.dial(ctx, addr)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		hello := make([]byte, len(streamHello))
		if _, err = c.Write(streamHello); err == nil {
			_, err = io.ReadFull(c, hello)
		}
		if err == nil && string(hello) != string(streamHello) {
			err = errOldPeer
		}
		_ = c.SetDeadline(time.Time{})
		if err != nil {
			c.Close()
		}
	}
	if err != nil {
		sc.dialErr = fmt.Errorf("journalpeer: append stream to %s: %w", addr, err)
		sc.fail(sc.dialErr)
		s.mu.Lock()
		if errors.Is(err, errOldPeer) {
			s.old[addr] = time.Now().Add(oldPeerFor)
		}
		if s.conns[addr] == sc {
			delete(s.conns, addr)
		}
		s.mu.Unlock()
		return
	}
	sc.mu.Lock()
	closed := sc.broken // the client closed while this dialled
	if !closed {
		sc.c = c
	}
	sc.mu.Unlock()
	if closed {
		c.Close()
		sc.dialErr = sc.cause
		return
	}
	go sc.write()
	go sc.read()
}

func (s *streams) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, sc := range s.conns {
		sc.fail(net.ErrClosed)
		delete(s.conns, addr)
	}
}

// streamConn is one append stream: requests queued by their callers and
// written together by its writer, answers read by its reader and handed
// to the caller waiting for each.
type streamConn struct {
	c       net.Conn
	ready   chan struct{} // closed once dialled or failed (dialErr)
	dialErr error
	wake    chan struct{} // the writer has something queued
	dead    chan struct{} // closed when broken

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan error
	queued  net.Buffers
	broken  bool
	cause   error
}

func (sc *streamConn) isBroken() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.broken
}

func (sc *streamConn) append(ctx context.Context, o journal.Object) error {
	body := EncodeObject(o)
	head := make([]byte, 12)
	binary.LittleEndian.PutUint32(head[:4], uint32(len(body)))
	done := make(chan error, 1)
	sc.mu.Lock()
	if sc.broken {
		err := sc.cause
		sc.mu.Unlock()
		return err
	}
	sc.next++
	req := sc.next
	binary.LittleEndian.PutUint64(head[4:], req)
	if len(sc.pending) == 0 {
		_ = sc.c.SetReadDeadline(time.Now().Add(answerTimeout))
	}
	sc.pending[req] = done
	sc.queued = append(sc.queued, head, body) // one writev: no copy of the body
	sc.mu.Unlock()
	select {
	case sc.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sc.mu.Lock()
		delete(sc.pending, req)
		sc.mu.Unlock()
		return ctx.Err()
	}
}

// write sends whatever was queued since its last write, in one write.
func (sc *streamConn) write() {
	for {
		select {
		case <-sc.wake:
		case <-sc.dead:
			return
		}
		sc.mu.Lock()
		out := sc.queued
		sc.queued = nil
		sc.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		_ = sc.c.SetWriteDeadline(time.Now().Add(answerTimeout))
		if _, err := out.WriteTo(sc.c); err != nil {
			sc.fail(err)
			return
		}
	}
}

// read hands each answer to its caller until the connection fails.
func (sc *streamConn) read() {
	r := bufio.NewReaderSize(sc.c, 16<<10)
	var head [9]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			sc.fail(err)
			return
		}
		req := binary.LittleEndian.Uint64(head[:8])
		var answer error
		switch head[8] {
		case answerDurable:
		case answerRefused:
			var n [4]byte
			if _, err := io.ReadFull(r, n[:]); err != nil {
				sc.fail(err)
				return
			}
			size := binary.LittleEndian.Uint32(n[:])
			if size > 1<<20 {
				sc.fail(fmt.Errorf("journalpeer: a %d-byte refusal", size))
				return
			}
			problem := make([]byte, size)
			if _, err := io.ReadFull(r, problem); err != nil {
				sc.fail(err)
				return
			}
			coded, err := errs.Unmarshal(problem)
			if err != nil {
				sc.fail(fmt.Errorf("journalpeer: a refusal that is no problem: %w", err))
				return
			}
			answer = coded
		default:
			sc.fail(fmt.Errorf("journalpeer: answer status %d", head[8]))
			return
		}
		sc.mu.Lock()
		done, ok := sc.pending[req]
		delete(sc.pending, req)
		if len(sc.pending) == 0 {
			_ = sc.c.SetReadDeadline(time.Time{})
		} else {
			_ = sc.c.SetReadDeadline(time.Now().Add(answerTimeout))
		}
		sc.mu.Unlock()
		if ok {
			done <- answer
		}
	}
}

// fail breaks the connection: every request without an answer fails with
// cause, which says nothing of whether it was written.
func (sc *streamConn) fail(cause error) {
	sc.mu.Lock()
	if sc.broken {
		sc.mu.Unlock()
		return
	}
	sc.broken = true
	sc.cause = fmt.Errorf("journalpeer: append stream broke: %w", cause)
	pending := sc.pending
	sc.pending = map[uint64]chan error{}
	c := sc.c
	sc.mu.Unlock()
	if c != nil {
		c.Close()
	}
	close(sc.dead)
	for _, done := range pending {
		done <- sc.cause
	}
}
