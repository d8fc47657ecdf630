package dsapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/frontend"
)

// clock is a settable clock for the broker.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// server is a broker on dir behind the protocol's handler.
type server struct {
	t   *testing.T
	b   *core.Broker
	h   *Handler
	srv *httptest.Server
	url string
}

// eventuallyWaiting waits until n reads wait for records.
func (s *server) eventuallyWaiting(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.h.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads waiting after 10s, want %d", s.h.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func start(t *testing.T, dir string, clk *clock) *server {
	t.Helper()
	cfg := core.Config{DataDir: dir, MaintenanceInterval: time.Hour}
	if clk != nil {
		cfg.Clock = clk.Now
	}
	b, err := core.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h := New(b, Options{Options: frontend.Options{LongPollTimeout: 200 * time.Millisecond}})
	mux.Handle(Prefix, h)
	srv := httptest.NewServer(mux)
	s := &server{t: t, b: b, h: h, srv: srv, url: srv.URL + "/v1/stream/"}
	t.Cleanup(s.stop)
	return s
}

func (s *server) stop() {
	if s.srv == nil {
		return
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
	if err := s.b.Close(); err != nil {
		s.t.Error(err)
	}
	s.srv = nil
}

type resp struct {
	status int
	h      http.Header
	body   string
}

func (s *server) do(method, name string, body string, headers ...string) resp {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.url+name, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(raw)}
}

func (s *server) want(r resp, status int, what string) resp {
	s.t.Helper()
	if r.status != status {
		s.t.Fatalf("%s: status %d, want %d (%s)", what, r.status, status, r.body)
	}
	return r
}

func TestOffsetsSortAndRoundTrip(t *testing.T) {
	t.Parallel()
	prev := ""
	for _, off := range []uint64{0, 1, 9, 10, 99, 1 << 40, 1<<63 - 1} {
		s := formatOffset(off)
		if len(s) != 33 && off < 1e16 {
			t.Fatalf("%d -> %q", off, s)
		}
		if s <= prev {
			t.Fatalf("%q does not sort after %q", s, prev)
		}
		prev = s
		if got, ok := parseOffset(s); !ok || got != off {
			t.Fatalf("parse(%q) = %d %v", s, got, ok)
		}
	}
	for _, bad := range []string{"", "-1", "now", "0", "0_1", "a_0", "0,1", "1 2", "../0_0", "0_0/..", "0_0\n"} {
		if _, ok := parseOffset(bad); ok {
			t.Fatalf("parsed %q", bad)
		}
	}
}

func TestSSEDataCannotInjectEvents(t *testing.T) {
	t.Parallel()
	got := appendData(nil, []byte("a\r\n\r\nevent: control\rdata: x\n\nz"))
	want := "data:a\ndata:\ndata:event: control\ndata:data: x\ndata:\ndata:z\n\n"
	if string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestCursorAdvancesPastTheClients(t *testing.T) {
	t.Parallel()
	now := cursorEpoch.Add(100*cursorInterval + time.Second)
	if c := nextCursor("", now); c != "100" {
		t.Fatalf("cursor %s", c)
	}
	if c := nextCursor("3", now); c != "100" {
		t.Fatalf("old client cursor: %s", c)
	}
	for i := 0; i < 50; i++ {
		c := nextCursor("100", now)
		if c <= "100" || len(c) != 3 || c > "280" {
			t.Fatalf("colliding cursor answered %s", c)
		}
	}
}

func TestJSONRecordsFlattenOneLevel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a": 1}`:          `{"a":1}`,
		` [ [1, 2], [3] ] `: `[1,2],[3]`,
		`"x"`:               `"x"`,
		`[]`:                ``,
	} {
		got, _, err := jsonRecord([]byte(in))
		if err != nil || string(got) != want {
			t.Fatalf("%s -> %s, %v; want %s", in, got, err, want)
		}
	}
	if _, _, err := jsonRecord([]byte(`{bad`)); err == nil {
		t.Fatal("invalid JSON accepted")
	}
}

// TestProtocolBasics: create, append, read, JSON, long-poll, SSE and HEAD
// through the handler (the conformance suite covers the rest).
func TestProtocolBasics(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), nil)
	r := s.want(s.do("PUT", "a/b", `[{"n":1},{"n":2}]`, "Content-Type", "application/json"), 201, "create")
	if r.h.Get(hNextOffset) != formatOffset(1) || !strings.HasSuffix(r.h.Get("Location"), "/v1/stream/a/b") {
		t.Fatalf("create headers %v", r.h)
	}
	s.want(s.do("POST", "a/b", `{"n":3}`, "Content-Type", "application/json; charset=utf-8"), 204, "append")
	r = s.want(s.do("GET", "a/b", ""), 200, "read")
	if r.body != `[{"n":1},{"n":2},{"n":3}]` || r.h.Get(hUpToDate) != "true" {
		t.Fatalf("read %q %v", r.body, r.h)
	}
	s.want(s.do("GET", "a/b?offset="+formatOffset(2)+"&live=long-poll", ""), 204, "long-poll timeout")
	done := make(chan resp)
	go func() { done <- s.do("GET", "a/b?offset="+formatOffset(2)+"&live=long-poll", "") }()
	s.eventuallyWaiting(t, 1)
	s.want(s.do("POST", "a/b", `[4]`, "Content-Type", "application/json"), 204, "append")
	if r := <-done; r.status != 200 || r.body != `[4]` {
		t.Fatalf("long-poll woken: %d %q", r.status, r.body)
	}
	s.want(s.do("POST", "a/b", "", "Stream-Closed", "true"), 204, "close")
	r = s.want(s.do("GET", "a/b?offset=-1&live=sse", ""), 200, "sse")
	if !strings.Contains(r.body, "event: data\ndata:[{\"n\":1},{\"n\":2},{\"n\":3},4]\n\n") || !strings.Contains(r.body, `"streamClosed":true`) {
		t.Fatalf("sse body %q", r.body)
	}
	r = s.want(s.do("HEAD", "a/b", ""), 200, "head")
	if r.h.Get(hClosed) != "true" || r.h.Get(hNextOffset) != formatOffset(3) || r.h.Get("Cache-Control") != "no-store" {
		t.Fatalf("head %v", r.h)
	}
	s.want(s.do("DELETE", "a/b", ""), 204, "delete")
	s.want(s.do("GET", "a/b", ""), 404, "read deleted")
}

// TestMalformedJSONIsRefusedWritingNothing: a JSON stream refuses a body
// readers would read differently — a repeated member name, trailing data,
// invalid UTF-8 — with 400 BAD_REQUEST, on create and on append, and the
// stream's tail is what it was; a create refused creates no stream.
func TestMalformedJSONIsRefusedWritingNothing(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), nil)
	json := []string{"Content-Type", "application/json"}
	bad := []string{`{"n":1,"n":2}`, `[{"a":{"b":1,"\u0062":2}}]`, `{"n":1}}`, `[1] [2]`, "{\"n\":\"\xff\"}"}
	for i, body := range bad {
		name := fmt.Sprintf("m/create-%d", i)
		r := s.want(s.do("PUT", name, body, json...), 400, "a create with "+body)
		if !strings.Contains(r.body, "BAD_REQUEST") {
			t.Fatalf("create with %q: %s", body, r.body)
		}
		s.want(s.do("HEAD", name, ""), 404, "the stream a refused create named")
	}
	s.want(s.do("PUT", "m/s", `[{"n":1}]`, json...), 201, "create")
	for _, body := range bad {
		r := s.want(s.do("POST", "m/s", body, json...), 400, "an append of "+body)
		if !strings.Contains(r.body, "BAD_REQUEST") {
			t.Fatalf("append of %q: %s", body, r.body)
		}
	}
	r := s.want(s.do("GET", "m/s", ""), 200, "read")
	if r.body != `[{"n":1}]` || r.h.Get(hNextOffset) != formatOffset(1) {
		t.Fatalf("after the refusals: %q next %s; want the one record", r.body, r.h.Get(hNextOffset))
	}
}

// TestCredentialedReadsAreNeverPublic: a read of history, or of a closed
// stream, is cacheable by anyone without credentials (public), but an
// answer to a request carrying Authorization is private and varies on it,
// so that a shared cache never hands a reader's authorised answer to
// another. (Issue 31's first point; the rest of it is still to come.)
func TestCredentialedReadsAreNeverPublic(t *testing.T) {
	s := start(t, t.TempDir(), nil)
	defer s.stop()
	s.want(s.do("PUT", "c/d", "", "Content-Type", "application/json"), 201, "create")
	// Two records of 700 KB: a read from 0 stops after the first (one
	// response holds up to 1 MiB), so it is history, not the tail.
	big := `["` + strings.Repeat("x", 700<<10) + `"]`
	s.want(s.do("POST", "c/d", big, "Content-Type", "application/json"), 204, "append")
	s.want(s.do("POST", "c/d", big, "Content-Type", "application/json"), 204, "append")
	s.want(s.do("POST", "c/d", `[3]`, "Content-Type", "application/json"), 204, "append")
	history := "c/d?offset=" + formatOffset(0)
	for _, c := range []struct {
		what, path string
		headers    []string
		want       string
		vary       bool
	}{
		{"history, anonymous", history, nil, "public, max-age=60, stale-while-revalidate=300", false},
		{"history, with a token", history, []string{"Authorization", "Bearer t"}, "private, max-age=60, stale-while-revalidate=300", true},
	} {
		r := s.do("GET", c.path, "", c.headers...)
		if got := r.h.Get("Cache-Control"); got != c.want {
			t.Errorf("%s: Cache-Control %q, want %q", c.what, got, c.want)
		}
		if got := strings.Contains(r.h.Get("Vary"), "Authorization"); got != c.vary {
			t.Errorf("%s: Vary %q, want Authorization: %v", c.what, r.h.Get("Vary"), c.vary)
		}
	}
	s.want(s.do("POST", "c/d", "", "Stream-Closed", "true"), 204, "close")
	if r := s.do("GET", "c/d?offset="+formatOffset(3), "", "Authorization", "Bearer t"); r.h.Get("Cache-Control") != "private, max-age=60" || !strings.Contains(r.h.Get("Vary"), "Authorization") {
		t.Errorf("closed, with a token: Cache-Control %q Vary %q, want private and Vary: Authorization", r.h.Get("Cache-Control"), r.h.Get("Vary"))
	}
	if r := s.do("GET", "c/d?offset="+formatOffset(3), ""); r.h.Get("Cache-Control") != "public, max-age=60" {
		t.Errorf("closed, anonymous: Cache-Control %q, want public, max-age=60", r.h.Get("Cache-Control"))
	}
}
