package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

const (
	// DefaultAppendsInFlight is how many append requests a Client has out
	// at once before further small appends queue to leave together. One:
	// the appends that queue while it is out then share the next request,
	// and the broker puts a request's appends in one object (64 writers on
	// one stream: ~29 appends per object and ~16k appends/s, against ~15
	// and ~13k with 4 out).
	DefaultAppendsInFlight = 1
	// slowRequest is how long a shared request holds its slot. An append
	// may wait long at the broker (for room under MaxBytes, up to its
	// BlockTimeout); past this, the request's slot goes to the appends
	// queued behind it, which must not wait for it.
	slowRequest = 50 * time.Millisecond
	// coalesceMaxBatch is the largest encoded append that may share a
	// request. A larger one is worth its own: its request's cost is small
	// beside its bytes, and sharing would only make it wait for a slot
	// (batches of 100 x 1 KiB ran ~15% slower shared).
	coalesceMaxBatch = 16 << 10
	// coalesceMaxBody bounds one shared request, well under the broker's
	// default 16 MiB body limit.
	coalesceMaxBody = 4 << 20
)

// WithAppendsInFlight sets how many append requests the client keeps out at
// once (default DefaultAppendsInFlight). While that many are out, small
// appends from other goroutines queue and are sent together in the next
// request, each still its own atomic append with its own answer: under
// concurrency the requests per append fall, with no added wait when idle
// (an append finding a free slot is sent at once). n <= 0 sends every
// append as its own request.
func WithAppendsInFlight(n int) Option {
	return func(c *Client) { c.appendsInFlight = n }
}

// coalescer queues small appends and sends them in shared requests.
type coalescer struct {
	c   *Client
	max int

	mu       sync.Mutex
	queue    []*queuedAppend
	inflight int

	// off is set when the broker has no /v1/appends route (an older
	// broker): from then on every append goes alone.
	off atomic.Bool
}

type queuedAppend struct {
	name      string
	partition int
	batch     []byte
	done      chan appendAnswer // buffered: the sender never blocks on it
}

type appendAnswer struct {
	res wire.AppendResult
	err error
}

// errSendAlone answers a queued append that must be sent on its own.
var errSendAlone = errors.New("send alone")

// append sends one append, shared with whatever else is queued, and
// returns its answer. ok is false when the caller must send it itself.
func (q *coalescer) append(ctx context.Context, name string, partition int, batch []byte) (wire.AppendResult, bool, error) {
	if q.off.Load() || len(batch) > coalesceMaxBatch {
		return wire.AppendResult{}, false, nil
	}
	a := &queuedAppend{name: name, partition: partition, batch: batch, done: make(chan appendAnswer, 1)}
	q.mu.Lock()
	q.queue = append(q.queue, a)
	var send []*queuedAppend
	if q.inflight < q.max {
		q.inflight++
		send = q.takeLocked()
	}
	q.mu.Unlock()
	if send != nil {
		// The slot is this caller's: it sends the request itself (no
		// goroutine to hand it to and wake it back up from: a lone
		// append's latency), and leaves what queued meanwhile to one.
		q.sendThenHandOn(send)
	}
	select {
	case ans := <-a.done:
		if ans.err == errSendAlone {
			return wire.AppendResult{}, false, nil
		}
		return ans.res, true, ans.err
	case <-ctx.Done():
		q.mu.Lock()
		for i, b := range q.queue {
			if b == a { // not sent yet: it never will be
				q.queue = append(q.queue[:i], q.queue[i+1:]...)
				break
			}
		}
		q.mu.Unlock()
		// Sent already, its outcome is unknown, as for any request whose
		// caller gave up.
		return wire.AppendResult{}, true, context.Cause(ctx)
	}
}

// takeLocked removes up to one request's worth of queued appends.
func (q *coalescer) takeLocked() []*queuedAppend {
	size, n := 0, 0
	for n < len(q.queue) && n < wire.MaxAppendsPerRequest {
		size += len(q.queue[n].batch) + len(q.queue[n].name) + 16
		if n > 0 && size > coalesceMaxBody {
			break
		}
		n++
	}
	out := append([]*queuedAppend(nil), q.queue[:n]...)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	return out
}

// run sends batches until the queue is empty, then frees its slot (or
// ends when a slow request handed the slot on).
func (q *coalescer) run(batch []*queuedAppend) {
	for len(batch) > 0 {
		var kept bool
		if batch, kept = q.sendOne(batch); !kept {
			return
		}
	}
}

// sendThenHandOn sends batch on the caller's goroutine, then has the
// appends that queued meanwhile sent by a goroutine of their own (run), or
// frees the slot.
func (q *coalescer) sendThenHandOn(batch []*queuedAppend) {
	if next, kept := q.sendOne(batch); kept && len(next) > 0 {
		go q.run(next)
	}
}

// sendOne sends batch and returns the next request's appends, having freed
// the slot when none wait. A request out longer than slowRequest hands the
// slot on to the appends queued behind it, which must not wait for it:
// kept is then false and the slot is no longer the caller's.
func (q *coalescer) sendOne(batch []*queuedAppend) (next []*queuedAppend, kept bool) {
	handedOn := time.AfterFunc(slowRequest, func() {
		if next := q.nextOrFree(); len(next) > 0 {
			go q.run(next)
		}
	})
	q.send(batch)
	if !handedOn.Stop() {
		return nil, false
	}
	return q.nextOrFree(), true
}

// nextOrFree takes the next request's appends for the slot's holder, or,
// when none wait, frees the slot.
func (q *coalescer) nextOrFree() []*queuedAppend {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := q.takeLocked()
	if len(next) == 0 {
		q.inflight--
	}
	return next
}

// send makes one request of batch and answers each append in it. The
// request is not tied to any one caller's context: it carries others'.
func (q *coalescer) send(batch []*queuedAppend) {
	n := 0
	for _, a := range batch {
		n += len(a.name) + len(a.batch) + 16
	}
	body := make([]byte, 0, n)
	for _, a := range batch {
		body = wire.AppendItemTo(body, a.name, a.partition, a.batch)
	}
	resp, err := q.c.do(context.Background(), request{
		op: "appends", method: http.MethodPost, path: wire.AppendsPath,
		body: body, contentType: wire.AppendsContentType,
		// Binary answers where the broker has them (JSON otherwise).
		accept: wire.AppendsAccept + ", " + wire.ProblemContentType,
	})
	switch {
	case errors.Is(err, wire.RouteNotFound) || errors.Is(err, wire.MethodNotAllowed) || errors.Is(err, wire.UnsupportedMediaType):
		// A broker without the route: send every append alone from now on.
		q.off.Store(true)
		fallthrough
	case errors.Is(err, wire.BodyTooLarge) && len(batch) > 1:
		// The broker's body limit is below what was shared, not below any
		// one append: each goes alone and meets the limit on its own.
		for _, a := range batch {
			a.done <- appendAnswer{err: errSendAlone}
		}
		return
	}
	var out wire.AppendsResult
	if err == nil {
		if out.Results, err = wire.DecodeAppendsAnswer(resp.header.Get("Content-Type"), resp.body); err != nil {
			err = stream.StreamBackendFailed.Wrap(err, "op", "http.appends.decode")
		}
	}
	if err == nil && len(out.Results) != len(batch) {
		err = stream.StreamBackendFailed.With("op", "http.appends.decode", "reason", "answer count differs", "sent", len(batch), "answered", len(out.Results))
	}
	for i, a := range batch {
		switch {
		case err != nil:
			a.done <- appendAnswer{err: err}
		case out.Results[i].Alone:
			// It would have waited for room, holding the others: it goes
			// on its own.
			a.done <- appendAnswer{err: errSendAlone}
		case out.Results[i].Error != nil:
			e, uerr := errs.Unmarshal(out.Results[i].Error)
			if uerr != nil {
				e = stream.StreamBackendFailed.Wrap(uerr, "op", "http.appends.decode")
			}
			a.done <- appendAnswer{err: e}
		case out.Results[i].AppendResult == nil:
			a.done <- appendAnswer{err: stream.StreamBackendFailed.With("op", "http.appends.decode", "reason", "item has neither result nor error", "index", i)}
		default:
			a.done <- appendAnswer{res: *out.Results[i].AppendResult}
		}
	}
}
