package framing

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHTTP2PassesThrough: over TLS, ALPN h2 hands net/http the TLS
// connection itself and HTTP/1.1 stays checked; on plain TCP a connection
// opening with HTTP/2's preface is served as h2c.
func TestHTTP2PassesThrough(t *testing.T) {
	cfg := selfSigned(t)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	for _, useTLS := range []bool{true, false} {
		var listen func(net.Listener) net.Listener
		var p http.Protocols
		clientTLS := &tls.Config{InsecureSkipVerify: true}
		if useTLS {
			listen = func(ln net.Listener) net.Listener { return ListenTLS(ln, cfg, Limits{}, 0) }
			p.SetHTTP2(true)
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		addr, served := serve(t, listen)
		scheme := map[bool]string{true: "https://", false: "http://"}[useTLS]
		hc := &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: clientTLS}}
		for i := range 3 {
			resp, err := hc.Post(scheme+addr+"/p", "text/plain", strings.NewReader(strings.Repeat("x", i*5000)))
			if err != nil {
				t.Fatalf("tls=%v: %v", useTLS, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || string(b) != "/p:"+strings.Repeat("x", i*5000) {
				t.Fatalf("tls=%v: %s %q", useTLS, resp.Proto, b[:min(len(b), 20)])
			}
		}
		if served.Load() != 3 {
			t.Fatalf("tls=%v: served %d", useTLS, served.Load())
		}
		hc.CloseIdleConnections()
	}
}

// TestPrefaceSniffing: the preface passes through whole however it
// arrives, and bytes after it unread; a head that only starts like it (a
// PUT, or PRI not followed by the rest) is still scanned.
func TestPrefaceSniffing(t *testing.T) {
	frames := "\x00\x00\x00\x04\x00\x00\x00\x00\x00" + "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	for step := 1; step <= 30; step++ {
		in := string(h2Preface) + frames
		c := newConn(&pieceConn{data: []byte(in), step: step}, Limits{}.WithDefaults())
		got, err := io.ReadAll(c)
		if err != nil || string(got) != in {
			t.Fatalf("step %d: preface and frames read as %q (%v), want them unchanged", step, got, err)
		}
	}
	for _, in := range []string{
		"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		for step := 1; step <= 30; step++ {
			pc := &pieceConn{data: []byte(in), step: step}
			c := newConn(pc, Limits{}.WithDefaults())
			got, _ := io.ReadAll(c)
			_ = c.Close()
			if bytes.Contains(got, []byte("Transfer-Encoding")) {
				t.Fatalf("step %d: an ambiguous head passed: %q", step, got)
			}
		}
	}
}

// flakyListener fails its first Accept with EMFILE, as a listener does
// when a client holds every file descriptor.
type flakyListener struct {
	net.Listener
	failed bool
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if !f.failed {
		f.failed = true
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// TestTLSListenerOutlivesAcceptErrors: an accept error that is not the
// listener's close (EMFILE) is waited out, not the end of serving.
func TestTLSListenerOutlivesAcceptErrors(t *testing.T) {
	cfg := selfSigned(t)
	addr, served := serve(t, func(ln net.Listener) net.Listener {
		return ListenTLS(&flakyListener{Listener: ln}, cfg, Limits{}, 0)
	})
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/after")
	if err != nil {
		t.Fatalf("after an EMFILE: %v", err)
	}
	resp.Body.Close()
	if served.Load() != 1 {
		t.Fatalf("served %d", served.Load())
	}
}

// TestTLSHTTP1RefusesAPreface: on a TLS connection that chose HTTP/1.1,
// HTTP/2's preface is a head like any other (refused), never a way past
// the head checks.
func TestTLSHTTP1RefusesAPreface(t *testing.T) {
	cfg := selfSigned(t)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	addr, served := serve(t, func(ln net.Listener) net.Listener { return ListenTLS(ln, cfg, Limits{}, 0) })
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(append(bytes.Clone(h2Preface), "GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"...))
	_, _ = io.ReadAll(c)
	if served.Load() != 0 {
		t.Fatalf("the handler served %d requests after a preface on HTTP/1.1", served.Load())
	}
}
