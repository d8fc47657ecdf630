// Package dsapi serves the Durable Streams HTTP protocol under
// /v1/stream/<name...> over one node.Broker: a URL is a named stream with
// one partition, whose records are the protocol's messages — one record per
// append (binary and text: the body; JSON: the body's messages, compacted
// and joined by commas) —, whose producer state, Stream-Seq and closed flag
// are the broker's own, committed with the data they admit, and whose forks
// share the source's objects through the metadata state machine.
//
// Offsets are the partition's record offsets (see formatOffset), so every
// offset the server ever returned stays a valid read and fork position
// across restarts. Sliding TTLs are kept by the broker in memory and
// persisted lazily: no read writes the metadata log.
package dsapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// Prefix is where the protocol is served: a stream's URL is Prefix + name.
const Prefix = "/v1/stream/"

// Defaults of Options.
const (
	DefaultMaxReadBytes   = 1 << 20
	DefaultSSEMaxDuration = 60 * time.Second
	DefaultSSEKeepAlive   = 15 * time.Second
	maxReadRecords        = 4096
)

// Options tune a Handler; zero values take the defaults.
type Options struct {
	// Options are the settings the front ends share. LongPollTimeout is
	// how long a long-poll waits for data before it answers 204 (the
	// conformance suite wants well under 5s). Above MaxBodyBytes a body is
	// refused with 413; so is a record above the stream's MaxRecordBytes
	// (1 MiB by default).
	frontend.Options
	// MaxReadBytes bounds one catch-up response or SSE data event (default
	// 1 MiB): a longer stream is read in pages, each ending at a record
	// boundary (at least one record per page).
	MaxReadBytes int64
	// SSEMaxDuration ends an SSE response after this long (default 60s);
	// the client reconnects from its last offset, as the protocol expects.
	SSEMaxDuration time.Duration
	// SSEKeepAlive is how often an idle SSE response sends a control event
	// (default 15s).
	SSEKeepAlive time.Duration
}

func (o Options) withDefaults() Options {
	o.Options = o.Options.WithDefaults()
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.SSEMaxDuration <= 0 {
		o.SSEMaxDuration = DefaultSSEMaxDuration
	}
	if o.SSEKeepAlive <= 0 {
		o.SSEKeepAlive = DefaultSSEKeepAlive
	}
	return o
}

// Handler serves the protocol. It is an http.Handler for Prefix.
type Handler struct {
	b    node.Broker
	opts Options

	drainOnce sync.Once
	drain     chan struct{}
	waiting   atomic.Int64 // long-polls and SSE responses waiting for records
	pages     *pageCache   // pages shared by the live readers at one offset
}

// Waiting reports how many long-polls and SSE responses are waiting for
// records at this moment.
func (h *Handler) Waiting() int64 { return h.waiting.Load() }

// New returns the protocol's handler over b.
func New(b node.Broker, opts Options) *Handler {
	return &Handler{b: b, opts: opts.withDefaults(), drain: make(chan struct{}), pages: newPageCache(pageCacheBytes)}
}

// Drain ends every long-poll and SSE response at once (before a shutdown).
func (h *Handler) Drain() { h.drainOnce.Do(func() { close(h.drain) }) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setCommon(w.Header())
	if r.Method == http.MethodOptions {
		w.Header().Set("Allow", allowMethods)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok || name == "" {
		h.fail(w, r, node.StreamNotFound.With("path", r.URL.Path))
		return
	}
	if err := node.ValidateName(name); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkRequest(r.Header, r.URL.RawQuery); err != nil {
		h.fail(w, r, err)
		return
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "__ds" {
			// Reserved for the protocol's own resources, which this
			// server does not offer.
			h.fail(w, r, node.StreamNotFound.With("path", r.URL.Path, "reason", "reserved"))
			return
		}
	}
	switch r.Method {
	case http.MethodGet:
		h.get(w, r, name)
	case http.MethodHead:
		h.head(w, r, name)
	case http.MethodPost:
		h.post(w, r, name)
	case http.MethodPut:
		h.put(w, r, name)
	case http.MethodDelete:
		h.delete(w, r, name)
	default:
		w.Header().Set("Allow", allowMethods)
		h.fail(w, r, MethodNotAllowed.With("method", r.Method))
	}
}

// fail answers a refusal: its status and a problem document (no body for
// HEAD).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if frontend.Abandoned(r, err) {
		return
	}
	frontend.WriteProblem(w, r, h.opts.Logger, frontend.Coded(err, "dsapi."+strings.ToLower(r.Method)), statusOf(err))
}

// statusOf maps a refusal to the protocol's status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, node.StreamNotFound):
		return http.StatusNotFound
	case errors.Is(err, node.StreamGone):
		return http.StatusGone
	case errors.Is(err, stream.RecordTooLarge), errors.Is(err, BodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, stream.StreamMisconfigured), errors.Is(err, stream.OffsetAhead), errors.Is(err, stream.InvalidBatchSize):
		return http.StatusBadRequest
	case errors.Is(err, node.StreamClosed), errors.Is(err, node.StreamSeqOrder), errors.Is(err, node.ProducerSeqGap),
		errors.Is(err, stream.OffsetTrimmed), errors.Is(err, Conflict):
		return http.StatusConflict
	case errors.Is(err, node.ProducerFenced):
		return http.StatusForbidden
	}
	return errs.HTTPStatus(err)
}

// readBody reads a request body of at most MaxBodyBytes.
func (h *Handler) readBody(r *http.Request) ([]byte, error) {
	limit := h.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, BodyTooLarge.With("max", limit, "size", r.ContentLength)
	}
	n := r.ContentLength
	if n < 0 || n > 64<<10 {
		n = 64 << 10
	}
	var bb bytes.Buffer
	bb.Grow(int(n) + bytes.MinRead)
	if _, err := bb.ReadFrom(io.LimitReader(r.Body, limit+1)); err != nil {
		if errors.Is(err, wire.RequestTimeout) {
			return nil, err // 408: the client was too slow
		}
		return nil, BadRequest.Wrap(err, "reason", "cannot read the body")
	}
	buf := bb.Bytes()
	if int64(len(buf)) > limit {
		return nil, BodyTooLarge.With("max", limit)
	}
	return buf, nil
}

// delete answers DELETE: 204, 404, or 410 for a soft-deleted stream.
func (h *Handler) delete(w http.ResponseWriter, r *http.Request, name string) {
	if err := h.b.Delete(r.Context(), name); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// tail returns a one-partition stream's state.
func (h *Handler) tail(name string) (node.Tail, error) {
	t, err := h.b.TailOf(name, 0)
	if err != nil {
		return t, err
	}
	if len(t.Entry.Partitions) != 1 {
		return t, Conflict.With("name", name, "reason", "the stream has several partitions: use the partitioned-log API", "partitions", len(t.Entry.Partitions))
	}
	return t, nil
}

// head answers HEAD: the stream's metadata, without extending its TTL.
func (h *Handler) head(w http.ResponseWriter, r *http.Request, name string) {
	t, err := h.tail(name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	hd := w.Header()
	setMeta(hd, t.Entry)
	hd.Set(hNextOffset, formatOffset(t.End))
	hd.Set("Cache-Control", "no-store")
	hd.Set("ETag", etag(t.Entry, t.Start, t.End, t.Entry.Closed))
	w.WriteHeader(http.StatusOK)
}

// setMeta sets the headers describing a stream: content type, lifetime,
// closed flag.
func setMeta(hd http.Header, e *node.Entry) {
	hd.Set("Content-Type", e.ContentType)
	if e.TTL > 0 {
		hd.Set(hTTL, strconv.FormatInt(int64(e.TTL/time.Second), 10))
	}
	if !e.ExpiresAt.IsZero() {
		hd.Set(hExpiresAt, formatTime(e.ExpiresAt))
	}
	if e.Closed {
		hd.Set(hClosed, "true")
	}
}

func formatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// etag names one response's content: the stream incarnation, the range
// read, and whether it ends the closed stream.
func etag(e *node.Entry, from, next uint64, closed bool) string {
	var b strings.Builder
	b.WriteByte('"')
	b.WriteString(strconv.FormatUint(e.Partitions[0], 36))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(from, 36))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(next, 36))
	if closed {
		b.WriteString(":c")
	}
	b.WriteByte('"')
	return b.String()
}
