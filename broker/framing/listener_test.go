package framing

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// pieceConn is a net.Conn reading data in pieces of step bytes and
// recording what is written.
type pieceConn struct {
	net.Conn
	data  []byte
	step  int
	wrote bytes.Buffer
}

func (c *pieceConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.step, len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *pieceConn) Write(p []byte) (int, error)      { return c.wrote.Write(p) }
func (c *pieceConn) Close() error                     { return nil }
func (c *pieceConn) SetWriteDeadline(time.Time) error { return nil }
func (c *pieceConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pieceConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *pieceConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *pieceConn) SetDeadline(t time.Time) error    { return nil }

// FuzzConn: any byte stream, arriving in pieces of any size and read with
// buffers of any size (through the connection's own buffer, or directly), goes through the wrapper without a panic; what
// comes out is a prefix of what went in, and no complete head in it is
// ambiguous (read by net/http's own primitives); a refusal is answered
// once, at Close.
func FuzzConn(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), uint8(3), uint8(5))
		f.Add([]byte(s), uint8(40), uint8(200))
	}
	f.Fuzz(func(t *testing.T, b []byte, step, bufSize uint8) {
		pc := &pieceConn{data: bytes.Clone(b), step: int(step%64) + 1}
		c := newConn(pc, Limits{})
		var out []byte
		// Buffers under directReadMin are read through the connection's
		// own; larger ones are read into directly.
		size := int(bufSize%128) + 1
		if bufSize >= 128 {
			size = directReadMin + int(bufSize-128)*32
		}
		buf := make([]byte, size)
		for i := 0; ; i++ {
			n, err := c.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
			if i > 4*len(b)+16 {
				t.Fatalf("reading does not end")
			}
		}
		if !bytes.HasPrefix(b, out) {
			t.Fatalf("%q came out of %q", out, b)
		}
		checkStream(t, out)
		_ = c.Close()
		if pc.wrote.Len() > 0 && c.refusal.Load() == nil {
			t.Fatalf("wrote %q with no refusal", pc.wrote.Bytes())
		}
	})
}

// serve runs an http.Server on a framing listener; the handler reads the
// body and answers its length. It returns the address and the count of
// requests the handler saw.
// serve runs a server on a guarded listener: listen(ln) (nil: Listen),
// speaking HTTP/1.1, HTTP/2 over TLS and h2c.
func serve(t *testing.T, listen func(net.Listener) net.Listener) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(400)
				return
			}
			_, _ = io.WriteString(w, r.URL.Path+":"+string(b))
		}),
		ReadHeaderTimeout: 20 * time.Second,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if listen == nil {
		listen = func(ln net.Listener) net.Listener { return Listen(ln, Limits{}) }
	}
	go func() { _ = srv.Serve(listen(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), &served
}

// exchange sends raw on a new connection and reads every response until
// the server closes it (or 20 s pass).
func exchange(t *testing.T, dial func() (net.Conn, error), raw string) []*http.Response {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite() // the server sees the end after the last request
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		out = append(out, resp)
	}
}

func code(t *testing.T, resp *http.Response) string {
	t.Helper()
	var p struct {
		Code string `json:"code"`
		Name string `json:"name"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("answer %d %q is not a problem: %v", resp.StatusCode, body, err)
	}
	if resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	return p.Name
}

func TestListenerRefusesThroughNetHTTP(t *testing.T) {
	get := "GET /g HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, useTLS := range []bool{false, true} {
		var listen func(net.Listener) net.Listener
		var dial func(string) (net.Conn, error)
		if useTLS {
			cfg := selfSigned(t)
			listen = func(ln net.Listener) net.Listener { return ListenTLS(ln, cfg, Limits{}, 0) }
		}
		addr, served := serve(t, listen)
		dial = func(string) (net.Conn, error) {
			if useTLS {
				return tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			}
			return net.Dial("tcp", addr)
		}
		for _, tc := range []struct {
			name   string
			raw    string
			ok     []string // bodies of the answers before the refusal
			status int      // of the refusal (0: none)
			refuse string
		}{
			{"pipelined valid requests", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
				"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get,
				[]string{"/a:hello", "/b:abc", "/g:"}, 0, ""},
			{"CL and TE", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", nil, 400, "AMBIGUOUS_FRAMING"},
			{"valid then CL and TE", get + "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get,
				[]string{"/g:"}, 400, "AMBIGUOUS_FRAMING"},
			{"smuggled in a body stays a body", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\nGET /s HTTP/1" + get, []string{"/a:GET /s HTTP/1", "/g:"}, 0, ""},
			{"differing CL", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", nil, 400, "AMBIGUOUS_FRAMING"},
			{"TE gzip", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", nil, 400, "AMBIGUOUS_FRAMING"},
			{"101 headers", "GET /a HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", 100) + "\r\n", nil, 431, "HEADERS_TOO_LARGE"},
			{"long URL", "GET /" + strings.Repeat("u", 9000) + " HTTP/1.1\r\nHost: x\r\n\r\n", nil, 414, "URI_TOO_LONG"},
		} {
			t.Run(tc.name+map[bool]string{true: " over TLS"}[useTLS], func(t *testing.T) {
				before := served.Load()
				resps := exchange(t, func() (net.Conn, error) { return dial(addr) }, tc.raw)
				want := len(tc.ok)
				if tc.status != 0 {
					want++
				}
				if len(resps) != want {
					t.Fatalf("%d answers, want %d", len(resps), want)
				}
				for i, body := range tc.ok {
					b, _ := io.ReadAll(resps[i].Body)
					if resps[i].StatusCode != 200 || string(b) != body {
						t.Fatalf("answer %d: %d %q, want 200 %q", i, resps[i].StatusCode, b, body)
					}
				}
				if tc.status != 0 {
					last := resps[len(resps)-1]
					if last.StatusCode != tc.status || code(t, last) != tc.refuse {
						t.Fatalf("refusal: %d, want %d %s", last.StatusCode, tc.status, tc.refuse)
					}
				}
				if got := served.Load() - before; got != int64(len(tc.ok)) {
					t.Fatalf("the handler saw %d requests, want %d", got, len(tc.ok))
				}
			})
		}
	}
}

func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "framing-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// BenchmarkHead: the cost of checking one typical request head with a
// small body, on a kept-alive connection (ns per request head).
func BenchmarkHead(b *testing.B) {
	req := []byte("POST /v1/log/orders/eu:append HTTP/1.1\r\nHost: broker-0.picomq:4437\r\nUser-Agent: picomq-go/1\r\n" +
		"Content-Type: application/vnd.picomq.batch\r\nAuthorization: Bearer 0123456789abcdef0123456789abcdef\r\n" +
		"Accept-Encoding: gzip\r\nContent-Length: 16\r\n\r\n0123456789abcdef")
	stream := bytes.Repeat(req, 64)
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		c := newConn(&pieceConn{data: stream, step: 4096}, Limits{})
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
	}
}
