package journalpeer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/peer"
)

// rawStream dials m's append stream and exchanges the hellos.
func rawStream(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := peer.Dialer{Addresses: peer.Addresses{Static: map[string]peer.Static{"m": {Peer: addr}}}}
	c, err := d.DialJournal(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(streamHello); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	hello := make([]byte, len(streamHello))
	if _, err := io.ReadFull(r, hello); err != nil || string(hello) != string(streamHello) {
		t.Fatalf("hello %q, %v", hello, err)
	}
	return c, r
}

func sendFrame(t *testing.T, c net.Conn, req uint64, n uint32, body []byte) {
	t.Helper()
	var head [12]byte
	binary.LittleEndian.PutUint32(head[:4], n)
	binary.LittleEndian.PutUint64(head[4:], req)
	if _, err := c.Write(append(head[:], body...)); err != nil {
		t.Fatal(err)
	}
}

// readAnswer reads one answer: its request id and nil or the refusal.
func readAnswer(t *testing.T, r *bufio.Reader) (uint64, error) {
	t.Helper()
	var head [9]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	req := binary.LittleEndian.Uint64(head[:8])
	if head[8] == answerDurable {
		return req, nil
	}
	var n [4]byte
	io.ReadFull(r, n[:])
	problem := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(r, problem); err != nil {
		t.Fatal(err)
	}
	coded, err := errs.Unmarshal(problem)
	if err != nil {
		t.Fatalf("status %d with %q: %v", head[8], problem, err)
	}
	return req, coded
}

// TestStreamMalformedWritesNothing: on an append stream, a damaged object
// is refused BAD_JOURNAL_OBJECT and the stream goes on; an object over the
// bound is refused JOURNAL_BODY_TOO_LARGE and the stream ends; the journal
// holds only the good object.
func TestStreamMalformedWritesNothing(t *testing.T) {
	ms, c := members(t, true, "m")
	addr := strings.TrimPrefix(ms["m"].url, "http://")
	conn, r := rawStream(t, addr)
	good := EncodeObject(object(2, 7, 0, 0, "good"))
	bad := EncodeObject(object(1, 7, 0, 0, "bad"))
	bad[len(bad)-1] ^= 0xff
	sendFrame(t, conn, 1, uint32(len(bad)), bad)
	if req, err := readAnswer(t, r); req != 1 || !errors.Is(err, BadObject) {
		t.Fatalf("a damaged object: answer to %d: %v, want BAD_JOURNAL_OBJECT to 1", req, err)
	}
	sendFrame(t, conn, 2, uint32(len(good)), good)
	if req, err := readAnswer(t, r); req != 2 || err != nil {
		t.Fatalf("the good object after it: answer to %d: %v", req, err)
	}
	sendFrame(t, conn, 3, 1<<20+1, nil)
	if req, err := readAnswer(t, r); req != 3 || !errors.Is(err, TooLarge) {
		t.Fatalf("an object over the bound: answer to %d: %v, want JOURNAL_BODY_TOO_LARGE to 3", req, err)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the stream goes on after a length it cannot trust")
	}
	refs, err := c.Fence(context.Background(), "m", 7, 0)
	if err != nil || len(refs) != 1 || refs[0].Object != 2 {
		t.Fatalf("the journal holds %v (%v), want object 2 alone", refs, err)
	}
}

// TestStreamToAnOlderMember: a member whose peer port serves HTTP alone (a
// build from before the stream) answers the stream's hello with an HTTP
// error at once; the client sends it objects as HTTP requests.
func TestStreamToAnOlderMember(t *testing.T) {
	j, err := journal.Open(journal.Dir(t.TempDir()), journal.Options{Incarnation: "old"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(HandlerConfig{Journal: j}))
	t.Cleanup(func() { srv.Close(); j.Close() })
	d := peer.Dialer{Addresses: peer.Addresses{Static: map[string]peer.Static{"old": {Peer: strings.TrimPrefix(srv.URL, "http://")}}}}
	c := NewStreamingClient(peer.NewClient(d), d.DialJournal)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range uint64(3) {
		if err := c.Append(ctx, "old", object(i+1, 7, 0, i, "x")); err != nil {
			t.Fatalf("append %d to an older member: %v", i+1, err)
		}
	}
	if refs := j.Objects(7); len(refs) != 3 {
		t.Fatalf("the older member holds %d objects, want 3", len(refs))
	}
}

// fakeMember accepts append streams on a real peer port and lets the test
// decide what each does after the hellos.
func fakeMember(t *testing.T, serve func(c net.Conn, r *bufio.Reader)) (*Client, string) {
	t.Helper()
	mux, err := peer.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close() })
	go func() {
		for {
			c, err := mux.Journal().Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				hello := make([]byte, len(streamHello))
				if _, err := io.ReadFull(r, hello); err != nil {
					return
				}
				c.Write(streamHello)
				serve(c, r)
			}()
		}
	}()
	d := peer.Dialer{Addresses: peer.Addresses{Static: map[string]peer.Static{"m": {Peer: mux.Addr().String()}}}}
	c := NewStreamingClient(peer.NewClient(d), d.DialJournal)
	t.Cleanup(c.Close)
	return c, mux.Addr().String()
}

// readRequest reads one request's id.
func readRequest(r *bufio.Reader) (uint64, error) {
	var head [12]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, err
	}
	_, err := r.Discard(int(binary.LittleEndian.Uint32(head[:4])))
	return binary.LittleEndian.Uint64(head[4:]), err
}

func answerDurableTo(c net.Conn, req uint64) {
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:8], req)
	c.Write(b[:])
}

// TestStreamBrokenSaysNothing: a stream that breaks before answering fails
// the object with an error that is no refusal (it may have been written:
// resend the same bytes), and the next object is sent on a new stream.
func TestStreamBrokenSaysNothing(t *testing.T) {
	var streams atomic.Int32
	c, _ := fakeMember(t, func(conn net.Conn, r *bufio.Reader) {
		n := streams.Add(1)
		req, err := readRequest(r)
		if err != nil {
			return
		}
		if n == 1 {
			return // read, maybe written, never answered
		}
		answerDurableTo(conn, req)
		for {
			if req, err = readRequest(r); err != nil {
				return
			}
			answerDurableTo(conn, req)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.Append(ctx, "m", object(1, 7, 0, 0, "x"))
	if _, coded := errs.As(err); err == nil || coded {
		t.Fatalf("a stream broken before its answer: %v, want an error that is no refusal", err)
	}
	for i := range uint64(3) {
		if err := c.Append(ctx, "m", object(i+1, 7, 0, i, "x")); err != nil {
			t.Fatalf("append %d after the break: %v", i+1, err)
		}
	}
}

// TestStreamCallerGivesUp: a caller whose ctx ends stops waiting; the late
// answer is dropped, and the stream carries the next objects.
func TestStreamCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	c, _ := fakeMember(t, func(conn net.Conn, r *bufio.Reader) {
		first, err := readRequest(r)
		if err != nil {
			return
		}
		<-release
		answerDurableTo(conn, first) // nobody waits for it any more
		for {
			req, err := readRequest(r)
			if err != nil {
				return
			}
			answerDurableTo(conn, req)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Append(ctx, "m", object(1, 7, 0, 0, "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller whose ctx ended: %v", err)
	}
	close(release)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	for i := range uint64(3) {
		if err := c.Append(ctx2, "m", object(i+2, 7, 0, i+1, "y")); err != nil {
			t.Fatalf("append %d on the same stream: %v", i+2, err)
		}
	}
}
