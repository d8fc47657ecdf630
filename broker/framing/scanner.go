// Package framing guards the broker's HTTP/1.1 connections against
// ambiguous message framing (RFC 9112 §6.3), the root of request smuggling:
// a net.Listener wrapper reads every request head on a connection — the
// first, the next ones on a kept-alive connection, pipelined ones — before
// net/http does, and refuses a head whose body length could be read two
// ways, or that exceeds the head limits, with a coded problem, then closes
// the connection, since where the next request would start is unknown.
//
// It holds each head back until the head is complete and valid, so net/http
// never sees a part of a refused one; body bytes pass straight through
// while the scanner counts them (Content-Length) or follows the chunks, to
// find where the next head starts. Its rules are stricter than net/http's
// wherever the two could disagree on a boundary (bare LF in chunk framing,
// obs-fold, a transfer coding other than chunked), so that a stream both
// accept is split the same way by both.
package framing

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// Defaults of Limits.
const (
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxHeaders     = 100
	DefaultMaxURLBytes    = 8 << 10
	// maxChunkLine bounds a chunk-size line with its extensions, as
	// net/http does.
	maxChunkLine = 4096
)

// Limits bound a request head; zero values take the defaults.
type Limits struct {
	// MaxHeaderBytes bounds the head: request line, header lines and the
	// empty line (431).
	MaxHeaderBytes int
	// MaxHeaders bounds the number of header lines (431).
	MaxHeaders int
	// MaxURLBytes bounds the request target (414).
	MaxURLBytes int
}

// WithDefaults returns l with its zero fields set.
func (l Limits) WithDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxURLBytes <= 0 {
		l.MaxURLBytes = DefaultMaxURLBytes
	}
	return l
}

type state uint8

const (
	inHead      state = iota // reading a request head
	inBody                   // Content-Length body: left bytes to go
	inChunkSize              // a chunk-size line
	inChunkData              // chunk data: left bytes to go
	inChunkCR                // the CR after chunk data
	inChunkLF                // the LF after chunk data
	inTrailer                // trailer lines after the last chunk
	broken                   // refused or cut: nothing more is read
)

// Scanner follows the requests of one connection's byte stream. It is a
// pure state machine: Scan is given the bytes as they arrive.
type Scanner struct {
	lim   Limits
	state state
	left  uint64 // body or chunk bytes still to come

	line    []byte // the current line, when it spans Scan calls
	head    int    // bytes of the current head so far
	headers int    // header lines of the current head
	first   bool   // the next head line is the request line
	http10  bool
	cl      [18]byte // Content-Length as sent (trimmed): cl[:clLen]
	clLen   int
	hasCL   bool
	te      int  // Transfer-Encoding lines
	chunked bool // the last Transfer-Encoding is exactly chunked
}

// NewScanner returns a scanner at the start of a connection.
func NewScanner(lim Limits) *Scanner {
	return &Scanner{lim: lim.WithDefaults(), first: true}
}

// InHead reports whether the bytes Scan takes next belong to a request
// head (which the caller holds back until Scan reports it complete).
func (s *Scanner) InHead() bool { return s.state == inHead }

// Scan consumes a prefix of b and reports how many bytes it took. It stops
// after a head is complete (headEnd; the head was valid), where a body ends
// (the next bytes start a head), or at the end of b. A refused head is a
// coded error (*errs.Error) the connection answers before it closes; a
// malformed chunked body is an error too, but arrives after net/http took
// the head, so the connection is only cut. After an error nothing more is
// scanned.
func (s *Scanner) Scan(b []byte) (n int, headEnd bool, err error) {
	for n < len(b) {
		switch s.state {
		case inHead:
			i := bytes.IndexByte(b[n:], '\n')
			end := n + i + 1
			if i < 0 {
				end = len(b)
			}
			if s.head+(end-n) > s.lim.MaxHeaderBytes {
				return n, false, s.fail(wire.HeadersTooLarge.With("limit", s.lim.MaxHeaderBytes, "reason", "header bytes"))
			}
			s.head += end - n
			if i < 0 {
				s.line = append(s.line, b[n:]...)
				if s.first && len(s.line) > s.lim.MaxURLBytes+64 {
					return len(b), false, s.fail(wire.URITooLong.With("limit", s.lim.MaxURLBytes))
				}
				return len(b), false, nil
			}
			line := b[n : end-1]
			if len(s.line) > 0 {
				s.line = append(s.line, line...)
				line = s.line
			}
			n = end
			done, err := s.headLine(line)
			s.line = s.line[:0]
			if err != nil {
				return n, false, s.fail(err)
			}
			if done {
				return n, true, nil
			}
		case inBody, inChunkData:
			take := uint64(len(b) - n)
			if take > s.left {
				take = s.left
			}
			s.left -= take
			n += int(take)
			if s.left == 0 {
				if s.state == inBody {
					s.startHead()
					return n, false, nil
				}
				s.state = inChunkCR
			}
		case inChunkCR, inChunkLF:
			want := byte('\r')
			if s.state == inChunkLF {
				want = '\n'
			}
			if b[n] != want {
				return n, false, s.fail(errCut)
			}
			n++
			if s.state == inChunkCR {
				s.state = inChunkLF
			} else {
				s.state = inChunkSize
			}
		case inChunkSize, inTrailer:
			i := bytes.IndexByte(b[n:], '\n')
			end := n + i + 1
			if i < 0 {
				end = len(b)
			}
			if len(s.line)+(end-n) > maxChunkLine {
				return n, false, s.fail(errCut)
			}
			if i < 0 {
				s.line = append(s.line, b[n:]...)
				return len(b), false, nil
			}
			line := b[n : end-1]
			if len(s.line) > 0 {
				s.line = append(s.line, line...)
				line = s.line
			}
			n = end
			var err error
			if s.state == inChunkSize {
				err = s.chunkSize(line)
			} else {
				err = s.trailer(line)
			}
			s.line = s.line[:0]
			if err != nil {
				return n, false, s.fail(err)
			}
			if s.state == inHead {
				return n, false, nil // the body ended: a head follows
			}
		case broken:
			return n, false, errCut
		}
	}
	return n, false, nil
}

// errCut: chunk framing net/http might read otherwise; the connection is
// cut, nothing is answered (net/http already answers that request).
var errCut = wire.AmbiguousFraming.With("reason", "malformed chunked body")

func (s *Scanner) fail(err error) error {
	s.state = broken
	return err
}

func (s *Scanner) startHead() {
	s.state = inHead
	s.head, s.headers, s.first = 0, 0, true
	s.http10, s.clLen, s.hasCL, s.te, s.chunked = false, 0, false, 0, false
}

// headLine takes one head line without its LF; done at the empty line
// (the head then was valid, and the body's framing is set).
func (s *Scanner) headLine(line []byte) (done bool, err error) {
	if k := len(line); k > 0 && line[k-1] == '\r' {
		line = line[:k-1]
	}
	if bytes.IndexByte(line, '\r') >= 0 || bytes.IndexByte(line, 0) >= 0 {
		return false, wire.MalformedHeader.With("reason", "a CR or NUL inside a head line")
	}
	if s.first {
		s.first = false
		return false, s.requestLine(line)
	}
	if len(line) == 0 {
		return true, s.framing()
	}
	s.headers++
	if s.headers > s.lim.MaxHeaders {
		return false, wire.HeadersTooLarge.With("limit", s.lim.MaxHeaders, "reason", "header lines")
	}
	if line[0] == ' ' || line[0] == '\t' {
		return false, wire.MalformedHeader.With("reason", "obsolete line folding")
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return false, wire.MalformedHeader.With("reason", "a header line without a name and ':'")
	}
	name := line[:colon]
	for _, c := range name {
		if !isToken(c) {
			return false, wire.MalformedHeader.With("reason", "a header name holding a character other than a token's")
		}
	}
	switch {
	case len(name) == 14 && asciiEqualFold(name, "content-length"):
		v := trimOWS(line[colon+1:])
		if bytes.IndexByte(v, ',') >= 0 {
			return false, wire.AmbiguousFraming.With("reason", "a Content-Length list")
		}
		if len(v) == 0 || !allDigits(v) || len(v) > len(s.cl) {
			return false, wire.MalformedHeader.With("header", "Content-Length", "reason", "not a decimal length")
		}
		if s.hasCL && !bytes.Equal(v, s.cl[:s.clLen]) {
			return false, wire.AmbiguousFraming.With("reason", "several differing Content-Length values")
		}
		s.clLen, s.hasCL = copy(s.cl[:], v), true
	case len(name) == 17 && asciiEqualFold(name, "transfer-encoding"):
		s.te++
		s.chunked = asciiEqualFold(trimOWS(line[colon+1:]), "chunked")
	}
	return false, nil
}

// requestLine checks "method SP target SP HTTP/1.x" and the target's length.
func (s *Scanner) requestLine(line []byte) error {
	// Split as net/http does: at the first space and the next one.
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := -1
	if sp1 > 0 {
		if i := bytes.IndexByte(line[sp1+1:], ' '); i >= 0 {
			sp2 = sp1 + 1 + i
		}
	}
	if sp1 <= 0 || sp2 <= sp1 {
		return wire.MalformedHeader.With("reason", "malformed request line")
	}
	for _, c := range line[:sp1] {
		if !isToken(c) {
			return wire.MalformedHeader.With("reason", "malformed request method")
		}
	}
	if sp2-sp1-1 > s.lim.MaxURLBytes {
		return wire.URITooLong.With("limit", s.lim.MaxURLBytes)
	}
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		s.http10 = true
	default:
		return wire.MalformedHeader.With("reason", "HTTP version other than 1.0 and 1.1")
	}
	return nil
}

// framing decides the body's length at the head's end (RFC 9112 §6.3).
func (s *Scanner) framing() error {
	switch {
	case s.te > 0 && s.hasCL:
		return wire.AmbiguousFraming.With("reason", "both Content-Length and Transfer-Encoding")
	case s.te > 1:
		return wire.AmbiguousFraming.With("reason", "several Transfer-Encoding lines")
	case s.te == 1 && s.http10:
		return wire.AmbiguousFraming.With("reason", "Transfer-Encoding in an HTTP/1.0 request")
	case s.te == 1 && !s.chunked:
		return wire.AmbiguousFraming.With("reason", "a Transfer-Encoding other than chunked")
	case s.te == 1:
		s.state = inChunkSize
	case s.hasCL:
		n, err := strconv.ParseUint(string(s.cl[:s.clLen]), 10, 63)
		if err != nil {
			return wire.MalformedHeader.With("header", "Content-Length", "reason", "not a decimal length")
		}
		if n == 0 {
			s.startHead()
			return nil
		}
		s.state, s.left = inBody, n
	default:
		s.startHead() // a request without either has no body
	}
	return nil
}

// chunkSize reads "HEX[;ext]\r" (the LF is gone): strict CRLF, 1 to 15
// hex digits.
func (s *Scanner) chunkSize(line []byte) error {
	k := len(line)
	if k == 0 || line[k-1] != '\r' {
		return errCut
	}
	line = line[:k-1]
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		if bytes.IndexByte(line[i:], '\r') >= 0 {
			return errCut
		}
		line = line[:i]
	}
	if len(line) == 0 || len(line) > 15 {
		return errCut
	}
	var size uint64
	for _, c := range line {
		d, ok := hexDigit(c)
		if !ok {
			return errCut
		}
		size = size<<4 | uint64(d)
	}
	if size == 0 {
		s.state = inTrailer
		return nil
	}
	s.state, s.left = inChunkData, size
	return nil
}

// trailer reads a trailer line after the last chunk; strict CRLF, no
// folding, the empty line ends the body.
func (s *Scanner) trailer(line []byte) error {
	k := len(line)
	if k == 0 || line[k-1] != '\r' {
		return errCut
	}
	line = line[:k-1]
	if len(line) == 0 {
		s.startHead()
		return nil
	}
	if bytes.IndexByte(line, '\r') >= 0 || line[0] == ' ' || line[0] == '\t' || bytes.IndexByte(line, ':') <= 0 {
		return errCut
	}
	return nil
}

// Refusal is the coded error of a refused head, or nil for a cut.
func Refusal(err error) *errs.Error {
	if err == nil || err == errCut {
		return nil
	}
	coded, _ := errs.As(err)
	return coded
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func allDigits(s []byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// asciiEqualFold compares b with lower, an ASCII lower-case string.
func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// isToken: RFC 9110 tchar.
func isToken(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
