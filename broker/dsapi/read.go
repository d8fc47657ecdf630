package dsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// page is one read: the records from an offset on, up to a size.
type page struct {
	from     uint64
	records  []stream.EntryValue
	next     uint64 // the offset after the last record (from when none)
	readAt   uint64 // the tail the read saw
	upToDate bool   // next reached the tail the read saw
}

// read reads a page of name from offset from.
func (h *Handler) read(ctx context.Context, name string, from uint64) (page, error) {
	entries, bounds, err := h.b.Read(ctx, name, 0, from, maxReadRecords, node.ReadOptions{MaxBytes: h.opts.MaxReadBytes})
	if errors.Is(err, stream.OffsetAhead) {
		// Past the tail: nothing there yet.
		return page{from: from, next: from, readAt: from, upToDate: true}, nil
	}
	if err != nil {
		return page{}, err
	}
	p := page{from: from, records: entries, next: from, readAt: uint64(bounds.Next)}
	if n := len(entries); n > 0 {
		p.next = uint64(entries[n-1].Offset) + 1
	}
	p.upToDate = p.next >= uint64(bounds.Next)
	return p, nil
}

// body renders records as the stream's content: their bytes one after the
// other, or for JSON one array of their messages.
func body(contentType string, recs []stream.EntryValue) []byte {
	if !isJSON(contentType) {
		n := 0
		for _, e := range recs {
			n += len(e.Record.Payload)
		}
		out := make([]byte, 0, n)
		for _, e := range recs {
			out = append(out, e.Record.Payload...)
		}
		return out
	}
	n := 2
	for _, e := range recs {
		n += len(e.Record.Payload) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	first := true
	for _, e := range recs {
		if len(e.Record.Payload) == 0 {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, e.Record.Payload...)
	}
	return append(out, ']')
}

// get answers GET: a catch-up read, a long-poll or an SSE stream.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, name string) {
	t, err := h.tail(name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	live := q.Get("live")
	offsets, given := q["offset"]
	var from uint64
	now := false
	switch {
	case !given:
		if live == "long-poll" || live == "sse" {
			h.fail(w, r, BadRequest.With("query", "offset", "reason", "required by live modes"))
			return
		}
		from = t.Start
	case len(offsets) != 1:
		h.fail(w, r, BadRequest.With("query", "offset", "reason", "given more than once"))
		return
	case offsets[0] == "-1":
		from = t.Start
	case offsets[0] == "now":
		from, now = t.End, true
	default:
		off, ok := parseOffset(offsets[0])
		if !ok {
			h.fail(w, r, BadRequest.With("query", "offset", "reason", "not -1, now or an offset of this server"))
			return
		}
		from = max(off, t.Start)
	}
	switch live {
	case "":
	case "long-poll":
		h.longPoll(w, r, name, from, t)
		return
	case "sse":
		h.sse(w, r, name, from, t)
		return
	default:
		h.fail(w, r, BadRequest.With("query", "live", "reason", "not long-poll or sse"))
		return
	}
	hd := w.Header()
	if now {
		// The tail, and nothing: where a reader that wants only new data
		// starts. It is a read, so it extends a sliding TTL.
		h.b.Touch(name)
		hd.Set("Content-Type", t.Entry.ContentType)
		hd.Set(hNextOffset, formatOffset(t.End))
		hd.Set(hUpToDate, "true")
		hd.Set("Cache-Control", "no-store")
		if t.Entry.Closed {
			hd.Set(hClosed, "true")
		}
		out := []byte{}
		if isJSON(t.Entry.ContentType) {
			out = []byte("[]")
		}
		hd.Set("Content-Length", itoa(len(out)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return
	}
	p, err := h.read(r.Context(), name, from)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answerPage(w, r, name, rendered{from: p.from, next: p.next, upToDate: p.upToDate, out: body(t.Entry.ContentType, p.records)}, "")
}

// rendered is a page as it is answered: the records [from, next) as the
// response's body.
type rendered struct {
	from, next uint64
	upToDate   bool
	out        []byte
}

// answerPage answers a page with 200 (or 304 for a matching
// If-None-Match). cursor, when set, is a long-poll's Stream-Cursor.
func (h *Handler) answerPage(w http.ResponseWriter, r *http.Request, name string, p rendered, cursor string) {
	t, err := h.tail(name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	closed := t.Entry.Closed && p.next >= t.End
	hd := w.Header()
	hd.Set("Content-Type", t.Entry.ContentType)
	hd.Set(hNextOffset, formatOffset(p.next))
	if p.upToDate || closed {
		hd.Set(hUpToDate, "true")
	}
	if closed {
		hd.Set(hClosed, "true")
	}
	if cursor != "" {
		hd.Set(hCursor, cursor)
	}
	tag := etag(t.Entry, p.from, p.next, closed)
	hd.Set("ETag", tag)
	// An answer to a request that carried credentials (a token, a signed
	// URL) is for that reader alone: a shared cache must not store it
	// (RFC 9111 §3.5 lets one store an authorised answer marked public)
	// and hand it to anyone.
	scope, fresh := "public", "no-cache"
	if frontend.Credentialed(r) {
		scope, fresh = "private", "private, no-cache"
		hd.Add("Vary", "Authorization")
	}
	switch {
	case closed:
		hd.Set("Cache-Control", scope+", max-age=60")
	case p.upToDate:
		hd.Set("Cache-Control", fresh)
	default:
		// History never changes at an offset: caches may keep it.
		hd.Set("Cache-Control", scope+", max-age=60, stale-while-revalidate=300")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", itoa(len(p.out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(p.out)
}

// longPoll answers at once when there is data at from (or the stream is
// closed there); else it waits up to LongPollTimeout for an append, and
// answers 204 when none came. The page it answers is shared with the other
// readers waiting at from (see pages.go).
func (h *Handler) longPoll(w http.ResponseWriter, r *http.Request, name string, from uint64, t node.Tail) {
	cursor := nextCursor(r.URL.Query().Get("cursor"), time.Now())
	timer := time.NewTimer(h.opts.LongPollTimeout)
	defer timer.Stop()
	for {
		wake, err := h.b.Wake(name) // before the tail that may show nothing new
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if t, err = h.tail(name); err != nil {
			h.fail(w, r, err)
			return
		}
		if from < t.End {
			next, out, err := h.pageAt(name, from, t, asBody)
			if err != nil {
				h.fail(w, r, err)
				return
			}
			if next > from {
				h.answerPage(w, r, name, rendered{from: from, next: next, upToDate: next >= t.End, out: out}, cursor)
				return
			}
		}
		if t.Entry.Closed && from >= t.End {
			h.noContent(w, from, cursor, true)
			return
		}
		h.waiting.Add(1)
		ended := ""
		select {
		case <-wake:
		case <-timer.C:
			ended = "timeout"
		case <-h.drain:
			ended = "drain"
		case <-r.Context().Done():
			ended = "gone"
		}
		h.waiting.Add(-1)
		switch ended {
		case "timeout":
			h.b.Touch(name)
			h.noContent(w, from, cursor, false)
			return
		case "drain":
			h.noContent(w, from, cursor, false)
			return
		case "gone":
			return
		}
	}
}

// pageAt is the page of name at from for a reader whose tail is t,
// rendered as kind: the offset after it and its rendering, shared among
// the readers waiting at from.
func (h *Handler) pageAt(name string, from uint64, t node.Tail, kind pageKind) (next uint64, out []byte, err error) {
	k := pageKey{stream: t.Entry.Partitions[0], from: from, kind: kind}
	return h.pages.get(k, t.End, func() (uint64, uint64, []byte, error) {
		return h.renderPage(name, from, t.Entry.ContentType, kind)
	})
}

func (h *Handler) noContent(w http.ResponseWriter, next uint64, cursor string, closed bool) {
	hd := w.Header()
	hd.Set(hNextOffset, formatOffset(next))
	hd.Set(hUpToDate, "true")
	hd.Set(hCursor, cursor)
	hd.Set("Cache-Control", "no-store")
	if closed {
		hd.Set(hClosed, "true")
	}
	w.WriteHeader(http.StatusNoContent)
}

// control is an SSE control event.
type control struct {
	NextOffset string `json:"streamNextOffset"`
	Cursor     string `json:"streamCursor,omitempty"`
	UpToDate   bool   `json:"upToDate,omitempty"`
	Closed     bool   `json:"streamClosed,omitempty"`
}

// sse streams the records from from on as Server-Sent Events: each page is
// one data event (the stream's text, its JSON array, or base64 of its
// bytes — each event decodes alone, and is shared with the other readers
// at from, see pages.go) followed at once by a control event with the next
// offset; an idle stream gets a control event now and then; a closed
// stream ends with a control event saying so, and the response.
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, name string, from uint64, t node.Tail) {
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	if frontend.Credentialed(r) {
		hd.Set("Cache-Control", "private, no-cache")
		hd.Add("Vary", "Authorization")
	}
	hd.Set("X-Accel-Buffering", "no")
	if !isText(t.Entry.ContentType) {
		hd.Set(hSSEEncoding, "base64")
	}
	w.WriteHeader(http.StatusOK)
	clientCursor := r.URL.Query().Get("cursor")
	// Sent with the first event.
	_, _ = io.WriteString(w, "retry: 1000\n")
	// Control events are small: what a waiting reader holds between
	// pages is this and its timers, never a page.
	ctl := make([]byte, 0, 256)
	end := time.NewTimer(h.opts.SSEMaxDuration)
	defer end.Stop()
	keepAlive := time.NewTimer(h.opts.SSEKeepAlive)
	defer keepAlive.Stop()
	idleSent := false
	// send writes a data event (when given), then the control event c,
	// and flushes both to the client.
	send := func(event []byte, c control) bool {
		if len(event) > 0 {
			if _, err := w.Write(event); err != nil {
				return false
			}
		}
		raw, _ := json.Marshal(c)
		ctl = append(ctl, "event: control\n"...)
		ctl = appendData(ctl, raw)
		_, err := w.Write(ctl)
		ctl = ctl[:0]
		if err == nil {
			err = rc.Flush()
		}
		return err == nil
	}
	for {
		wake, err := h.b.Wake(name)
		if err != nil {
			return // deleted: end the response
		}
		if t, err = h.tail(name); err != nil {
			return
		}
		next, event := from, []byte(nil)
		if from < t.End {
			if next, event, err = h.pageAt(name, from, t, asSSEEvent); err != nil {
				return
			}
		}
		closedAt := t.Entry.Closed && next >= t.End
		if next > from {
			from = next
			if closedAt {
				send(event, control{NextOffset: formatOffset(from), Closed: true})
				return
			}
			upToDate := from >= t.End
			if !send(event, control{NextOffset: formatOffset(from), Cursor: nextCursor(clientCursor, time.Now()), UpToDate: upToDate}) {
				return
			}
			idleSent = upToDate
			continue
		}
		if closedAt {
			send(nil, control{NextOffset: formatOffset(from), Closed: true})
			return
		}
		if !idleSent {
			if !send(nil, control{NextOffset: formatOffset(from), Cursor: nextCursor(clientCursor, time.Now()), UpToDate: true}) {
				return
			}
			idleSent = true
		}
		h.waiting.Add(1)
		over := false
		select {
		case <-wake:
		case <-keepAlive.C:
			keepAlive.Reset(h.opts.SSEKeepAlive)
			idleSent = false
		case <-end.C:
			over = true
		case <-h.drain:
			over = true
		case <-r.Context().Done():
			over = true
		}
		h.waiting.Add(-1)
		if over {
			return
		}
	}
}

// dataEvent is an SSE data event carrying p.
func dataEvent(p []byte) []byte {
	out := make([]byte, 0, len("event: data\n")+len(p)+len(p)/64+8)
	return appendData(append(out, "event: data\n"...), p)
}

// appendData appends an event's payload as data: lines, one per line of
// the payload — split at CR, LF and CRLF alike, so that no payload can end
// the event or start another —, then the blank line that ends the event.
// There is no space after "data:": readers strip one, and a payload
// starting with a space keeps it.
func appendData(dst, p []byte) []byte {
	for {
		i := bytes.IndexAny(p, "\r\n")
		dst = append(dst, "data:"...)
		if i < 0 {
			dst = append(dst, p...)
			return append(dst, "\n\n"...)
		}
		dst = append(dst, p[:i]...)
		dst = append(dst, '\n')
		if p[i] == '\r' && i+1 < len(p) && p[i+1] == '\n' {
			i++
		}
		p = p[i+1:]
	}
}

func itoa(n int) string { return formatInt(int64(n)) }
