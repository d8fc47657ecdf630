package dsapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// page is one read: the records from an offset on, up to a size.
type page struct {
	from     uint64
	records  []stream.EntryValue
	next     uint64 // the offset after the last record (from when none)
	upToDate bool   // next reached the tail the read saw
}

// read reads a page of name from offset from.
func (h *Handler) read(r *http.Request, name string, from uint64) (page, error) {
	entries, bounds, err := h.b.Read(r.Context(), name, 0, from, maxReadRecords, node.ReadOptions{MaxBytes: h.opts.MaxReadBytes})
	if errors.Is(err, stream.OffsetAhead) {
		// Past the tail: nothing there yet.
		return page{from: from, next: from, upToDate: true}, nil
	}
	if err != nil {
		return page{}, err
	}
	p := page{from: from, records: entries, next: from}
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
	p, err := h.read(r, name, from)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.answerPage(w, r, name, p, "")
}

// answerPage answers a page with 200 (or 304 for a matching If-None-Match).
// cursor, when set, is a long-poll's Stream-Cursor.
func (h *Handler) answerPage(w http.ResponseWriter, r *http.Request, name string, p page, cursor string) {
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
	switch {
	case closed:
		hd.Set("Cache-Control", "public, max-age=60")
	case p.upToDate:
		hd.Set("Cache-Control", "no-cache")
	default:
		// History never changes at an offset: caches may keep it.
		hd.Set("Cache-Control", "public, max-age=60, stale-while-revalidate=300")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	out := body(t.Entry.ContentType, p.records)
	hd.Set("Content-Length", itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// longPoll answers at once when there is data at from (or the stream is
// closed there); else it waits up to LongPollTimeout for an append, and
// answers 204 when none came.
func (h *Handler) longPoll(w http.ResponseWriter, r *http.Request, name string, from uint64, t node.Tail) {
	cursor := nextCursor(r.URL.Query().Get("cursor"), time.Now())
	timer := time.NewTimer(h.opts.LongPollTimeout)
	defer timer.Stop()
	for {
		wake, err := h.b.Wake(name) // before the read that may find nothing
		if err != nil {
			h.fail(w, r, err)
			return
		}
		p, err := h.read(r, name, from)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if len(p.records) > 0 {
			h.answerPage(w, r, name, p, cursor)
			return
		}
		if t, err = h.tail(name); err != nil {
			h.fail(w, r, err)
			return
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
// bytes — each event decodes alone) followed at once by a control event
// with the next offset; an idle stream gets a control event now and then;
// a closed stream ends with a control event saying so, and the response.
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, name string, from uint64, t node.Tail) {
	rc := http.NewResponseController(w)
	ct := t.Entry.ContentType
	b64 := !isText(ct)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	if b64 {
		hd.Set(hSSEEncoding, "base64")
	}
	w.WriteHeader(http.StatusOK)
	clientCursor := r.URL.Query().Get("cursor")
	var buf bytes.Buffer
	buf.WriteString("retry: 1000\n")
	end := time.NewTimer(h.opts.SSEMaxDuration)
	defer end.Stop()
	keepAlive := time.NewTimer(h.opts.SSEKeepAlive)
	defer keepAlive.Stop()
	idleSent := false
	flush := func() bool {
		if buf.Len() == 0 {
			return true
		}
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		return err == nil
	}
	writeControl := func(c control) {
		raw, _ := json.Marshal(c)
		buf.WriteString("event: control\n")
		writeData(&buf, raw)
	}
	for {
		wake, err := h.b.Wake(name)
		if err != nil {
			return // deleted: end the response
		}
		p, err := h.read(r, name, from)
		if err != nil {
			return
		}
		if t, err = h.tail(name); err != nil {
			return
		}
		closedAt := t.Entry.Closed && p.next >= t.End
		if len(p.records) > 0 {
			buf.WriteString("event: data\n")
			out := body(ct, p.records)
			if b64 {
				enc := make([]byte, base64.StdEncoding.EncodedLen(len(out)))
				base64.StdEncoding.Encode(enc, out)
				out = enc
			}
			writeData(&buf, out)
			from = p.next
			if closedAt {
				writeControl(control{NextOffset: formatOffset(from), Closed: true})
				flush()
				return
			}
			writeControl(control{NextOffset: formatOffset(from), Cursor: nextCursor(clientCursor, time.Now()), UpToDate: p.upToDate})
			idleSent = p.upToDate
			if !flush() {
				return
			}
			continue
		}
		if closedAt {
			writeControl(control{NextOffset: formatOffset(from), Closed: true})
			flush()
			return
		}
		if !idleSent {
			writeControl(control{NextOffset: formatOffset(from), Cursor: nextCursor(clientCursor, time.Now()), UpToDate: true})
			idleSent = true
			if !flush() {
				return
			}
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

// writeData writes an event's payload as data: lines, one per line of the
// payload — split at CR, LF and CRLF alike, so that no payload can end the
// event or start another —, then the blank line that ends the event.
// There is no space after "data:": readers strip one, and a payload
// starting with a space keeps it.
func writeData(buf *bytes.Buffer, p []byte) {
	for {
		i := bytes.IndexAny(p, "\r\n")
		buf.WriteString("data:")
		if i < 0 {
			buf.Write(p)
			buf.WriteString("\n\n")
			return
		}
		buf.Write(p[:i])
		buf.WriteByte('\n')
		if p[i] == '\r' && i+1 < len(p) && p[i+1] == '\n' {
			i++
		}
		p = p[i+1:]
	}
}

func itoa(n int) string { return formatInt(int64(n)) }
