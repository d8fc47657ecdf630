package dsapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/framing"
	"github.com/picomq/picomq/broker/framing/framingtest"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/node/nodetest"
)

// TestMalformedRequestsWriteNothing: every class of malformed Durable
// Streams request — ambiguous framing over raw TCP, empty, repeated or
// malformed protocol headers, empty or repeated query parameters, invalid
// JSON, an oversize body, bad names — is refused with its status and code,
// and leaves every stream's tail, closed flag and producers as they were,
// creating no name.
func TestMalformedRequestsWriteNothing(t *testing.T) {
	b, err := core.Open(core.Config{DataDir: t.TempDir(), MaintenanceInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, New(b, Options{Options: frontend.Options{LongPollTimeout: 200 * time.Millisecond, MaxBodyBytes: 1 << 10}}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = framing.Listen(srv.Listener, framing.Limits{})
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		_ = b.Close()
	})
	addr := srv.Listener.Addr().String()

	req := func(method, path, ct, body string, headers ...string) string {
		h := "Host: x\r\n" + strings.Join(headers, "")
		if ct != "" {
			h += "Content-Type: " + ct + "\r\n"
		}
		if method != "GET" {
			h += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
		}
		return method + " /v1/stream/" + path + " HTTP/1.1\r\n" + h + "\r\n" + body
	}
	for _, setup := range []string{
		req("PUT", "s", "text/plain", ""),
		req("POST", "s", "text/plain", "first", "Producer-Id: p\r\n", "Producer-Epoch: 0\r\n", "Producer-Seq: 0\r\n"),
		req("PUT", "j", "application/json", ""),
		req("POST", "j", "application/json", `{"a":1}`),
	} {
		if status, body := framingtest.Exchange(t, addr, setup); status >= 300 {
			t.Fatalf("setup: %d %s", status, body)
		}
	}
	before := nodetest.State(t, b)
	if !strings.HasPrefix(before, "j closed=false producers=map[] p0=[0,1)\ns closed=false producers=map[p:") || !strings.HasSuffix(before, "] p0=[0,1)") {
		t.Fatalf("setup left %s", before)
	}
	deep := strings.Repeat("d/", node.MaxNameDepth) + "d"
	for _, tc := range []struct {
		name   string
		req    string
		status int
		code   string
	}{
		{"CL and TE", "POST /v1/stream/s HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400, "AMBIGUOUS_FRAMING"},
		{"differing CL", req("POST", "s", "text/plain", "abc", "Content-Length: 2\r\n"), 400, "AMBIGUOUS_FRAMING"},
		{"101 header lines", req("POST", "s", "text/plain", "abc", strings.Repeat("X-Pad: y\r\n", 100)), 431, "HEADERS_TOO_LARGE"},
		{"empty Stream-TTL", req("PUT", "new", "text/plain", "", "Stream-TTL: \r\n"), 400, "MALFORMED_HEADER"},
		{"empty Stream-Expires-At", req("PUT", "new", "text/plain", "", "Stream-Expires-At:\r\n"), 400, "MALFORMED_HEADER"},
		{"repeated Stream-TTL", req("PUT", "new", "text/plain", "", "Stream-TTL: 60\r\n", "Stream-TTL: 60\r\n"), 400, "MALFORMED_HEADER"},
		{"empty Stream-Forked-From", req("PUT", "new", "text/plain", "", "Stream-Forked-From: \r\n"), 400, "MALFORMED_HEADER"},
		{"empty Producer-Epoch", req("POST", "s", "text/plain", "abc", "Producer-Id: p\r\n", "Producer-Epoch:\r\n", "Producer-Seq: 1\r\n"), 400, "MALFORMED_HEADER"},
		{"repeated Producer-Id", req("POST", "s", "text/plain", "abc", "Producer-Id: p\r\n", "Producer-Id: q\r\n", "Producer-Epoch: 0\r\n", "Producer-Seq: 1\r\n"), 400, "MALFORMED_HEADER"},
		{"empty Stream-Seq", req("POST", "s", "text/plain", "abc", "Stream-Seq: \r\n"), 400, "MALFORMED_HEADER"},
		{"repeated Stream-Seq", req("POST", "s", "text/plain", "abc", "Stream-Seq: 5\r\n", "Stream-Seq: 6\r\n"), 400, "MALFORMED_HEADER"},
		{"empty Stream-Closed", req("POST", "s", "text/plain", "abc", "Stream-Closed: \r\n"), 400, "MALFORMED_HEADER"},
		{"Stream-Closed neither true nor false", req("POST", "s", "text/plain", "", "Stream-Closed: yes\r\n"), 400, "MALFORMED_HEADER"},
		{"empty offset", req("GET", "s?offset=", "", ""), 400, "MALFORMED_QUERY"},
		{"repeated cursor", req("GET", "s?offset=-1&cursor=1&cursor=2", "", ""), 400, "MALFORMED_QUERY"},
		{"JSON with a repeated member", req("POST", "j", "application/json", `{"a":1,"a":2}`), 400, "BAD_REQUEST"},
		{"JSON with trailing data", req("POST", "j", "application/json", `[1] [2]`), 400, "BAD_REQUEST"},
		{"JSON not UTF-8", req("POST", "j", "application/json", "\"\xff\""), 400, "BAD_REQUEST"},
		{"body over the limit", req("POST", "s", "text/plain", strings.Repeat("b", 2048)), 413, "BODY_TOO_LARGE"},
		{"name over 255 bytes", req("PUT", strings.Repeat("n", 256), "text/plain", ""), 400, "STREAM_MISCONFIGURED"},
		{"name over 16 segments", req("PUT", deep, "text/plain", ""), 400, "STREAM_MISCONFIGURED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := framingtest.Exchange(t, addr, tc.req)
			if status != tc.status || !strings.Contains(body, `"`+tc.code+`"`) {
				t.Fatalf("%d %s, want %d %s", status, body, tc.status, tc.code)
			}
			if after := nodetest.State(t, b); after != before {
				t.Fatalf("the broker changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
