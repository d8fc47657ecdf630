package dsapi

import (
	"context"
	"encoding/base64"
	"sync"
)

// Live readers share the page an append wakes them for.
//
// An append wakes every long-poll and SSE response waiting on its stream at
// once, and they nearly all wait at the same offset, the tail. Each one
// reading, copying and encoding the same records for itself made a wake
// cost the number of readers times the records' bytes, in memory and CPU:
// 4,000 readers of 64 KiB appends held gigabytes in flight. So a page is
// read and rendered once — a long-poll's body, or an SSE data event — and
// every reader waiting at that offset writes the same bytes.
//
// A reader takes a shared page only if it was read at a tail no older than
// the one the reader saw itself: the records of a page never change at
// their offsets, so it is exactly what the reader's own read could have
// returned. A page that failed to render is not shared; each reader then
// reads for itself and meets its own answer.

// pageKind is what a page is rendered as.
type pageKind uint8

const (
	asBody     pageKind = iota // a long-poll's response body
	asSSEEvent                 // an SSE data event, base64 where the stream is not text
)

// pageKey names a page: the stream's incarnation (its internal stream,
// never reused by a later stream of the same name), the offset it starts
// at, and its rendering.
type pageKey struct {
	stream uint64
	from   uint64
	kind   pageKind
}

// sharedPage is one page, rendered once. Its fields are set before ready
// is closed and never change after.
type sharedPage struct {
	ready chan struct{}
	// readAt is the tail the read saw: the page serves readers whose tail
	// is at most this.
	readAt uint64
	next   uint64 // the offset after its last record
	out    []byte // the rendering; empty when the page has no record
	err    error
}

// pageCache holds the latest pages, bounded by bytes: a page is wanted for
// the moment its wake lasts, so the oldest go first. A reader holding a
// page keeps it through its write, evicted or not.
type pageCache struct {
	limit int64

	mu    sync.Mutex
	pages map[pageKey]*sharedPage
	order []pageKey // insertion order, oldest first
	bytes int64
}

// pageCacheBytes bounds the rendered pages kept for readers still to come.
const pageCacheBytes = 16 << 20

func newPageCache(limit int64) *pageCache {
	return &pageCache{limit: limit, pages: map[pageKey]*sharedPage{}}
}

// get returns the page k for a reader whose tail is at end, rendering it
// with render when no page read at end or later is held (or being read).
// render reads the records at k.from and returns the tail its read saw, the
// offset after the page, and the page's rendering.
func (c *pageCache) get(k pageKey, end uint64, render func() (readAt, next uint64, out []byte, err error)) (next uint64, out []byte, err error) {
	c.mu.Lock()
	p, ok := c.pages[k]
	if ok {
		select {
		case <-p.ready:
			ok = p.err == nil && p.readAt >= end
		default:
			// Still being read: wait for it, then look at its tail.
		}
	}
	if !ok {
		p = &sharedPage{ready: make(chan struct{})}
		c.replace(k, p)
		c.mu.Unlock()
		p.readAt, p.next, p.out, p.err = render()
		close(p.ready)
		c.mu.Lock()
		c.settle(k, p)
		c.mu.Unlock()
		return p.next, p.out, p.err
	}
	c.mu.Unlock()
	<-p.ready
	if p.err != nil || p.readAt < end {
		// Failed, or read before this reader's tail: read for itself.
		_, next, out, err := render()
		return next, out, err
	}
	return p.next, p.out, nil
}

// replace puts p in k's place. Called with mu held.
func (c *pageCache) replace(k pageKey, p *sharedPage) {
	if old, ok := c.pages[k]; ok {
		c.bytes -= int64(len(old.out))
	} else {
		c.order = append(c.order, k)
	}
	c.pages[k] = p
}

// settle accounts for p's rendering once read, drops it if it failed, and
// evicts the oldest pages over the bound. Called with mu held.
func (c *pageCache) settle(k pageKey, p *sharedPage) {
	if c.pages[k] != p {
		return // replaced meanwhile
	}
	if p.err != nil {
		delete(c.pages, k)
		return
	}
	c.bytes += int64(len(p.out))
	for c.bytes > c.limit && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		if q, ok := c.pages[old]; ok {
			select {
			case <-q.ready:
				c.bytes -= int64(len(q.out))
			default:
			}
			delete(c.pages, old)
		}
	}
	if len(c.order) > 2*len(c.pages)+64 {
		// Keys of replaced or dropped pages: compact.
		live := c.order[:0]
		for _, o := range c.order {
			if _, ok := c.pages[o]; ok {
				live = append(live, o)
			}
		}
		c.order = live
	}
}

// renderPage reads the page of name at from and renders it as kind.
func (h *Handler) renderPage(name string, from uint64, ct string, kind pageKind) (readAt, next uint64, out []byte, err error) {
	p, err := h.read(context.Background(), name, from)
	if err != nil {
		return 0, 0, nil, err
	}
	if len(p.records) == 0 {
		return p.readAt, p.next, nil, nil
	}
	out = body(ct, p.records)
	if kind == asSSEEvent {
		if !isText(ct) {
			enc := make([]byte, base64.StdEncoding.EncodedLen(len(out)))
			base64.StdEncoding.Encode(enc, out)
			out = enc
		}
		out = dataEvent(out)
	}
	return p.readAt, p.next, out, nil
}
