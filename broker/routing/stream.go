package routing

import (
	"net/http"
	"strings"

	"github.com/picomq/picomq/broker/node"
)

// serveStream routes the Durable Streams protocol's /v1/stream/{name}: a
// stream's reads, appends and closes are its one partition's owner's;
// creating and deleting it are metadata, served here.
func (rt *Router) serveStream(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.EscapedPath(), streamPrefix)
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		rt.cfg.Local.ServeHTTP(w, r) // PUT, DELETE, OPTIONS
		return
	}
	if node.ValidateName(name) != nil {
		rt.cfg.Local.ServeHTTP(w, r)
		return
	}
	e, err := rt.partitions(r.Context(), name)
	if err != nil || len(e.Partitions) != 1 {
		rt.cfg.Local.ServeHTTP(w, r) // answered there: not found, gone, several partitions
		return
	}
	rt.forward(w, r, e.Partitions[0], nil)
}
