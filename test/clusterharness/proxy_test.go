package clusterharness

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The proxy's tests run in-process on loopback sockets, under -short too:
// they start no process.

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy("test", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// roundTrip sends line and reads it back within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyPasses(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	for _, s := range []string{"a", strings.Repeat("x", 100<<10), "b"} {
		got, err := roundTrip(c, r, s, 5*time.Second)
		if err != nil || got != s {
			t.Fatalf("round trip of %d bytes: got %d bytes, %v", len(s), len(got), err)
		}
	}
}

func TestProxyCutClosesAndRefuses(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	// The existing connection is closed: a read ends with an error.
	if got, err := roundTrip(c, r, "during", 5*time.Second); err == nil {
		t.Fatalf("a cut link carried %q", got)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("a cut link held the connection instead of closing it: %v", err)
	}
	// A new connection is accepted and closed at once.
	c2, r2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, r2, "new", 5*time.Second); err == nil {
		t.Fatalf("a cut link carried %q on a new connection", got)
	}
	p.Heal()
	c3, r3 := dial(t, p.Addr())
	if got, err := roundTrip(c3, r3, "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
}

func TestProxyBlackholeHoldsThenDelivers(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	// Measuring that nothing happens for a period: 300ms of silence.
	if got, err := roundTrip(c, r, "held", 300*time.Millisecond); err == nil {
		t.Fatalf("a blackholed link carried %q", got)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a blackholed link closed the connection: %v", err)
	}
	// A new connection is accepted and hears nothing either.
	c2, r2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, r2, "new", 300*time.Millisecond); err == nil {
		t.Fatalf("a blackholed link carried %q on a new connection", got)
	}
	p.Heal()
	// The held bytes flow on, in order, nothing lost.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != "held\n" {
		t.Fatalf("after heal the held line: %q, %v", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("after heal the new connection's line: %q, %v", got, err)
	}
}

func TestProxyDelay(t *testing.T) {
	t.Parallel()
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	p.Delay(150 * time.Millisecond)
	began := time.Now()
	if got, err := roundTrip(c, r, "slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("delayed round trip: %q, %v", got, err)
	}
	// Both directions are delayed: at least two delays.
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Fatalf("a round trip through a 150ms delay took %v", d)
	}
	p.Heal()
	began = time.Now()
	if _, err := roundTrip(c, r, "fast", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 150*time.Millisecond {
		t.Fatalf("after heal a round trip took %v", d)
	}
}

func TestProxyRetarget(t *testing.T) {
	t.Parallel()
	p := newProxy(t, "127.0.0.1:1") // nothing listens there
	c, r := dial(t, p.Addr())
	if got, err := roundTrip(c, r, "x", 5*time.Second); err == nil {
		t.Fatalf("a proxy to nowhere carried %q", got)
	}
	p.SetTarget(echoServer(t))
	c2, r2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, r2, "y", 5*time.Second); err != nil || got != "y" {
		t.Fatalf("after SetTarget: %q, %v", got, err)
	}
}

func TestPollReturnsTheLastError(t *testing.T) {
	t.Parallel()
	n := 0
	err := Poll(context.Background(), 100*time.Millisecond, "never", func(context.Context) error {
		n++
		return io.ErrUnexpectedEOF
	})
	if err == nil || !strings.Contains(err.Error(), "never") || !strings.Contains(err.Error(), io.ErrUnexpectedEOF.Error()) || n < 2 {
		t.Fatalf("Poll: %v after %d calls", err, n)
	}
	if err := Poll(context.Background(), time.Second, "at once", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestHasFlag(t *testing.T) {
	t.Parallel()
	help := "  --cluster-id [PICOMQ_CLUSTER_ID]\n    \tthe id\n  --data-dir [PICOMQ_DATA_DIR]\n"
	if hasFlag(help, "cluster") {
		t.Fatal("--cluster-id taken for --cluster")
	}
	if !hasFlag(help, "data-dir") || !hasFlag(help+"  --cluster [PICOMQ_CLUSTER]\n", "cluster") {
		t.Fatal("flag not found")
	}
}

// A broker's port, released for the broker to bind, is never handed to a
// proxy (or another broker) of the same process: the kernel offers a port
// just closed again, and a trial once failed with a proxy listening on
// the peer port its broker was about to bind.
func TestPortsAreNeverHandedOutTwice(t *testing.T) {
	seen := map[string]bool{}
	for i := range 200 {
		var addr string
		if i%2 == 0 {
			a, err := freeAddr()
			if err != nil {
				t.Fatal(err)
			}
			addr = a
		} else {
			p, err := NewProxy("p", "127.0.0.1:1")
			if err != nil {
				t.Fatal(err)
			}
			addr = p.Addr()
			defer p.Close()
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice (allocation %d)", addr, i)
		}
		seen[addr] = true
	}
}
