package client

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// recordingConn is a net.Conn of which only Write is used: it keeps the
// slices each Write was given, as given.
type recordingConn struct {
	net.Conn
	writes [][]byte
	all    bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, p)
	c.all.Write(p)
	return len(p), nil
}

// TestRequestWriterSendsABodyWithItsHead: whatever the request, the bytes
// on the connection are exactly what Request.Write writes; a body of known
// length that can hand over its bytes (a *bytes.Reader, an append's
// recycled buffer) goes out in one piece after the head, from its own
// memory — on a TCP connection the two are one writev —, where a
// bufio.Writer sent it in 16 and 32 KiB pieces copied through buffers. A
// small body goes in the head's write.
func TestRequestWriterSendsABodyWithItsHead(t *testing.T) {
	large := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	small := []byte("hello")
	cases := []struct {
		name  string
		req   func() *http.Request
		whole []byte // the body that must go out uncopied, in the write after the head
		one   bool   // head and body in one write
	}{
		{"large bytes.Reader", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://broker/v1/log/s", bytes.NewReader(large))
			return r
		}, large, false},
		{"large recycled buffer", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://broker/v1/log/s", &recycledBody{r: bytes.NewReader(large), buf: large, recycle: func([]byte) {}})
			r.ContentLength = int64(len(large))
			return r
		}, large, false},
		{"small bytes.Reader", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://broker/v1/appends", bytes.NewReader(small))
			r.Header.Set("Content-Type", "application/vnd.picomq.appends")
			return r
		}, nil, true},
		{"known length, not whole", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://broker/x", io.MultiReader(bytes.NewReader(large), strings.NewReader("tail")))
			r.ContentLength = int64(len(large) + 4)
			return r
		}, nil, false},
		{"chunked", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://broker/x", io.MultiReader(bytes.NewReader(large), strings.NewReader("tail")))
			return r
		}, nil, false},
		{"no body", func() *http.Request {
			r, _ := http.NewRequest("GET", "http://broker/v1/log/s?from=3", nil)
			r.Header.Set("Accept", "application/json")
			return r
		}, nil, false},
		{"empty POST", func() *http.Request {
			r, _ := http.NewRequest("POST", "http://broker/v1/log/s:trim?before=4", nil)
			return r
		}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			if err := tc.req().Write(&want); err != nil {
				t.Fatal(err)
			}
			conn := &recordingConn{}
			w := &requestWriter{conn: conn}
			if err := tc.req().Write(w); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(conn.all.Bytes(), want.Bytes()) {
				t.Fatalf("sent %d bytes that differ from Request.Write's %d", conn.all.Len(), want.Len())
			}
			for _, p := range conn.writes {
				if len(p) == 0 {
					t.Fatal("an empty write") // a pipe would wait for a reader of nothing
				}
			}
			if tc.one && len(conn.writes) != 1 {
				t.Fatalf("%d writes; want head and small body in one", len(conn.writes))
			}
			if tc.whole == nil {
				return
			}
			if len(conn.writes) != 2 || len(conn.writes[1]) != len(tc.whole) || &conn.writes[1][0] != &tc.whole[0] {
				t.Fatalf("%d writes; want the head, then the body from its own memory", len(conn.writes))
			}
		})
	}
}

// TestRequestWriterKeepsContentLengthHonest: a body longer than its
// Content-Length is refused as Request.Write refuses it, and only the
// announced bytes were handed to the connection.
func TestRequestWriterKeepsContentLengthHonest(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 64<<10)
	req := func() *http.Request {
		r, _ := http.NewRequest("POST", "http://broker/v1/log/s", &recycledBody{r: bytes.NewReader(body), buf: body, recycle: func([]byte) {}})
		r.ContentLength = 1000
		return r
	}
	var want bytes.Buffer
	wantErr := req().Write(&want)
	if wantErr == nil {
		t.Fatal("Request.Write took a body longer than its Content-Length")
	}
	conn := &recordingConn{}
	w := &requestWriter{conn: conn}
	err := req().Write(w)
	if err == nil || err.Error() != wantErr.Error() {
		t.Fatalf("error %v, want %v", err, wantErr)
	}
	_ = w.Flush()
	if !bytes.Equal(conn.all.Bytes(), want.Bytes()) {
		t.Fatalf("sent %d bytes, want Request.Write's %d", conn.all.Len(), want.Len())
	}
}

// TestRequestWriterKeepsNoBody: once sent, the writer holds no reference
// to the caller's body (an append's buffer goes back to its pool).
func TestRequestWriterKeepsNoBody(t *testing.T) {
	body := bytes.Repeat([]byte("y"), 100<<10)
	r, _ := http.NewRequest("POST", "http://broker/v1/log/s", bytes.NewReader(body))
	w := &requestWriter{conn: &recordingConn{}}
	if err := r.Write(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, b := range w.iov {
		if b != nil {
			t.Fatalf("iov[%d] still holds %d bytes", i, len(b))
		}
	}
	if len(w.buf) != 0 {
		t.Fatalf("%d bytes left unsent", len(w.buf))
	}
}
