package contracts_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/test/clusterharness"
)

// h2Client speaks HTTP/2 only: over TLS by ALPN (conf set), else with
// prior knowledge (h2c). dials counts the connections it opened.
func h2Client(conf *tls.Config, dials *atomic.Int64) *http.Client {
	var p http.Protocols
	if conf != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		TLSClientConfig: conf,
		HTTP2:           &http.HTTP2Config{StrictMaxConcurrentRequests: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// do sends one request and returns the answer's protocol, status, headers
// and body.
func do(t *testing.T, hc *http.Client, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, string(data)
}

// TestHTTP2 runs a lone broker twice, with TLS and without: HTTP/2 is
// negotiated by ALPN and with prior knowledge, HTTP/1.1 still works beside
// it (its heads still checked), 200 long-polls share one HTTP/2
// connection and are all answered by one append, and an SSE response
// streams over HTTP/2.
func TestHTTP2(t *testing.T) {
	needBroker(t)
	for _, withTLS := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls=%v", withTLS), func(t *testing.T) {
			o := clusterharness.Options{Brokers: 1, ExtraFlags: []string{"--long-poll-timeout", "60s"}}
			if withTLS {
				o.Security = &clusterharness.Security{TLS: true}
			}
			c := clusterharness.Start(t, o)
			var conf *tls.Config
			if withTLS {
				conf = c.TLSConfig()
			}
			base := c.URL(0)
			var dials atomic.Int64
			h2 := h2Client(conf.Clone(), &dials)
			defer h2.CloseIdleConnections()

			resp, _ := do(t, h2, "PUT", base+"/v1/stream/h2/s", "", "Content-Type", "text/plain")
			if resp.StatusCode != 201 || resp.ProtoMajor != 2 {
				t.Fatalf("create over h2: %s %s, want 201 over HTTP/2.0", resp.Proto, resp.Status)
			}
			// HTTP/1.1 beside it, and its framing checks: a head with both
			// Content-Length and Transfer-Encoding is refused.
			var h1p http.Protocols
			h1p.SetHTTP1(true)
			h1conf := conf.Clone()
			if h1conf != nil {
				h1conf.NextProtos = []string{"http/1.1"}
			}
			h1 := &http.Client{Transport: &http.Transport{Protocols: &h1p, TLSClientConfig: h1conf}}
			defer h1.CloseIdleConnections()
			resp, _ = do(t, h1, "POST", base+"/v1/stream/h2/s", "one\n", "Content-Type", "text/plain")
			if resp.StatusCode != 204 || resp.ProtoMajor != 1 {
				t.Fatalf("append over HTTP/1.1: %s %s, want 204 over HTTP/1.1", resp.Proto, resp.Status)
			}
			if got := ambiguousHead(t, c.Broker(0).ClientAddr(), conf); !strings.HasPrefix(got, "HTTP/1.1 400") {
				t.Fatalf("an ambiguous HTTP/1.1 head was answered %q, want 400", got)
			}

			// 200 long-polls at the tail over one connection, all answered
			// by one append.
			resp, _ = do(t, h2, "HEAD", base+"/v1/stream/h2/s", "")
			tail := resp.Header.Get("Stream-Next-Offset")
			const polls = 200
			var wg sync.WaitGroup
			results := make(chan string, polls)
			for range polls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, body := do(t, h2, "GET", base+"/v1/stream/h2/s?live=long-poll&offset="+tail, "")
					results <- fmt.Sprintf("%s %d %q", resp.Proto, resp.StatusCode, body)
				}()
			}
			waitGauge(t, h1, base, "picomq_stream_reads_waiting", polls)
			resp, _ = do(t, h2, "POST", base+"/v1/stream/h2/s", "two\n", "Content-Type", "text/plain")
			if resp.StatusCode != 204 {
				t.Fatalf("append over h2: %s", resp.Status)
			}
			wg.Wait()
			close(results)
			for r := range results {
				if r != `HTTP/2.0 200 "two\n"` {
					t.Fatalf("a long-poll over h2 answered %s, want HTTP/2.0 200 \"two\\n\"", r)
				}
			}
			if n := dials.Load(); n != 1 {
				t.Fatalf("the HTTP/2 client opened %d connections for %d long-polls and the rest, want 1", n, polls)
			}

			// SSE over h2: the history, then a record appended while it is
			// open.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/stream/h2/s?live=sse&offset=-1", nil)
			sse, err := h2.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer sse.Body.Close()
			if sse.ProtoMajor != 2 || sse.StatusCode != 200 || !strings.HasPrefix(sse.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("SSE: %s %s %q", sse.Proto, sse.Status, sse.Header.Get("Content-Type"))
			}
			lines := bufio.NewScanner(sse.Body)
			want := []string{"one", "two", "three"}
			appended := false
			var data strings.Builder
			for len(want) > 0 && lines.Scan() {
				line := lines.Text()
				if d, ok := strings.CutPrefix(line, "data:"); ok {
					data.WriteString(strings.TrimPrefix(d, " "))
					data.WriteString("\n")
				}
				for len(want) > 0 && strings.Contains(data.String(), want[0]) {
					want = want[1:]
				}
				if len(want) == 1 && !appended {
					appended = true
					do(t, h2, "POST", base+"/v1/stream/h2/s", "three\n", "Content-Type", "text/plain")
				}
			}
			if len(want) > 0 {
				t.Fatalf("SSE over h2 ended (%v) before %v; data so far %q", lines.Err(), want, data.String())
			}
		})
	}
}

// ambiguousHead sends an HTTP/1.1 request whose body length could be read
// two ways and returns the answer's status line.
func ambiguousHead(t *testing.T, addr string, conf *tls.Config) string {
	t.Helper()
	var c net.Conn
	var err error
	if conf != nil {
		h1 := conf.Clone()
		h1.NextProtos = []string{"http/1.1"}
		c, err = tls.Dial("tcp", addr, h1)
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "POST /v1/stream/h2/s HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// waitGauge waits until the broker's metric name reaches at least want.
func waitGauge(t *testing.T, hc *http.Client, base, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last float64
	for time.Now().Before(deadline) {
		_, body := do(t, hc, "GET", base+"/metrics", "")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				last, _ = strconv.ParseFloat(v, 64)
			}
		}
		if last >= want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s = %v after 30s, want %v", name, last, want)
}

// TestHTTP2ThroughTheRouter: a cluster with TLS; HTTP/2 requests sent to a
// broker that does not own the stream are proxied to its owner — create,
// append, read and a long-poll — and answered over HTTP/2.
func TestHTTP2ThroughTheRouter(t *testing.T) {
	needCluster(t)
	o := options()
	o.Security = &clusterharness.Security{TLS: true}
	c := clusterharness.Start(t, o)
	h2 := h2Client(c.TLSConfig(), nil)
	defer h2.CloseIdleConnections()
	ctx := t.Context()
	proxied := 0
	for i := range 8 {
		name := fmt.Sprintf("h2/routed-%d", i)
		owner := -1
		for j := range 3 {
			via := c.URL((i + j) % 3)
			resp, body := do(t, h2, "PUT", via+"/v1/stream/"+name, "", "Content-Type", "text/plain")
			if j == 0 && (resp.StatusCode != 201 || resp.ProtoMajor != 2) {
				t.Fatalf("create %s: %s %s %s", name, resp.Proto, resp.Status, body)
			}
			resp, body = do(t, h2, "POST", via+"/v1/stream/"+name, fmt.Sprintf("via-%d\n", j), "Content-Type", "text/plain")
			if resp.StatusCode != 204 || resp.ProtoMajor != 2 {
				t.Fatalf("append to %s via broker-%d: %s %s %s", name, (i+j)%3, resp.Proto, resp.Status, body)
			}
			if owner < 0 {
				if owner, _ = c.Owner(ctx, name, 0); owner >= 0 && owner != (i+j)%3 {
					proxied++
				}
			}
		}
		resp, body := do(t, h2, "GET", c.URL((i+1)%3)+"/v1/stream/"+name+"?offset=-1", "")
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 || body != "via-0\nvia-1\nvia-2\n" {
			t.Fatalf("read %s: %s %s %q", name, resp.Proto, resp.Status, body)
		}
	}
	if proxied == 0 {
		t.Fatal("no request was proxied: every stream was owned by the broker it was first sent to")
	}
}
