package routing

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// forward serves a request about internal stream id where its owner is:
// here, or proxied there, streaming the answer. body is the request's body
// when the router read it (nil: not read yet). A proxied request refused
// by its owner for the slot (it moved), or whose owner cannot be reached,
// is sent again to the owner looked up again, for up to ownerWait.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, id uint64, body []byte) {
	rt.forwardUntil(w, r, id, body, time.Time{})
}

// forwardUntil is forward; a write served here and refused because its
// slot left this broker meanwhile goes to the slot's owner looked up
// again (moved.go) — until ownerWait after the first such refusal (until,
// zero before one).
func (rt *Router) forwardUntil(w http.ResponseWriter, r *http.Request, id uint64, body []byte, until time.Time) {
	t, err := rt.awaitTarget(r.Context(), id)
	if err != nil {
		if rt.staleReadAllowed(r, err) {
			rt.metrics.local.Inc()
			w.Header().Set(StaleHeader, "true")
			rt.local(&staleWriter{ResponseWriter: w, rt: rt, r: r, refusal: err}, r, body)
			return
		}
		rt.fail(w, r, err)
		return
	}
	if t.addr == "" {
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		rerouted := !until.IsZero() && !time.Now().Before(until) // no more tries
		again := func() {
			if routed, _ := r.Context().Value(routedKey{}).(bool); routed {
				// Routed here by another broker's proxy: looking again
				// finds this broker for ever (targetOf), so the write would
				// wait out ownerWait here and be refused after all —
				// longer than a client waits. The proxy looks the owner up
				// again instead (421, see retrying).
				rt.fail(w, r, NotSlotOwner.With("slot", t.slot, "routed_to", rt.cfg.Self, "self", rt.cfg.Self, "reason", "the slot left this broker"))
				return
			}
			rt.metrics.rerouted.Inc()
			if until.IsZero() {
				until = time.Now().Add(ownerWait)
			} else {
				time.Sleep(50 * time.Millisecond) // the Lease cache to see the next holder
			}
			if body != nil {
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			rt.forwardUntil(w, r, id, body, until)
		}
		if write && body == nil && r.Body != nil && r.Body != http.NoBody {
			// Kept, so that it can go to the slot's next owner.
			if body, err = readBounded(r, rt.cfg.MaxBodyBytes); err != nil {
				rt.fail(w, r, err)
				return
			}
		}
		if rt.cfg.Fresh != nil {
			if err := rt.cfg.Fresh(r.Context(), id); err != nil {
				if write && !rerouted && rt.slotLeft(t.slot, err) {
					again()
					return
				}
				rt.fail(w, r, err)
				return
			}
		}
		rt.metrics.local.Inc()
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		if !write || rerouted {
			rt.cfg.Local.ServeHTTP(w, r)
			return
		}
		held := &refusalHold{w: w, header: http.Header{}}
		rt.cfg.Local.ServeHTTP(held, r)
		if held.refusal != nil && rt.slotLeft(t.slot, held.refusal) {
			again()
			return
		}
		held.release()
		return
	}
	client := r.Context()
	ctx, cancel := context.WithCancel(client)
	defer cancel()
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		// A stop ends the reads still streaming (long-polls, SSE: they
		// would hold it open); a write is left to finish, as the server's
		// shutdown lets a local one finish, or it would be answered
		// "outcome unknown" for nothing.
		stop := context.AfterFunc(rt.draining, cancel)
		defer stop()
	}
	r = r.WithContext(ctx)
	if body == nil && r.Body != nil && r.Body != http.NoBody {
		// Kept, so that the request can be sent again.
		if body, err = readBounded(r, rt.cfg.MaxBodyBytes); err != nil {
			rt.fail(w, r, err)
			return
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = rt.scheme
			pr.Out.URL.Host = t.addr
			pr.Out.Host = r.Host
			pr.Out.Header.Set(RouteHeader, t.member+";"+strconv.Itoa(t.slot))
		},
		Transport:     &retrying{rt: rt, id: id, first: t, body: body},
		FlushInterval: -1, // long-polls and SSE pass through as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rt.metrics.proxied.WithLabelValues("unreachable").Inc()
			if client.Err() != nil {
				return // the client went: nobody to answer
			}
			if rt.draining.Err() != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				// This broker is stopping and ended the proxied read:
				// an answer must say so, never an empty 200 a
				// long-poll reads as "nothing new". It goes again
				// elsewhere. (A write is not ended by the stop.)
				r = r.WithContext(client) // answered: the client still waits
				rt.fail(w, r, wire.NotReady.With("reason", "this broker is stopping", "slot", t.slot, "owner", t.member))
				return
			}
			var coded *errs.Error
			if errors.As(err, &coded) {
				rt.fail(w, r, err)
				return
			}
			rt.fail(w, r, OutcomeUnknown.Wrap(err, "slot", t.slot, "owner", t.member))
		},
	}
	rp.ServeHTTP(w, r)
}

// retrying sends a proxied request, and again while the owner refused it
// for the slot or could not be reached, to the owner looked up again —
// for up to ownerWait after the first refusal: a hand-off takes that long
// at most, and a failover often less.
type retrying struct {
	rt    *Router
	id    uint64
	first target
	body  []byte
}

func (x *retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	t := x.first
	var giveUp time.Time // set at the first refusal
	for {
		out := req.Clone(req.Context())
		out.URL.Host = t.addr
		out.Header.Set(RouteHeader, t.member+";"+strconv.Itoa(t.slot))
		if x.body != nil {
			out.Body = io.NopCloser(bytes.NewReader(x.body))
			out.ContentLength = int64(len(x.body))
		}
		resp, err := x.rt.rt.RoundTrip(out)
		moved := err == nil && resp.StatusCode == http.StatusMisdirectedRequest
		if err == nil && !moved {
			x.rt.metrics.proxied.WithLabelValues("ok").Inc()
			return resp, nil
		}
		if err != nil && !notSent(err) {
			// Sent, and no answer: it may have been served. Never again.
			x.rt.metrics.proxied.WithLabelValues("unknown").Inc()
			return nil, OutcomeUnknown.Wrap(err, "slot", t.slot, "owner", t.member)
		}
		// The owner refused it before serving it (it does not serve the
		// slot), or it never left: it may go again.
		if giveUp.IsZero() {
			giveUp = time.Now().Add(ownerWait)
		}
		if time.Now().After(giveUp) || req.Context().Err() != nil || (err != nil && x.body == nil && req.Body != nil && req.Body != http.NoBody) {
			if moved {
				x.rt.metrics.proxied.WithLabelValues("moved").Inc()
				return resp, nil
			}
			return nil, NoSlotOwner.Wrap(err, "slot", t.slot, "holder", t.member, "reason", "the holder could not be reached")
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		x.rt.metrics.retried.Inc()
		// The owner moved or went: give the Lease cache a moment to see
		// its new holder, then go there (or here) — or, after a moment,
		// to the same holder again (a hand-off it gave up, a take it had
		// not finished).
		var next target
	lookup:
		for {
			same := time.Now().Add(sameOwnerPause)
			for {
				next, err = x.rt.targetOf(req.Context(), x.id)
				if err == nil && (next != t || !time.Now().Before(same)) {
					break
				}
				if time.Now().After(giveUp) {
					if err == nil {
						err = NoSlotOwner.With("slot", t.slot, "holder", t.member, "reason", "the holder refused or could not be reached, and no other took the slot")
					}
					return nil, err
				}
				select {
				case <-req.Context().Done():
					return nil, req.Context().Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
			if next.addr != "" {
				break lookup
			}
			// The partition moved here meanwhile: serve it here.
			if x.rt.cfg.Fresh != nil {
				if err := x.rt.cfg.Fresh(req.Context(), x.id); err != nil {
					if !x.rt.slotLeft(next.slot, err) || time.Now().After(giveUp) {
						return nil, err
					}
					// Refused for a state of the slot that is past, or
					// gone again before it opened here: nothing was
					// written; the slot is looked up again.
					select {
					case <-req.Context().Done():
						return nil, req.Context().Err()
					case <-time.After(50 * time.Millisecond):
					}
					continue lookup
				}
			}
			x.rt.metrics.local.Inc()
			in := req.Clone(req.Context())
			in.Header.Del(RouteHeader)
			if x.body != nil {
				in.Body = io.NopCloser(bytes.NewReader(x.body))
			}
			return serveAsResponse(x.rt.cfg.Local, in), nil
		}
		t = next
	}
}

// serveAsResponse runs h on req and hands its answer back as a response
// whose body streams what h writes, as it writes it.
func serveAsResponse(h http.Handler, req *http.Request) *http.Response {
	pr, pw := io.Pipe()
	pw2 := &pipeResponse{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		h.ServeHTTP(pw2, req)
		pw2.WriteHeader(http.StatusOK) // a handler that wrote nothing
		pw.Close()
	}()
	<-pw2.ready
	return &http.Response{
		Status: strconv.Itoa(pw2.status) + " " + http.StatusText(pw2.status), StatusCode: pw2.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: pw2.sent, Body: pr, ContentLength: -1, Request: req,
	}
}

// pipeResponse is an http.ResponseWriter writing into a pipe.
type pipeResponse struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	ready  chan struct{}
	once   sync.Once
}

func (p *pipeResponse) Header() http.Header { return p.header }

func (p *pipeResponse) WriteHeader(code int) {
	p.once.Do(func() {
		p.status, p.sent = code, p.header.Clone()
		close(p.ready)
	})
}

func (p *pipeResponse) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.pw.Write(b)
}

// Flush is a no-op: every write is in the pipe already.
func (p *pipeResponse) Flush() {}

// staleReadAllowed reports a read this broker answers from its own copy:
// nobody serves the partition, and the cluster lost its quorum, so no
// owner can be (during an ordinary failover, or cut off alone, the read
// waits for the owner instead, so that no read goes back in time).
//
// Only a catch-up read qualifies: a long-poll (wait) or a live read (live)
// waits at the end, and this copy's end may be behind the cluster's.
func (rt *Router) staleReadAllowed(r *http.Request, err error) bool {
	return errors.Is(err, NoSlotOwner) && rt.mayReadStale(r)
}

// mayReadStale reports a request that, with no owner, may be answered
// from this broker's copy marked stale: a catch-up read while the quorum
// is lost, on a broker that caught up at least once since it started. One
// that never did (it restarted cut off) never vouched for its copy, and
// sees no other member only because it heard from none: it answers
// nothing from it.
func (rt *Router) mayReadStale(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if q := r.URL.Query(); q.Has("wait") || q.Has("live") {
		return false
	}
	return rt.cfg.QuorumLost != nil && rt.cfg.QuorumLost() && rt.everCaughtUp()
}

// staleWriter is the answer of a stale read: records this copy holds are
// committed and served, but no claim about where the stream ends — a
// refusal as past the end (409), or an "up to date" — since the cluster
// may have more. Such an answer becomes the refusal the read met.
type staleWriter struct {
	http.ResponseWriter
	rt      *Router
	r       *http.Request
	refusal error
	refused bool
}

// dsUpToDate is the Durable Streams header claiming the reader is at the
// end.
const dsUpToDate = "Stream-Up-To-Date"

func (s *staleWriter) WriteHeader(code int) {
	if code == http.StatusConflict {
		s.refused = true
		s.Header().Del(StaleHeader)
		s.rt.fail(s.ResponseWriter, s.r, s.refusal)
		return
	}
	s.Header().Del(dsUpToDate)
	s.ResponseWriter.WriteHeader(code)
}

func (s *staleWriter) Write(b []byte) (int, error) {
	if s.refused {
		return len(b), nil // the refusal is written already
	}
	s.Header().Del(dsUpToDate)
	return s.ResponseWriter.Write(b)
}

func (s *staleWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok && !s.refused {
		f.Flush()
	}
}

// notSent reports an error a request met before any of it was sent: the
// connection could not be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// readBounded reads a request's body, refusing one above limit.
func readBounded(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, wire.BodyTooLarge.With("maxBytes", limit, "contentLength", r.ContentLength)
	}
	// Sized by Content-Length (up to 1 MiB: a client announcing a large
	// body and sending it slowly does not get the whole buffer at once),
	// not grown from io.ReadAll's 512 bytes by copies.
	size := 512
	if r.ContentLength >= 0 {
		size = int(min(r.ContentLength, 1<<20))
	}
	// MinRead spare: ReadFrom grows a buffer with less room than that before
	// every read, the last one (which finds the end) included.
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1)); err != nil {
		return nil, err
	}
	body := buf.Bytes()
	if int64(len(body)) > limit {
		return nil, wire.BodyTooLarge.With("maxBytes", limit)
	}
	return body, nil
}
