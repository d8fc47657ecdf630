package framing

import (
	"bufio"
	"bytes"
	"io"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// scanAll runs s over b in pieces of step bytes (0: at once) and returns
// the offsets where heads ended and the error met.
func scanAll(s *Scanner, b []byte, step int) (ends []int, err error) {
	pos := 0
	for pos < len(b) {
		end := len(b)
		if step > 0 && pos+step < end {
			end = pos + step
		}
		chunk := b[pos:end]
		for len(chunk) > 0 {
			n, headEnd, err := s.Scan(chunk)
			pos += n
			chunk = chunk[n:]
			if err != nil {
				return ends, err
			}
			if headEnd {
				ends = append(ends, pos)
			}
		}
	}
	return ends, nil
}

func TestScanner(t *testing.T) {
	get := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name  string
		in    string
		heads int
		code  errs.Code // 0: no refusal
		cut   bool      // a body the connection is cut on
	}{
		{"one GET", get, 1, 0, false},
		{"bare LF head, as net/http reads it", "GET / HTTP/1.1\nHost: x\n\n", 1, 0, false},
		{"keep-alive: CL body then GET", "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" + get, 2, 0, false},
		{"identical repeated CL", "POST /a HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhello" + get, 2, 0, false},
		{"chunked with extension and trailer", "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n" + get, 2, 0, false},
		{"a body that looks like a head is a body", "POST /a HTTP/1.1\r\nContent-Length: 66\r\n\r\nGET /b HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n" + get, 2, 0, false},
		{"CL and TE", "POST /a HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"TE then CL, case mixed", "POST /a HTTP/1.1\r\ntransfer-ENCODING: chunked\r\nCONTENT-length: 5\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"differing CL", "POST /a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"CL list", "POST /a HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"TE gzip, chunked", "POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"TE identity", "POST /a HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"two TE lines", "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"TE in HTTP/1.0", "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 0, wire.CodeAmbiguousFraming, false},
		{"ambiguous second request", get + "POST /a HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 1, wire.CodeAmbiguousFraming, false},
		{"empty CL", "POST /a HTTP/1.1\r\nContent-Length:\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"signed CL", "POST /a HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"space before colon", "GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"no colon", "GET / HTTP/1.1\r\nbogus\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"bare CR", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"HTTP/2 line", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"empty request line", "\r\nGET / HTTP/1.1\r\n\r\n", 0, wire.CodeMalformedHeader, false},
		{"101 header lines", "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 101) + "\r\n", 0, wire.CodeHeadersTooLarge, false},
		{"100 header lines", "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 100) + "\r\n", 1, 0, false},
		{"head over 64 KiB", "GET / HTTP/1.1\r\nX: " + strings.Repeat("y", 64<<10) + "\r\n\r\n", 0, wire.CodeHeadersTooLarge, false},
		{"target over 8 KiB", "GET /" + strings.Repeat("a", 8<<10) + " HTTP/1.1\r\n\r\n", 0, wire.CodeURITooLong, false},
		{"target of 8 KiB", "GET " + strings.Repeat("a", 8<<10) + " HTTP/1.1\r\n\r\n", 1, 0, false},
		{"chunk size not hex", "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 1, 0, true},
		{"chunk size with bare LF", "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n", 1, 0, true},
		{"chunk data without CRLF", "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n", 1, 0, true},
		{"chunk size overflowing", "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{0, 1, 7} {
				ends, err := scanAll(NewScanner(Limits{}), []byte(tc.in), step)
				if len(ends) != tc.heads {
					t.Fatalf("step %d: %d heads passed, want %d (err %v)", step, len(ends), tc.heads, err)
				}
				switch {
				case tc.code == 0 && !tc.cut && err != nil:
					t.Fatalf("step %d: refused: %v", step, err)
				case tc.cut && (err == nil || Refusal(err) != nil):
					t.Fatalf("step %d: want a cut, got %v", step, err)
				case tc.code != 0:
					if c := Refusal(err); c == nil || c.Code() != tc.code {
						t.Fatalf("step %d: got %v, want code %s", step, err, tc.code.Hex())
					}
				}
			}
		})
	}
}

// FuzzHead: any byte stream, scanned at once or byte by byte, passes the
// same heads at the same offsets and meets the same error, never panics,
// and every head it passes is unambiguous by an independent reading
// (net/textproto's).
func FuzzHead(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ends1, err1 := scanAll(NewScanner(Limits{}), b, 0)
		ends2, err2 := scanAll(NewScanner(Limits{}), b, 1)
		if !equalInts(ends1, ends2) || (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("%q: at once %v %v, byte by byte %v %v", b, ends1, err1, ends2, err2)
		}
		checkStream(t, b[:lastEnd(ends1)])
	})
}

func lastEnd(ends []int) int {
	if len(ends) == 0 {
		return 0
	}
	return ends[len(ends)-1]
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkStream walks b as net/http's primitives read it (textproto heads,
// httputil's chunked reader, Content-Length) and fails on any complete head
// that is ambiguous or over the default limits. It stops where they fail.
func checkStream(t *testing.T, b []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(b))
	tp := textproto.NewReader(br)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		hdr, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		cl, te := hdr.Values("Content-Length"), hdr.Values("Transfer-Encoding")
		if len(te) > 0 && len(cl) > 0 {
			t.Fatalf("a head with Content-Length and Transfer-Encoding passed: %q %v", line, hdr)
		}
		if len(te) > 1 || (len(te) == 1 && !strings.EqualFold(strings.TrimSpace(te[0]), "chunked")) {
			t.Fatalf("a head with Transfer-Encoding %q passed", te)
		}
		for _, v := range cl {
			if strings.TrimSpace(v) != strings.TrimSpace(cl[0]) || strings.Contains(v, ",") {
				t.Fatalf("a head with Content-Length %q passed", cl)
			}
		}
		if strings.HasSuffix(line, "HTTP/1.0") && len(te) > 0 {
			t.Fatalf("an HTTP/1.0 head with Transfer-Encoding passed")
		}
		switch {
		case len(te) == 1:
			if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
				return
			}
			if p, err := br.Peek(2); err == nil && string(p) == "\r\n" {
				_, _ = br.Discard(2)
			} else if _, err := tp.ReadMIMEHeader(); err != nil {
				return
			}
		case len(cl) > 0:
			var n int64
			for _, c := range strings.TrimSpace(cl[0]) {
				n = n*10 + int64(c-'0')
			}
			if k, _ := io.CopyN(io.Discard, br, n); k < n {
				return
			}
		}
	}
}

var fuzzSeeds = []string{
	"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n",
	"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
	"POST /a HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST /a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	"POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\nX: a\n b\n\n",
}
