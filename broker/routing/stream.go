package routing

import (
	"errors"
	"net/http"
	"strings"

	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
)

// serveStream routes the Durable Streams protocol's /v1/stream/{name}: a
// stream's reads, appends and closes are its one partition's owner's. So
// are creating it again and deleting it (serveMeta). A request about a
// stream that does not exist is metadata, served here.
func (rt *Router) serveStream(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.EscapedPath(), streamPrefix)
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	case http.MethodPut, http.MethodDelete:
		about := name
		if src, ok := wire.ForkSource(r.Header.Get(wire.ForkedFromHeader)); ok && r.Method == http.MethodPut {
			about = src
		}
		rt.serveMeta(w, r, about, true)
		return
	default:
		rt.cfg.Local.ServeHTTP(w, r) // OPTIONS
		return
	}
	if node.ValidateName(name) != nil {
		rt.cfg.Local.ServeHTTP(w, r)
		return
	}
	e, err := rt.partitions(r.Context(), name, rt.mayReadStale(r))
	if errors.Is(err, MetadataCatchingUp) {
		rt.fail(w, r, err)
		return
	}
	if err != nil || len(e.Partitions) != 1 {
		rt.cfg.Local.ServeHTTP(w, r) // answered there: not found, gone, several partitions
		return
	}
	rt.forward(w, r, e.Partitions[0], nil)
}

// serveMeta routes a request that creates, changes or deletes a stream —
// the protocol's PUT (a fork included) and DELETE, the admin API's PUT,
// PATCH and DELETE — to the owner of the stream about (the source, for a
// fork) when that stream exists, and serves it here otherwise. Its owner
// alone knows whether a sliding TTL ran out: another broker's view of the
// accesses it served trails, and would delete a live stream to create it
// anew. First this broker catches up with what the leader committed, so
// that it decides on the same state as a single broker would (a fork must
// see the source's last append, acknowledged by another broker a moment
// ago). The protocol's streams have one partition (onePartition: others
// are refused here, as by one broker); an admin stream's partitions share
// one owner.
func (rt *Router) serveMeta(w http.ResponseWriter, r *http.Request, about string, onePartition bool) {
	// The owner catches up too: the broker that routed the request here
	// may have applied commands it has not (the source's creation, made
	// through a third broker). Not caught up: refused, never decided on a
	// copy that may miss the stream (a create answered "exists" with an
	// old configuration, a fork from an old tail).
	if err := rt.catchUp(r.Context()); err != nil {
		rt.fail(w, r, err)
		return
	}
	if routed, _ := r.Context().Value(routedKey{}).(bool); routed {
		rt.cfg.Local.ServeHTTP(w, r)
		return
	}
	if node.ValidateName(about) != nil {
		rt.cfg.Local.ServeHTTP(w, r)
		return
	}
	e, err := rt.locate(about)
	if err != nil || len(e.Partitions) == 0 || (onePartition && len(e.Partitions) != 1) {
		rt.cfg.Local.ServeHTTP(w, r)
		return
	}
	t, err := rt.awaitTarget(r.Context(), e.Partitions[0])
	switch {
	case err != nil:
		rt.fail(w, r, err) // nobody serves it now: retry shortly
	case t.addr == "":
		rt.cfg.Local.ServeHTTP(w, r) // its owner is this broker
	default:
		rt.forward(w, r, e.Partitions[0], nil)
	}
}
