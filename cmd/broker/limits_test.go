package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/settings"
)

// dialBroker opens a raw connection to the broker at base (http://addr).
func dialBroker(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closes c within d: a read meets
// the end (or a reset) rather than the deadline.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestSlowClientsAreCutOff: with short timeouts, a client trickling its
// request head, one idling on a kept-alive connection, one that opens a
// connection and sends nothing, and one trickling a body are all cut off
// (the last with 408 REQUEST_TIMEOUT), while a well-behaved request on the
// same broker is served: a slowloris cannot hold the broker's connections.
func TestSlowClientsAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and waits on its timeouts; runs without -short")
	}
	base, _ := started(t, "--data-dir", t.TempDir(), "--read-header-timeout", "1s", "--idle-timeout", "1s", "--body-read-timeout", "1s")

	t.Run("head sent byte by byte", func(t *testing.T) {
		c := dialBroker(t, base)
		head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200) + "\r\n\r\n"
		cut := false
		for i := 0; i < len(head) && !cut; i++ {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				cut = true
				break
			}
			// 100 ms a byte: the head would take 20 s, the broker allows 1 s.
			cut = closedWithin(c, 100*time.Millisecond)
		}
		if !cut {
			t.Fatal("a head sent byte by byte over 20 s was served to its end")
		}
	})
	t.Run("idle kept-alive connection", func(t *testing.T) {
		c := dialBroker(t, base)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		if !closedWithin(c, 30*time.Second) {
			t.Fatal("an idle kept-alive connection was still open after 30 s (idle timeout 1 s)")
		}
	})
	t.Run("connection that sends nothing", func(t *testing.T) {
		if !closedWithin(dialBroker(t, base), 30*time.Second) {
			t.Fatal("a silent connection was still open after 30 s (read-header timeout 1 s)")
		}
	})
	t.Run("body trickled", func(t *testing.T) {
		c := dialBroker(t, base)
		if _, err := io.WriteString(c, "POST /v1/stream/slow HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nabc"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a trickled body: %v", err)
		}
		var p struct{ Name string }
		body, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != http.StatusRequestTimeout || p.Name != "REQUEST_TIMEOUT" {
			t.Fatalf("trickled body: %d %s, want 408 REQUEST_TIMEOUT", resp.StatusCode, body)
		}
	})
	t.Run("ambiguous framing through the whole stack", func(t *testing.T) {
		c := dialBroker(t, base)
		if _, err := io.WriteString(c, "POST /v1/stream/amb HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Fatalf("CL and TE: %v %v, want 400", resp, err)
		}
		r, err := http.Get(base + "/v1/stream/amb")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 404 {
			t.Fatalf("the refused request's stream answers %d, want 404 (never created)", r.StatusCode)
		}
	})
	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a well-behaved request after them: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestWriteTimeoutCoversLongAnswers: --write-timeout never cuts a long-poll
// or an SSE response mid-answer; 0 stays "no bound".
func TestWriteTimeoutCoversLongAnswers(t *testing.T) {
	for _, tc := range []struct{ write, poll, want time.Duration }{
		{2 * time.Minute, time.Second, 2 * time.Minute},
		{2 * time.Minute, 5 * time.Minute, 5*time.Minute + 30*time.Second},
		{10 * time.Second, time.Second, 90 * time.Second},
		{0, 5 * time.Minute, 0},
	} {
		var cfg settings.Settings
		cfg.Limits.WriteTimeout, cfg.LongPollTimeout = tc.write, tc.poll
		if got := writeTimeout(cfg); got != tc.want {
			t.Errorf("--write-timeout %v, --long-poll-timeout %v: %v, want %v", tc.write, tc.poll, got, tc.want)
		}
	}
}
