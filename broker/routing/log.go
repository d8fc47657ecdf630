package routing

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// serveLog routes /v1/log/{name}[:op]. Committed offsets are metadata and
// served here; every other operation is its partition's owner's — a
// commit included: the offset it may name runs to the appends the owner
// acknowledged, which its journal holds before a checkpoint gives them to
// the metadata log, so the owner checkpoints and proposes it.
func (rt *Router) serveLog(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), wire.LogPrefix)
	name, op, _ := strings.Cut(rest, ":")
	switch {
	case node.ValidateName(name) != nil:
		// A bad name is refused there, as on one broker.
		rt.cfg.Local.ServeHTTP(w, r)
		return
	case op == wire.OpCommitted:
		rt.serveCaughtUp(w, r) // offsets from this broker's copy
		return
	}
	e, err := rt.partitions(r.Context(), name, rt.mayReadStale(r))
	if errors.Is(err, MetadataCatchingUp) {
		rt.fail(w, r, err)
		return
	}
	if err != nil {
		rt.cfg.Local.ServeHTTP(w, r) // not found, gone: answered there
		return
	}
	q := r.URL.Query()
	if op == "" && r.Method == http.MethodPost && !q.Has("partition") && len(e.Partitions) > 1 {
		rt.appendByKey(w, r, e)
		return
	}
	p, err := strconv.Atoi(q.Get("partition"))
	if !q.Has("partition") {
		p, err = 0, nil
	}
	if err == nil && p >= len(e.Partitions) && rt.cfg.Catchup != nil {
		// Partitions added through another broker a moment ago may not
		// be in this copy yet: look again once caught up.
		if cerr := rt.catchUp(r.Context()); cerr != nil {
			rt.fail(w, r, cerr)
			return
		}
		if e, err = rt.locate(name); err != nil {
			rt.cfg.Local.ServeHTTP(w, r)
			return
		}
	}
	if err != nil || p < 0 || p >= len(e.Partitions) {
		rt.cfg.Local.ServeHTTP(w, r) // refused there (UNKNOWN_PARTITION, a bad number)
		return
	}
	rt.forward(w, r, e.Partitions[p], nil)
}

// appendByKey routes an append that names no partition to a stream of
// several: the partition its keys choose, or the next in turn for an
// unkeyed batch — decided here, as the owner would, and named in the
// forwarded request.
func (rt *Router) appendByKey(w http.ResponseWriter, r *http.Request, e *node.Entry) {
	body, err := readBounded(r, rt.cfg.MaxBodyBytes)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	p := rt.partitionFor(r, e, body)
	q := r.URL.Query()
	q.Set("partition", strconv.Itoa(p))
	r.URL.RawQuery = q.Encode()
	rt.forward(w, r, e.Partitions[p], body)
}

// partitionFor is the partition of an append without one: its keys' (a
// raw body's key= or a batch's records), else the stream's next turn. A
// body that does not decode goes anywhere: its owner refuses it.
func (rt *Router) partitionFor(r *http.Request, e *node.Entry, body []byte) int {
	ct := strings.ToLower(strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0]))
	switch ct {
	case wire.RawContentType:
		if k := r.URL.Query().Get("key"); k != "" {
			return stream.PartitionOf([]byte(k), len(e.Partitions))
		}
	case wire.BatchContentType:
		return rt.partitionOfBatch(e, body)
	}
	return rt.turn(e.Name, len(e.Partitions))
}

// partitionOfBatch is the partition of a batch without one: its keys',
// else the stream's next turn.
func (rt *Router) partitionOfBatch(e *node.Entry, batch []byte) int {
	n := len(e.Partitions)
	if recs, err := wire.DecodeRecords(batch, maxRecordsToPlace); err == nil {
		if p, err := stream.CheckBatch(stream.PolicyValue{Partitions: n, MaxRecordBytes: e.Policy.MaxRecordBytes}, recs); err == nil && p >= 0 {
			return p
		}
	}
	return rt.turn(e.Name, n)
}

// maxRecordsToPlace bounds the records decoded to find a batch's keys (the
// owner applies the front end's own bound).
const maxRecordsToPlace = 1 << 20

// turn is the next round-robin partition of stream name.
func (rt *Router) turn(name string, n int) int {
	rt.rrMu.Lock()
	c, ok := rt.rr[name]
	if !ok {
		c = new(atomicCounter)
		rt.rr[name] = c
	}
	rt.rrMu.Unlock()
	return int((c.Add(1) - 1) % uint64(n))
}
