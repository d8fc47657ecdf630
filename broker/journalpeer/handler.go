package journalpeer

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/stream"
)

// Path is the API's prefix: register the handler with
// peer.Server.Handle(Path, h).
const Path = "/v1/peer/journal/"

// DefaultMaxObjectBytes bounds a body received: the journal's largest
// object (512 MiB) and its wire header.
const DefaultMaxObjectBytes = 512<<20 + 1<<20

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Journal is this member's.
	Journal *journal.Journal
	// Logger receives the handler's logs (default: discard).
	Logger *slog.Logger
	// MaxObjectBytes bounds a body received (default
	// DefaultMaxObjectBytes).
	MaxObjectBytes int64
}

// NewHandler serves the journal's peer API under Path.
func NewHandler(cfg HandlerConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxObjectBytes <= 0 {
		cfg.MaxObjectBytes = DefaultMaxObjectBytes
	}
	h := &handler{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path+"objects", h.append)
	mux.HandleFunc("GET "+Path+"objects/{id}", h.read)
	mux.HandleFunc("POST "+Path+"fences/{stream}/{epoch}", h.fence)
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, NoRoute.With("method", r.Method, "path", r.URL.Path))
	})
	return mux
}

type handler struct{ cfg HandlerConfig }

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	coded, ok := errs.As(err)
	if !ok {
		coded = stream.StreamBackendFailed.Wrap(err, "op", "journalpeer"+r.URL.Path)
	}
	frontend.WriteProblem(w, r, h.cfg.Logger, coded, errs.HTTPStatus(coded))
}

// append makes the object durable in this member's journal and answers
// 204 once an fdatasync covers it.
func (h *handler) append(w http.ResponseWriter, r *http.Request) {
	max := h.cfg.MaxObjectBytes
	if r.ContentLength > max {
		h.fail(w, r, TooLarge.With("bytes", r.ContentLength, "max", max))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		h.fail(w, r, TooLarge.With("bytes", tooLarge.Limit+1, "max", max))
		return
	case err != nil:
		if !frontend.Abandoned(r, err) {
			h.fail(w, r, BadObject.With("reason", "body not read whole: "+err.Error(), "bytes", len(body)))
		}
		return
	}
	o, err := DecodeObject(body)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.cfg.Journal.Append(o); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fence raises the stream's fence and answers its refs once durable.
func (h *handler) fence(w http.ResponseWriter, r *http.Request) {
	st, err1 := strconv.ParseUint(r.PathValue("stream"), 10, 64)
	epoch, err2 := strconv.ParseInt(r.PathValue("epoch"), 10, 64)
	switch {
	case err1 != nil:
		h.fail(w, r, BadRequest.With("field", "stream", "value", r.PathValue("stream")))
		return
	case err2 != nil || epoch < 0:
		h.fail(w, r, BadRequest.With("field", "epoch", "value", r.PathValue("epoch")))
		return
	}
	refs, err := h.cfg.Journal.Fence(st, epoch)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeBody(w, EncodeRefs(refs))
}

// read answers an object this member's journal holds.
func (h *handler) read(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		h.fail(w, r, BadRequest.With("field", "id", "value", r.PathValue("id")))
		return
	}
	parts, payload, err := h.cfg.Journal.Read(id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// A copy and its original are the same object (parts and payload):
	// what it was written on the authority of is the writer's business.
	writeBody(w, EncodeObject(journal.Object{ID: id, Parts: parts, Payload: payload}))
}

func writeBody(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
