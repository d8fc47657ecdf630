package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/bufpool"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// fail answers err as a coded problem, with the status errs.HTTPStatus
// gives it. An error with no code is reported as STREAM_BACKEND_FAILED
// wrapping it. When the client is gone (its context ended) nothing is
// written: nobody would read it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if frontend.Abandoned(r, err) {
		s.log.Debug("request abandoned by its client", "method", r.Method, "path", r.URL.Path, "err", err)
		return
	}
	coded := frontend.Coded(err, "http."+strings.ToLower(r.Method))
	status := errs.HTTPStatus(coded)
	if errors.Is(coded, stream.StreamDirectoryUnusable) {
		status = http.StatusInternalServerError // a server-side configuration, not the request's fault
	}
	frontend.WriteProblem(w, r, s.log, coded, status)
}

// writeJSON answers v as JSON with status.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.log.Error("cannot encode an answer", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", wire.JSONContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// name extracts the stream name after prefix from the request path, and,
// when withOp, the operation after a ':'. A name holding a percent-encoded
// byte (a '/' in disguise, say) is refused before it is decoded, and every
// name is checked by node.ValidateName, which refuses empty, "." and ".."
// segments: a name never climbs out of its route.
func (s *Server) name(r *http.Request, prefix string, withOp bool) (name, op string, err error) {
	escaped := r.URL.EscapedPath()
	if !strings.HasPrefix(escaped, prefix) {
		// The decoded path had the prefix and the escaped one does not: the
		// prefix itself was percent-encoded.
		return "", "", badName(r.URL.Path, "percent-encoded bytes in the path")
	}
	rest := escaped[len(prefix):]
	if strings.ContainsRune(rest, '%') {
		return "", "", badName(rest, "percent-encoded bytes in a stream name")
	}
	if withOp {
		if i := strings.IndexByte(rest, ':'); i >= 0 {
			rest, op = rest[:i], rest[i+1:]
		}
	}
	if err := node.ValidateName(rest); err != nil {
		return "", "", err
	}
	return rest, op, nil
}

func badName(name, reason string) error {
	return stream.StreamMisconfigured.With("field", "name", "reason", reason, "length", len(name))
}

// Query parameters. A malformed number is STREAM_MISCONFIGURED naming the
// parameter, with the text it got.

func badParam(name, value, reason string) error {
	return stream.StreamMisconfigured.With("field", name, "value", value, "reason", reason)
}

func intParam(q url.Values, name string, def int) (int, error) {
	if !q.Has(name) {
		return def, nil
	}
	v := q.Get(name)
	n, err := strconv.ParseInt(v, 10, 0)
	if err != nil {
		return 0, badParam(name, v, "not an integer")
	}
	return int(n), nil
}

func offsetParam(q url.Values, name string, def uint64, required bool) (uint64, error) {
	if !q.Has(name) {
		if required {
			return 0, badParam(name, "", "required")
		}
		return def, nil
	}
	v := q.Get(name)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, badParam(name, v, "not an offset (a non-negative integer)")
	}
	return n, nil
}

func int64Param(q url.Values, name string) (int64, bool, error) {
	if !q.Has(name) {
		return 0, false, nil
	}
	v := q.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, badParam(name, v, "not a non-negative integer")
	}
	return n, true, nil
}

// timeValue reads an instant as RFC 3339 (nanoseconds allowed) or as
// integer Unix nanoseconds.
func timeValue(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, badParam(name, v, "required")
	}
	if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(0, ns), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badParam(name, v, "neither RFC 3339 nor integer Unix nanoseconds")
	}
	return t, nil
}

// mediaType is a Content-Type without its parameters, lower-cased.
func mediaType(v string) string {
	if i := strings.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	return strings.ToLower(strings.TrimSpace(v))
}

// readBody reads a body of at most limit bytes, refusing a larger one as
// BODY_TOO_LARGE.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, _, err := readBodyInto(w, r, limit, nil)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// appendBodies recycles the bodies of large appends: an append's records
// are copied into its encoded batch when the broker admits it, so the body
// is dead once the append is answered (see core's batchBuffers for what
// allocating them cost).
var appendBodies bufpool.Pool

// readAppendBody is readBody for an append: release gives the body's
// buffer back once nothing uses the body any more (the handler's appends
// are answered); it may be called once, on every path.
func readAppendBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	body, recycled, err := readBodyInto(w, r, limit, &appendBodies)
	if !recycled {
		return body, func() {}, err
	}
	return body, func() { appendBodies.Put(body) }, err
}

// readBodyInto reads a body of at most limit bytes into a buffer from pool
// (nil: allocated), and reports whether the buffer returned is one pool
// recycles (then it is returned even with an error, to be given back).
func readBodyInto(w http.ResponseWriter, r *http.Request, limit int64, pool *bufpool.Pool) (buf []byte, recycled bool, err error) {
	if r.ContentLength > limit {
		return nil, false, wire.BodyTooLarge.With("maxBytes", limit, "contentLength", r.ContentLength)
	}
	// Sized by Content-Length, up to 1 MiB: a client that announces a
	// large body and sends it slowly does not get the whole buffer at once.
	size := 512
	if r.ContentLength >= 0 {
		size = int(min(r.ContentLength, 1<<20))
	}
	if pool != nil {
		buf, recycled = pool.Get(size + 1)
	} else {
		buf = make([]byte, 0, size+1)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				return buf[:0], recycled, wire.BodyTooLarge.With("maxBytes", limit)
			}
			if errors.Is(err, io.EOF) {
				return buf, recycled, nil
			}
			return buf[:0], recycled, err
		}
	}
}
