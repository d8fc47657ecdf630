package dsapi

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// createRequest is a PUT's configuration, validated.
type createRequest struct {
	contentType string // "" for a fork that inherits its source's
	ttl         time.Duration
	expiresAt   time.Time
	closed      bool
	forkedFrom  string // source name ("" for a plain create)
	forkOffset  *uint64
	subOffset   int64
	body        []byte
}

func (h *Handler) parseCreate(r *http.Request) (*createRequest, error) {
	hd := r.Header
	c := &createRequest{closed: strings.EqualFold(hd.Get(hClosed), "true")}
	if f := hd.Get(hForkedFrom); f != "" {
		src, err := sourceName(f)
		if err != nil {
			return nil, err
		}
		c.forkedFrom = src
	}
	if vs := hd.Values(hForkSubOffset); len(vs) > 0 {
		if c.forkedFrom == "" {
			return nil, BadRequest.With("header", hForkSubOffset, "reason", "only with "+hForkedFrom)
		}
		if !decimal.MatchString(vs[0]) {
			return nil, BadRequest.With("header", hForkSubOffset, "reason", "not a decimal integer")
		}
		v, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil {
			return nil, BadRequest.With("header", hForkSubOffset, "reason", "out of range")
		}
		c.subOffset = v
	}
	if vs := hd.Values(hForkOffset); len(vs) > 0 {
		if c.forkedFrom == "" {
			return nil, BadRequest.With("header", hForkOffset, "reason", "only with "+hForkedFrom)
		}
		off, ok := parseOffset(vs[0])
		if !ok {
			return nil, BadRequest.With("header", hForkOffset, "reason", "not an offset of this server")
		}
		c.forkOffset = &off
	}
	ct := hd.Get("Content-Type")
	switch {
	case strings.TrimSpace(ct) != "" && contentTypePattern.MatchString(strings.TrimSpace(ct)):
		c.contentType = strings.TrimSpace(ct)
	case c.forkedFrom == "":
		c.contentType = defaultMediaType
	}
	ttl, exp := hd.Get(hTTL), hd.Get(hExpiresAt)
	if ttl != "" && exp != "" {
		return nil, BadRequest.With("reason", "both "+hTTL+" and "+hExpiresAt)
	}
	if ttl != "" {
		if !decimal.MatchString(ttl) {
			return nil, BadRequest.With("header", hTTL, "reason", "not a decimal number of seconds")
		}
		secs, err := strconv.ParseInt(ttl, 10, 64)
		if err != nil || secs > int64(100*365*24*time.Hour/time.Second) {
			return nil, BadRequest.With("header", hTTL, "reason", "out of range")
		}
		c.ttl = time.Duration(secs) * time.Second
	}
	if exp != "" {
		t, err := time.Parse(time.RFC3339Nano, exp)
		if err != nil {
			return nil, BadRequest.With("header", hExpiresAt, "reason", "not an RFC 3339 timestamp")
		}
		c.expiresAt = t
	}
	body, err := h.readBody(r)
	if err != nil {
		return nil, err
	}
	c.body = body
	return c, nil
}

// sourceName reads Stream-Forked-From: a stream's path on this server
// (an absolute URL's path is taken too).
func sourceName(v string) (string, error) {
	if !strings.HasPrefix(v, "/") {
		u, err := url.Parse(v)
		if err != nil || u.Path == "" {
			return "", BadRequest.With("header", hForkedFrom, "reason", "not a stream path")
		}
	}
	name, ok := wire.ForkSource(v)
	if !ok {
		return "", node.StreamNotFound.With("header", hForkedFrom, "reason", "not a stream of this server")
	}
	if err := node.ValidateName(name); err != nil {
		return "", node.StreamNotFound.With("header", hForkedFrom, "reason", "not a stream name")
	}
	return name, nil
}

// records turns a create's or an append's body into the stream's records:
// one record (none for an empty body, or a JSON "[]" when allowed).
func records(contentType string, body []byte, allowEmptyJSON bool) ([]stream.RecordValue, error) {
	if len(body) == 0 {
		return nil, nil
	}
	if !isJSON(contentType) {
		return []stream.RecordValue{{Payload: body}}, nil
	}
	rec, n, err := jsonRecord(body)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		if !allowEmptyJSON {
			return nil, BadRequest.With("reason", "an empty JSON array appends nothing")
		}
		return nil, nil
	}
	return []stream.RecordValue{{Payload: rec}}, nil
}

// put answers PUT: create (201), or confirm an identical existing stream
// (200), or refuse another configuration (409); with Stream-Forked-From, a
// fork.
func (h *Handler) put(w http.ResponseWriter, r *http.Request, name string) {
	c, err := h.parseCreate(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// An existing stream answers first, whatever the source's state.
	if t, err := h.b.TailOf(name, 0); err == nil {
		h.confirm(w, r, t, c)
		return
	} else if errors.Is(err, node.StreamGone) {
		h.fail(w, r, Conflict.With("name", name, "reason", "the stream was deleted but forks of it still hold its name"))
		return
	} else if !errors.Is(err, node.StreamNotFound) {
		h.fail(w, r, err)
		return
	}
	var e *node.Entry
	var created bool
	if c.forkedFrom != "" {
		e, created, err = h.fork(r, name, c)
	} else {
		var recs []stream.RecordValue
		if recs, err = records(c.contentType, c.body, true); err == nil {
			e, created, err = h.b.Create(r.Context(), name, node.CreateOptions{
				ContentType: c.contentType, TTL: c.ttl, ExpiresAt: c.expiresAt, Closed: c.closed, Initial: recs,
			})
		}
	}
	if errors.Is(err, node.StreamGone) {
		err = Conflict.Wrap(err, "name", name)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	t, err := h.b.TailOf(e.Name, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !created {
		h.confirm(w, r, t, c) // lost a race to another create
		return
	}
	h.answerCreate(w, r, t, http.StatusCreated)
}

func (h *Handler) answerCreate(w http.ResponseWriter, r *http.Request, t node.Tail, status int) {
	hd := w.Header()
	hd.Set("Content-Type", t.Entry.ContentType)
	hd.Set(hNextOffset, formatOffset(t.End))
	if t.Entry.Closed {
		hd.Set(hClosed, "true")
	}
	if status == http.StatusCreated {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		hd.Set("Location", scheme+"://"+r.Host+Prefix+t.Entry.Name)
	}
	w.WriteHeader(status)
}

// confirm answers a PUT on an existing stream: 200 when the request
// matches its configuration, else 409.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, t node.Tail, c *createRequest) {
	e := t.Entry
	why := ""
	switch {
	case c.contentType != "" && mediaType(c.contentType) != mediaType(e.ContentType):
		why = "content type"
	case c.closed != e.Closed:
		why = "closed"
	case c.forkedFrom != e.ForkOf:
		why = "fork source"
	case c.forkOffset != nil && *c.forkOffset != e.ForkOffset:
		why = "fork offset"
	case c.subOffset != e.ForkSubOffset:
		why = "fork sub-offset"
	case c.ttl == 0 && c.expiresAt.IsZero() && c.forkedFrom != "":
		// A fork asked with no lifetime inherited its source's.
	case c.ttl != e.TTL:
		why = "TTL"
	case !c.expiresAt.Equal(e.ExpiresAt):
		why = "expiry"
	}
	if why != "" {
		h.fail(w, r, Conflict.With("name", e.Name, "reason", "exists with another "+why))
		return
	}
	h.answerCreate(w, r, t, http.StatusOK)
}

// fork creates name as a fork of c.forkedFrom.
func (h *Handler) fork(r *http.Request, name string, c *createRequest) (*node.Entry, bool, error) {
	src, err := h.tail(c.forkedFrom)
	if errors.Is(err, node.StreamGone) {
		return nil, false, Conflict.With("source", c.forkedFrom, "reason", "the source was deleted")
	}
	if err != nil {
		return nil, false, err
	}
	ct := c.contentType
	if ct == "" {
		ct = src.Entry.ContentType
	} else if mediaType(ct) != mediaType(src.Entry.ContentType) {
		return nil, false, Conflict.With("source", c.forkedFrom, "reason", "content type differs from the source's")
	}
	at := src.End
	if c.forkOffset != nil {
		at = *c.forkOffset
	}
	if at > src.End {
		return nil, false, BadRequest.With("header", hForkOffset, "reason", "past the source's tail")
	}
	var initial []stream.RecordValue
	if c.subOffset > 0 {
		prefix, err := h.subOffsetPrefix(r, c.forkedFrom, at, c.subOffset, isJSON(ct))
		if err != nil {
			return nil, false, err
		}
		initial = append(initial, stream.RecordValue{Payload: prefix})
	}
	recs, err := records(ct, c.body, true)
	if err != nil {
		return nil, false, err
	}
	initial = append(initial, recs...)
	e, created, err := h.b.Fork(r.Context(), name, node.ForkOptions{
		Source: c.forkedFrom, At: at, SubOffset: c.subOffset, ContentType: ct,
		TTL: c.ttl, ExpiresAt: c.expiresAt, Closed: c.closed, Initial: initial,
	})
	if errors.Is(err, node.StreamGone) && e == nil {
		if _, gerr := h.b.TailOf(name, 0); errors.Is(gerr, node.StreamNotFound) {
			err = Conflict.Wrap(err, "source", c.forkedFrom, "reason", "the source was deleted")
		}
	}
	if errors.Is(err, stream.OffsetAhead) || errors.Is(err, stream.OffsetTrimmed) {
		err = BadRequest.Wrap(err, "header", hForkOffset)
	}
	return e, created, err
}

// subOffsetPrefix returns what a fork at offset at with a sub-offset
// inherits of the source's record at at: its first n bytes, or for JSON
// its first n messages. The fork starts with it as a record of its own.
func (h *Handler) subOffsetPrefix(r *http.Request, source string, at uint64, n int64, jsonMode bool) ([]byte, error) {
	entries, _, err := h.b.Read(r.Context(), source, 0, at, 1, node.ReadOptions{})
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 || uint64(entries[0].Offset) != at {
		return nil, BadRequest.With("header", hForkSubOffset, "reason", "no message at the fork offset")
	}
	rec := entries[0].Record.Payload
	if !jsonMode {
		if n > int64(len(rec)) {
			return nil, BadRequest.With("header", hForkSubOffset, "reason", "past the message's end", "length", len(rec))
		}
		return rec[:n], nil
	}
	msgs, err := jsonMessages(rec)
	if err != nil {
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "durable.fork.json")
	}
	if n > int64(len(msgs)) {
		return nil, BadRequest.With("header", hForkSubOffset, "reason", "past the append's messages", "messages", len(msgs))
	}
	var out bytes.Buffer
	for i, m := range msgs[:n] {
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(m)
	}
	return out.Bytes(), nil
}

// producer is an append's idempotent-producer tuple (nil: none).
func parseProducer(hd http.Header) (*node.ProducerTuple, error) {
	id, hasID := hd[http.CanonicalHeaderKey(hProducerID)]
	ep, hasEp := hd[http.CanonicalHeaderKey(hProducerEpoch)]
	sq, hasSeq := hd[http.CanonicalHeaderKey(hProducerSeq)]
	if !hasID && !hasEp && !hasSeq {
		return nil, nil
	}
	if !hasID || !hasEp || !hasSeq {
		return nil, BadRequest.With("reason", "Producer-Id, Producer-Epoch and Producer-Seq go together")
	}
	if id[0] == "" {
		return nil, BadRequest.With("header", hProducerID, "reason", "empty")
	}
	epoch, ok := parseSafeInt(ep[0])
	if !ok {
		return nil, BadRequest.With("header", hProducerEpoch, "reason", "not an integer in [0, 2^53-1]")
	}
	seq, ok := parseSafeInt(sq[0])
	if !ok {
		return nil, BadRequest.With("header", hProducerSeq, "reason", "not an integer in [0, 2^53-1]")
	}
	return &node.ProducerTuple{ID: id[0], Epoch: epoch, Seq: seq}, nil
}

// post answers POST: an append, an append-and-close, or a close.
func (h *Handler) post(w http.ResponseWriter, r *http.Request, name string) {
	prod, err := parseProducer(r.Header)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	closing := strings.EqualFold(r.Header.Get(hClosed), "true")
	body, err := h.readBody(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	t, err := h.tail(name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	o := node.AppendOptions{Partition: 0, Producer: prod, StreamSeq: r.Header.Get(hSeq), Close: closing}
	var recs []stream.RecordValue
	switch {
	case len(body) == 0 && !closing:
		h.fail(w, r, BadRequest.With("reason", "an empty body appends nothing (close with Stream-Closed: true)"))
		return
	case len(body) == 0:
		// Close-only: the content type does not matter.
	default:
		ct := r.Header.Get("Content-Type")
		if strings.TrimSpace(ct) == "" {
			h.fail(w, r, BadRequest.With("header", "Content-Type", "reason", "missing"))
			return
		}
		if t.Entry.Closed {
			// Closed first: the broker acknowledges the closing append's
			// retry, and refuses anything else with the final offset.
			recs = []stream.RecordValue{{Payload: body}}
			break
		}
		if mediaType(ct) != mediaType(t.Entry.ContentType) {
			h.fail(w, r, Conflict.With("header", "Content-Type", "reason", "not the stream's content type", "stream", t.Entry.ContentType))
			return
		}
		if recs, err = records(t.Entry.ContentType, body, false); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	res, err := h.b.Append(r.Context(), name, recs, o)
	hd := w.Header()
	switch {
	case err == nil:
		hd.Set(hNextOffset, formatOffset(res.Next))
		if res.Closed {
			hd.Set(hClosed, "true")
		}
		status := http.StatusNoContent
		if prod != nil {
			hd.Set(hProducerEpoch, strconv.FormatInt(prod.Epoch, 10))
			if res.Duplicate {
				hd.Set(hProducerSeq, strconv.FormatInt(res.Producer.LastSeq, 10))
			} else {
				hd.Set(hProducerSeq, strconv.FormatInt(prod.Seq, 10))
				if len(recs) > 0 {
					status = http.StatusOK // a producer's fresh append
				}
			}
		}
		w.WriteHeader(status)
	case errors.Is(err, node.StreamClosed):
		hd.Set(hClosed, "true")
		hd.Set(hNextOffset, formatOffset(res.Next))
		if len(recs) == 0 && prod == nil {
			w.WriteHeader(http.StatusNoContent) // closing a closed stream
			return
		}
		h.fail(w, r, err)
	case errors.Is(err, node.ProducerFenced):
		cur := res.Producer.Epoch
		if v, ok := errs.FieldOf(err, "current"); ok {
			if n, ok := v.(int64); ok {
				cur = n
			}
		}
		hd.Set(hProducerEpoch, strconv.FormatInt(cur, 10))
		h.fail(w, r, err)
	case errors.Is(err, node.ProducerSeqGap):
		for field, header := range map[string]string{"expected": hExpectedSeq, "received": hReceivedSeq} {
			if v, ok := errs.FieldOf(err, field); ok {
				hd.Set(header, fmtField(v))
			}
		}
		h.fail(w, r, err)
	default:
		h.fail(w, r, err)
	}
}

func fmtField(v any) string {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10)
	case uint64:
		return strconv.FormatUint(n, 10)
	case string:
		return n
	}
	return ""
}
