package dsapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/strictjson"
)

// The protocol's headers and query parameters.
const (
	hNextOffset      = "Stream-Next-Offset"
	hUpToDate        = "Stream-Up-To-Date"
	hClosed          = "Stream-Closed"
	hCursor          = "Stream-Cursor"
	hSeq             = "Stream-Seq"
	hTTL             = "Stream-TTL"
	hExpiresAt       = "Stream-Expires-At"
	hForkedFrom      = "Stream-Forked-From"
	hForkOffset      = "Stream-Fork-Offset"
	hForkSubOffset   = "Stream-Fork-Sub-Offset"
	hSSEEncoding     = "Stream-SSE-Data-Encoding"
	hProducerID      = "Producer-Id"
	hProducerEpoch   = "Producer-Epoch"
	hProducerSeq     = "Producer-Seq"
	hExpectedSeq     = "Producer-Expected-Seq"
	hReceivedSeq     = "Producer-Received-Seq"
	defaultMediaType = "application/octet-stream"
)

// allowMethods are the methods a stream answers. CORS — which origins
// may call, what a page may send and read — is broker/cors's, in front of
// every route.
const allowMethods = "GET, POST, PUT, DELETE, HEAD, OPTIONS"

// Offsets are the broker's record offsets of the stream's one partition,
// written as two zero-padded 16-digit numbers, "%016d_%016d": the record
// offset and a sub-offset that is always 0 in what the server returns. They
// sort as strings as the offsets do as numbers, hold none of ", & = ? /",
// and name a record position the broker never renumbers, so every offset
// ever returned stays a valid read and fork position, across restarts too.
func formatOffset(off uint64) string {
	var b [33]byte
	s := strconv.AppendUint(b[:0], off, 10)
	out := make([]byte, 0, 33)
	for i := len(s); i < 16; i++ {
		out = append(out, '0')
	}
	out = append(out, s...)
	return string(append(out, "_0000000000000000"...))
}

var offsetPattern = regexp.MustCompile(`^([0-9]{1,19})_([0-9]{1,19})$`)

// parseOffset reads an offset in the server's format. A sub-offset other
// than 0 names no position this server ever returned.
func parseOffset(s string) (uint64, bool) {
	m := offsetPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	off, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	sub, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil || sub != 0 {
		return 0, false
	}
	return off, true
}

// The cursor is the number of 20-second intervals since 2024-10-09: CDNs
// that collapse identical long-polls key on it. A client echoing a cursor
// at or past the current interval gets a strictly greater one (plus random
// jitter of 1 to 180 intervals), so that no two rounds of a client cycle.
var cursorEpoch = time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)

const cursorInterval = 20 * time.Second

func nextCursor(client string, now time.Time) string {
	cur := int64(now.Sub(cursorEpoch) / cursorInterval)
	if client != "" {
		if c, err := strconv.ParseInt(client, 10, 64); err == nil && c >= cur {
			return strconv.FormatInt(c+1+rand.Int64N(180), 10)
		}
	}
	return strconv.FormatInt(cur, 10)
}

// mediaType is a Content-Type's media type, lower-cased, without
// parameters: the protocol compares content types by it.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

var contentTypePattern = regexp.MustCompile(`^[\w.+-]+/[\w.+-]+`)

func isJSON(ct string) bool { return mediaType(ct) == "application/json" }

// isText: SSE sends text/* and JSON streams as text, the rest in base64.
func isText(ct string) bool {
	mt := mediaType(ct)
	return strings.HasPrefix(mt, "text/") || mt == "application/json"
}

var decimal = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
var digits = regexp.MustCompile(`^[0-9]+$`)

// maxSafeInteger is JavaScript's 2^53-1: producer epochs and sequences
// stay exact in every client.
const maxSafeInteger = 1<<53 - 1

// parseSafeInt reads a producer epoch or sequence: plain decimal digits,
// at most 2^53-1.
func parseSafeInt(s string) (int64, bool) {
	if !digits.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > maxSafeInteger {
		return 0, false
	}
	return v, true
}

// jsonRecord turns a JSON body into one record: its messages — the
// elements of a top-level array (flattened one level), else the value
// itself — compacted and joined by commas, so that reads join records by
// commas inside one pair of brackets. It reports the message count; a body
// that is not strict JSON (valid UTF-8, one value, no name repeated in an
// object: readers would disagree on it) is refused, whole.
func jsonRecord(body []byte) ([]byte, int, error) {
	if err := strictjson.Check(body); err != nil {
		return nil, 0, BadRequest.With("reason", "body is not valid JSON: "+err.Error())
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	var out bytes.Buffer
	out.Grow(len(body))
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var msgs []json.RawMessage
		if err := json.Unmarshal(trimmed, &msgs); err != nil {
			return nil, 0, errBadJSON
		}
		for i, m := range msgs {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := json.Compact(&out, m); err != nil {
				return nil, 0, errBadJSON
			}
		}
		return out.Bytes(), len(msgs), nil
	}
	if err := json.Compact(&out, trimmed); err != nil {
		return nil, 0, errBadJSON
	}
	return out.Bytes(), 1, nil
}

// jsonMessages splits a JSON record back into its messages.
func jsonMessages(rec []byte) ([]json.RawMessage, error) {
	var msgs []json.RawMessage
	buf := make([]byte, 0, len(rec)+2)
	buf = append(append(append(buf, '['), rec...), ']')
	if err := json.Unmarshal(buf, &msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

// The protocol's own refusals of malformed requests, as coded errors
// (block 0.16.5) so that they read like the broker's others.
var (
	BadRequest = errs.Static(0x00_10_05_01, "BAD_REQUEST",
		"The request does not follow the Durable Streams protocol",
		"broker/dsapi: a header, a query parameter or the body is malformed or missing; the fields say which",
		400, 65)
	Conflict = errs.Static(0x00_10_05_02, "STREAM_CONFLICT",
		"The request conflicts with the stream's configuration",
		"broker/dsapi: a create of an existing stream with another configuration, a content type other than the stream's, or a fork of a soft-deleted source; the fields say which",
		409, 65)
	BodyTooLarge = errs.Static(0x00_10_05_03, "BODY_TOO_LARGE",
		"The request body is too large",
		"broker/dsapi: a body above the server's limit; the fields carry the limit",
		413, 65)
	MethodNotAllowed = errs.Static(0x00_10_05_04, "METHOD_NOT_ALLOWED",
		"The method is not allowed on a stream",
		"broker/dsapi: streams answer GET, HEAD, POST, PUT, DELETE and OPTIONS",
		405, 65)
	errBadJSON = BadRequest.With("reason", "body is not valid JSON")
)

// setCommon sets the headers of every response: the browser security
// headers.
func setCommon(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "cross-origin")
}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }
