package certreload

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/certreload/certgen"
)

// serialOf dials ln with a client trusting ca and returns the serial of the
// certificate the server presented.
func serialOf(t *testing.T, addr string, ca *certgen.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// echo serves ln: each connection echoes what it reads.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(dir, "broker", "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r, err := New(files.Cert, files.Key, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// The interval passes when the test says (atomic: handshakes read it).
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	r.now = func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func() { clock.Add(int64(2 * DefaultInterval)) }
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tls.NewListener(tcp, &tls.Config{GetCertificate: r.GetCertificate})
	defer ln.Close()
	go echo(ln)
	addr := ln.Addr().String()
	first := serialOf(t, addr, ca)

	// A connection open across the rotation keeps working.
	open, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	roundTrip := func(msg string) {
		t.Helper()
		if _, err := open.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(open, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q: %q %v", msg, buf, err)
		}
	}
	roundTrip("before")

	if _, err := ca.WriteFiles(dir, "broker", "localhost", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	bump(t, files.Cert, files.Key) // a distinct modification time whatever the clock's grain
	// Within the interval the files are not looked at.
	if got := serialOf(t, addr, ca); got != first {
		t.Fatalf("certificate changed within the interval")
	}
	advance()
	second := serialOf(t, addr, ca)
	if second == first {
		t.Fatal("the rotated certificate was not taken up")
	}
	roundTrip("after")

	// A bad pair (a key that does not match) keeps the old one, logged.
	other, err := certgen.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	_, badKey, err := other.Issue("x", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Key, badKey, 0o600); err != nil {
		t.Fatal(err)
	}
	bump(t, files.Cert, files.Key)
	advance()
	if got := serialOf(t, addr, ca); got != second {
		t.Fatal("a bad pair replaced the good one")
	}
	if !strings.Contains(logs.String(), "does not load") {
		t.Fatalf("no log line for the bad pair:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatal("a key reached the log")
	}
	// A file missing mid-rotation keeps the pair too.
	if err := os.Remove(files.Key); err != nil {
		t.Fatal(err)
	}
	advance()
	if got := serialOf(t, addr, ca); got != second {
		t.Fatal("a missing key replaced the pair")
	}
	roundTrip("end")
}

func TestNewRefusesBadPair(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(filepath.Join(dir, "no.crt"), filepath.Join(dir, "no.key"), nil); err == nil {
		t.Fatal("missing files accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "a.crt"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.key"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key"), nil); err == nil {
		t.Fatal("junk accepted")
	}
}

var bumps time.Duration

func bump(t *testing.T, files ...string) {
	t.Helper()
	bumps += time.Second
	at := time.Now().Add(time.Hour + bumps)
	for _, f := range files {
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
}
