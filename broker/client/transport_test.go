package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
)

// countingServer is an httptest server counting the connections it
// accepted and closed.
type countingServer struct {
	*httptest.Server
	opened, closed atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// echo answers with the method and the request body.
func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s", r.Method, b)
}

func roundTrip(t *testing.T, hc *http.Client, method, u, body string) string {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, u, err)
	}
	return string(b)
}

func TestTransportKeepsConnectionsAlive(t *testing.T) {
	s := newCountingServer(t, echo)
	hc := &http.Client{Transport: &client.Transport{}}
	for i := range 20 {
		if i%2 == 0 {
			if got, want := roundTrip(t, hc, "POST", s.URL+"/a", fmt.Sprint("body", i)), fmt.Sprint("POST body", i); got != want {
				t.Fatalf("answer %q, want %q", got, want)
			}
		} else if got := roundTrip(t, hc, "GET", s.URL+"/b", ""); got != "GET " {
			t.Fatalf("answer %q, want %q", got, "GET ")
		}
	}
	if n := s.opened.Load(); n != 1 {
		t.Fatalf("%d connections for 20 requests in a row, want 1", n)
	}
}

// A broker that closed its connections (idle, or restarted): the next
// request, an append too, goes on a new connection without an error.
func TestTransportDropsConnectionsTheBrokerClosed(t *testing.T) {
	var posts atomic.Int64
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			posts.Add(1)
		}
		echo(w, r)
	})
	hc := &http.Client{Transport: &client.Transport{}}
	roundTrip(t, hc, "POST", s.URL, "one")
	s.CloseClientConnections()
	for deadline := time.Now().Add(10 * time.Second); s.closed.Load() < 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := roundTrip(t, hc, "POST", s.URL, "two"); got != "POST two" {
		t.Fatalf("answer %q", got)
	}
	if s.opened.Load() != 2 || posts.Load() != 2 {
		t.Fatalf("%d connections, %d appends; want 2 and 2", s.opened.Load(), posts.Load())
	}
}

// rawServer answers the first request on each connection and reads the
// second whole, then closes the connection without answering it.
func rawServer(t *testing.T) (addr string, seen func() []string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var reqs []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.ReadAll(req.Body)
					mu.Lock()
					reqs = append(reqs, req.Method)
					mu.Unlock()
					if i == 1 {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reqs...)
	}
}

// A request whose kept-alive connection fails before any answer: an
// append is not sent again (the broker may have applied it); a GET is.
func TestTransportNeverSendsAnAppendTwice(t *testing.T) {
	addr, seen := rawServer(t)
	hc := &http.Client{Transport: &client.Transport{}}
	roundTrip(t, hc, "POST", "http://"+addr, "first")
	resp, err := hc.Post("http://"+addr, "text/plain", strings.NewReader("second"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("POST whose connection closed unanswered succeeded")
	}
	if got := seen(); len(got) != 2 {
		t.Fatalf("broker saw %v: the POST went again", got)
	}

	roundTrip(t, hc, "GET", "http://"+addr, "") // first on a new connection
	if got := roundTrip(t, hc, "GET", "http://"+addr, ""); got != "ok" {
		t.Fatalf("GET answer %q", got)
	}
	if got := seen(); len(got) != 5 || got[3] != "GET" || got[4] != "GET" {
		t.Fatalf("broker saw %v: want the second GET once unanswered, once again on a new connection", got)
	}
}

// A ctx that ends aborts a request waiting for its answer; that connection
// is not kept.
func TestTransportHonoursContext(t *testing.T) {
	release := make(chan struct{})
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		echo(w, r)
	})
	defer close(release)
	hc := &http.Client{Transport: &client.Transport{}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/slow", strings.NewReader("x"))
	if _, err := hc.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request past its deadline: %v, want DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", s.URL+"/fast", nil)
	if _, err := hc.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("request with an ended ctx: %v, want Canceled", err)
	}
	if got := roundTrip(t, hc, "GET", s.URL+"/fast", ""); got != "GET " {
		t.Fatalf("answer %q", got)
	}
	if n := s.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the aborted one not kept)", n)
	}
}

// A body closed unread gives its connection back when little is left, and
// closes it otherwise; so does an answer with Connection: close.
func TestTransportBodyEndings(t *testing.T) {
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(bytes.Repeat([]byte("b"), 1<<20))
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		default:
			w.Write(bytes.Repeat([]byte("s"), 1<<10))
		}
	})
	hc := &http.Client{Transport: &client.Transport{}}
	get := func(path string, read int) {
		resp, err := hc.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.CopyN(io.Discard, resp.Body, int64(read))
		resp.Body.Close()
	}
	get("/small", 10)
	get("/small", 0)
	// Read past the end keeps answering EOF; after Close, an error.
	resp, err := hc.Get(s.URL + "/small")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 1<<10 {
		t.Fatalf("body: %d bytes, %v", len(b), err)
	}
	if n, err := resp.Body.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read past the end: %d, %v; want 0, EOF", n, err)
	}
	resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 8)); err == nil || err == io.EOF {
		t.Fatalf("read after Close: %v, want an error", err)
	}
	if n := s.opened.Load(); n != 1 {
		t.Fatalf("small bodies closed unread: %d connections, want 1", n)
	}
	get("/big", 10)
	get("/small", 10)
	if n := s.opened.Load(); n != 2 {
		t.Fatalf("a 1 MiB body closed unread: %d connections, want 2", n)
	}
	get("/close", 100)
	get("/small", 10)
	if n := s.opened.Load(); n != 3 {
		t.Fatalf("after Connection: close, %d connections, want 3", n)
	}
}

type recordingRT struct{ calls atomic.Int64 }

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.calls.Add(1)
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("fallback")), Request: req}, nil
}

// HTTPS and proxied requests go to the fallback.
func TestTransportFallsBack(t *testing.T) {
	fb := &recordingRT{}
	proxied := false
	tr := &client.Transport{Fallback: fb, Proxy: func(*http.Request) (*url.URL, error) {
		if proxied {
			return url.Parse("http://proxy:3128")
		}
		return nil, nil
	}}
	hc := &http.Client{Transport: tr}
	if got := roundTrip(t, hc, "GET", "https://broker.invalid/x", ""); got != "fallback" || fb.calls.Load() != 1 {
		t.Fatalf("https: answer %q, fallback calls %d", got, fb.calls.Load())
	}
	proxied = true
	if got := roundTrip(t, hc, "GET", "http://broker.invalid/x", ""); got != "fallback" || fb.calls.Load() != 2 {
		t.Fatalf("proxied: answer %q, fallback calls %d", got, fb.calls.Load())
	}
}

// Concurrent callers each get a connection of their own, kept for reuse
// (up to MaxIdlePerHost), and closed by CloseIdleConnections.
func TestTransportConcurrentAndCloseIdle(t *testing.T) {
	s := newCountingServer(t, echo)
	tr := &client.Transport{MaxIdlePerHost: 4}
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				body := fmt.Sprintf("g%d-%d", g, i)
				if got := roundTrip(t, hc, "POST", s.URL, body); got != "POST "+body {
					t.Errorf("answer %q, want %q", got, "POST "+body)
				}
			}
		})
	}
	wg.Wait()
	if n := s.opened.Load(); n < 1 || n > 8*50 {
		t.Fatalf("%d connections", n)
	}
	tr.CloseIdleConnections()
	for deadline := time.Now().Add(10 * time.Second); s.closed.Load() < s.opened.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s.closed.Load() != s.opened.Load() {
		t.Fatalf("%d of %d connections closed after CloseIdleConnections", s.closed.Load(), s.opened.Load())
	}
}

// Connections left idle past IdleTimeout are closed, not kept, even while
// another connection keeps being used.
func TestTransportClosesConnectionsIdleTooLong(t *testing.T) {
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(4)
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/together" {
			arrived.Done()
			<-release
		}
		echo(w, r)
	})
	hc := &http.Client{Transport: &client.Transport{IdleTimeout: 50 * time.Millisecond}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { roundTrip(t, hc, "GET", s.URL+"/together", "") })
	}
	arrived.Wait() // four requests at once: four connections
	close(release)
	wg.Wait()
	// One request at a time, each on the connection the last one used,
	// for longer than IdleTimeout: the other three are left idle.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		roundTrip(t, hc, "GET", s.URL+"/alone", "")
	}
	for deadline := time.Now().Add(10 * time.Second); s.closed.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s.closed.Load() < 3 {
		t.Fatalf("%d connections opened, %d closed; want the 3 idle past IdleTimeout closed", s.opened.Load(), s.closed.Load())
	}
}
