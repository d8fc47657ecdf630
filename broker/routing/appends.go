package routing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// serveAppends routes POST /v1/appends, the Go client's several appends in
// one request: the items are grouped by the broker that owns each one's
// partition, each group goes there as an appends request of its own (this
// broker's own group served here), and the answers are put back together
// in the request's order. An item whose group could not be delivered is
// answered "alone": the client sends it again on its own, which the router
// proxies with its retry.
func (rt *Router) serveAppends(w http.ResponseWriter, r *http.Request) {
	body, err := readBounded(r, rt.cfg.MaxBodyBytes)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	items, err := wire.DecodeAppends(body)
	if err != nil {
		rt.local(w, r, body) // refused there, whole
		return
	}
	groups := map[string]*group{} // by member ("" for the items served here as they are)
	order := []string{}
	refused := map[int]error{} // items whose slot nobody serves
	var behind error           // a catch-up failed: the items left are refused alike, without one each
	for i, it := range items {
		if behind != nil {
			refused[i] = behind
			continue
		}
		member, addr, p, err := rt.placeItem(r.Context(), it)
		if errors.Is(err, MetadataCatchingUp) {
			behind = err
		}
		if err != nil {
			refused[i] = err
			continue
		}
		g, ok := groups[member]
		if !ok {
			g = &group{member: member, addr: addr}
			groups[member] = g
			order = append(order, member)
		}
		g.index = append(g.index, i)
		g.partitions = append(g.partitions, p)
		g.size += wire.AppendItemSize(it.Name, p, it.Batch)
	}
	if len(order) == 1 && order[0] == "" && len(refused) == 0 {
		rec := &bufferedResponse{header: http.Header{}}
		rt.local(rec, r, body)
		// An answer with no item to turn Alone goes out as written, not
		// decoded and encoded again: a JSON one with no "error" key (a
		// string's quotes are escaped, so none holds it) has none.
		ct := rec.header.Get("Content-Type")
		var results []wire.AppendsItemResult
		var err error
		pass := rec.status != http.StatusOK ||
			!wire.AcceptsAppendsResult(ct) && !bytes.Contains(rec.body.Bytes(), []byte(`"error":`))
		if !pass {
			results, err = wire.DecodeAppendsAnswer(ct, rec.body.Bytes())
			pass = err != nil || rt.aloneIfMoved(results) == 0
		}
		if pass {
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		writeAppendsResult(w, r, results)
		return
	}
	// Each group's body in one allocation: grown item by item, its copies
	// cost a router 2% of its CPU under 1 KiB appends.
	for _, g := range groups {
		g.body = make([]byte, 0, g.size)
		for k, i := range g.index {
			g.body = wire.AppendItemTo(g.body, items[i].Name, g.partitions[k], items[i].Batch)
		}
	}
	out := make([]wire.AppendsItemResult, len(items))
	for i, err := range refused {
		if errors.Is(err, NoSlotOwner) && (rt.cfg.QuorumLost == nil || !rt.cfg.QuorumLost()) {
			// Between two owners (a hand-off): sent alone, it waits
			// for the next one, as a lone append does.
			out[i] = wire.AppendsItemResult{Alone: true}
			continue
		}
		out[i] = wire.AppendsItemResult{Error: rt.problem(err)}
	}
	var wg sync.WaitGroup
	for _, member := range order {
		g := groups[member]
		wg.Go(func() {
			res, failure := rt.sendGroup(r, g)
			for k, i := range g.index {
				switch {
				case failure == nil:
					out[i] = res[k]
				case failure == errNotDelivered:
					out[i] = wire.AppendsItemResult{Alone: true} // never served: the client sends it alone
				default:
					out[i] = wire.AppendsItemResult{Error: rt.problem(failure)}
				}
			}
		})
	}
	wg.Wait()
	rt.aloneIfMoved(out)
	writeAppendsResult(w, r, out)
}

// writeAppendsResult answers an appends request with its items' results:
// in binary to a client that accepts it, JSON to any other.
func writeAppendsResult(w http.ResponseWriter, r *http.Request, out []wire.AppendsItemResult) {
	var raw []byte
	ct := wire.JSONContentType
	if wire.AcceptsAppendsResult(r.Header.Get("Accept")) {
		raw, ct = wire.EncodeAppendsResult(nil, out), wire.AppendsResultContentType
	} else {
		raw, _ = json.Marshal(wire.AppendsResult{Results: out})
		raw = append(raw, '\n')
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(raw)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
}

// aloneIfMoved turns the items refused because their slot left the
// broker that served them (a hand-off began after the routing: nothing of
// them was written, see moved.go) into Alone, which the client sends again
// on its own — routed then with the wait for the next owner and the
// retries a lone append gets — and returns how many it turned.
func (rt *Router) aloneIfMoved(out []wire.AppendsItemResult) int {
	n := 0
	for i, res := range out {
		if res.Error == nil {
			continue
		}
		coded, err := errs.Unmarshal(res.Error)
		if err == nil && refusedForAMove(coded) {
			out[i] = wire.AppendsItemResult{Alone: true}
			rt.metrics.rerouted.Inc()
			n++
		}
	}
	return n
}

// group is the items of an appends request one broker owns.
type group struct {
	member, addr string // "" and "": this broker
	index        []int  // the items' places in the request
	partitions   []int  // each item's partition, decided here
	size         int    // their appends body's length
	body         []byte // their appends body, partitions decided
}

// placeItem decides where one item goes and its partition (-1 left to the
// owner when this broker cannot tell: refused there, as one broker does).
// An item whose slot nobody serves gets NO_SLOT_OWNER (answered Alone,
// unless the quorum is lost: sent on its own, it waits for the next
// owner), not the core's refusal of an open here.
func (rt *Router) placeItem(ctx context.Context, it wire.AppendItem) (member, addr string, partition int, err error) {
	e, err := rt.partitions(ctx, it.Name, false)
	if errors.Is(err, MetadataCatchingUp) {
		return "", "", it.Partition, err // the item alone is refused, never "not found" here
	}
	if err != nil {
		return "", "", it.Partition, nil
	}
	p := it.Partition
	if p < 0 {
		switch {
		case len(e.Partitions) == 1:
			p = 0
		default:
			p = rt.partitionOfBatch(e, it.Batch)
		}
	}
	if p >= len(e.Partitions) {
		return "", "", it.Partition, nil
	}
	t, err := rt.targetOf(ctx, e.Partitions[p]) // no wait: one per item would add up; a refused item is retried alone
	switch {
	case errors.Is(err, NoSlotOwner):
		return "", "", p, err
	case err != nil || t.addr == "":
		return "", "", p, nil // here: the core asks Ownership again at the open
	}
	return t.member, t.addr, p, nil
}

// errNotDelivered: a group that never reached its owner, or that its owner
// refused whole before serving any of it.
var errNotDelivered = errors.New("routing: the group was not delivered")

// sendGroup answers a group: served here, or sent to its owner. It fails
// with errNotDelivered when nothing of the group was served, and with
// OutcomeUnknown when the owner may have served it and its answer was lost.
func (rt *Router) sendGroup(r *http.Request, g *group) ([]wire.AppendsItemResult, error) {
	var status int
	var raw []byte
	var contentType string
	if g.member == "" {
		rec := &bufferedResponse{header: http.Header{}}
		sub := r.Clone(r.Context())
		sub.Body = io.NopCloser(bytes.NewReader(g.body))
		sub.ContentLength = int64(len(g.body))
		sub.Header.Set("Accept", wire.AppendsAccept)
		rt.cfg.Local.ServeHTTP(rec, sub)
		status, raw, contentType = rec.status, rec.body.Bytes(), rec.header.Get("Content-Type")
	} else {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, rt.scheme+"://"+g.addr+wire.AppendsPath, bytes.NewReader(g.body))
		if err != nil {
			return nil, errNotDelivered
		}
		req.Header.Set("Content-Type", wire.AppendsContentType)
		req.Header.Set("Accept", wire.AppendsAccept)
		req.Header.Set(RouteHeader, g.member+";-1")
		if a := r.Header.Get("Authorization"); a != "" {
			req.Header.Set("Authorization", a) // the owner checks the token again (see Config.TLS)
		}
		resp, err := rt.rt.RoundTrip(req)
		if err != nil {
			if notSent(err) {
				rt.metrics.proxied.WithLabelValues("unreachable").Inc()
				return nil, errNotDelivered
			}
			rt.metrics.proxied.WithLabelValues("unknown").Inc()
			return nil, OutcomeUnknown.Wrap(err, "owner", g.member)
		}
		defer resp.Body.Close()
		status, contentType = resp.StatusCode, resp.Header.Get("Content-Type")
		if raw, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20)); err != nil {
			rt.metrics.proxied.WithLabelValues("unknown").Inc()
			return nil, OutcomeUnknown.Wrap(err, "owner", g.member)
		}
		rt.metrics.proxied.WithLabelValues("ok").Inc()
	}
	if status != http.StatusOK {
		// An appends request is refused whole before any item is served
		// (a malformed body, a route to a broker that is not the member).
		return nil, errNotDelivered
	}
	results, err := wire.DecodeAppendsAnswer(contentType, raw)
	if err != nil || len(results) != len(g.index) {
		return nil, OutcomeUnknown.With("owner", g.member, "reason", "the owner's answer does not match its request")
	}
	return results, nil
}

// problem encodes err as an item's refusal.
func (rt *Router) problem(err error) []byte {
	body, merr := errs.Marshal(frontend.Coded(err, "routing.appends"))
	if merr != nil {
		body, _ = errs.Marshal(OutcomeUnknown.With("reason", "unencodable problem"))
	}
	return body
}

// local serves the request here, with its body as read.
func (rt *Router) local(w http.ResponseWriter, r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	rt.cfg.Local.ServeHTTP(w, r)
}

// bufferedResponse is an http.ResponseWriter kept in memory.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
