package httpapi

import (
	"context"
	"net/http"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// Drainer is a clustered broker's drain, behind wire.DrainPath: the
// cluster's side (cmd/broker) implements it; a lone broker has none.
type Drainer interface {
	// StartDrain makes this broker stop taking slots and hand off those it
	// holds and, unless o.Stay, leave the cluster once its copies of
	// objects moved; asked again it changes nothing. A refusal (a coded
	// error) leaves the broker as it was.
	StartDrain(ctx context.Context, o wire.DrainOptions) error
	// CancelDrain makes it a full member again: it takes its share of the
	// slots again.
	CancelDrain(ctx context.Context) error
	// DrainStatus is where the drain stands.
	DrainStatus() wire.DrainStatus
}

// serveDrain serves wire.DrainPath: POST starts the drain and answers its
// progress, GET answers the progress, DELETE cancels it and answers the
// state after. Without a Drainer (a lone broker) every method answers 501
// NOT_CLUSTERED, which the operator reads as "not supported".
func (s *Server) serveDrain(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodPost, http.MethodDelete:
	default:
		s.notAllowed(w, r, "GET, POST, DELETE")
		return
	}
	d := s.opts.Drain
	if d == nil {
		s.fail(w, r, wire.NotClustered.With("path", r.URL.Path, "reason", "a lone broker owns every stream and has no peer to hand them to"))
		return
	}
	switch r.Method {
	case http.MethodPost:
		// The body is optional: wire.DrainOptions as JSON (the operator
		// sends "{}": a drain to leave).
		var opts wire.DrainOptions
		if err := s.decodeJSON(w, r, &opts); err != nil {
			s.fail(w, r, err)
			return
		}
		if err := d.StartDrain(r.Context(), opts); err != nil {
			s.fail(w, r, err)
			return
		}
	case http.MethodDelete:
		if err := d.CancelDrain(r.Context()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	s.writeJSON(w, http.StatusOK, d.DrainStatus())
}
