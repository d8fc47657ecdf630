package replication

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/objstore"
)

// DefaultMaxObjectBytes bounds a copy received (HandlerConfig): above any
// group commit or segment the broker writes by default (8 MiB, 64 MiB), and
// above the largest frame (objstore.MaxPayload), so that a disk is not
// filled by one request.
const DefaultMaxObjectBytes = 2 << 30

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Store is this member's objects directory, where copies are written
	// and frames read from.
	Store *objstore.Store
	// Logger receives the handler's logs (default: discard).
	Logger *slog.Logger
	// MaxObjectBytes bounds a copy received (default DefaultMaxObjectBytes).
	MaxObjectBytes int64
	// Frames, when set, is asked for a whole frame (header included) of
	// an object Store has no file of: a member holds its peers' objects
	// in its journal until they become files (the ensemble data path).
	Frames func(id uint64, pos, n int64) ([]byte, bool)
	// Object, when set, is asked likewise for a whole object's bytes
	// (header and frames) Store has no file of.
	Object func(id uint64) ([]byte, bool)
}

// Handler is NewHandler with the defaults.
func Handler(store *objstore.Store, log *slog.Logger) http.Handler {
	return NewHandler(HandlerConfig{Store: store, Logger: log})
}

// NewHandler serves the peer side of replication under ObjectsPath:
// register it with peer.Server.Handle(ObjectsPath, h). It is made once, at
// start, before any copy arrives: it deletes the copies a crash left half
// received.
func NewHandler(cfg HandlerConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxObjectBytes <= 0 {
		cfg.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if err := cfg.Store.RemovePartialReplicas(); err != nil {
		cfg.Logger.Warn("cannot delete the replicas a crash left half received", "err", err)
	}
	h := &handler{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+ObjectsPath+"{id}", h.put)
	mux.HandleFunc("GET "+ObjectsPath+"{id}", h.object)
	mux.HandleFunc("GET "+ObjectsPath+"{id}/frame", h.frame)
	// Anything else under the prefix is refused coded too, as every answer
	// of the peer API is.
	mux.HandleFunc(ObjectsPath+"{id}", h.noRoute(http.MethodPut+", "+http.MethodGet))
	mux.HandleFunc(ObjectsPath+"{id}/frame", h.noRoute(http.MethodGet))
	mux.HandleFunc(ObjectsPath, h.noRoute(""))
	return mux
}

type handler struct{ cfg HandlerConfig }

func (h *handler) fail(w http.ResponseWriter, r *http.Request, coded *errs.Error) {
	frontend.WriteProblem(w, r, h.cfg.Logger, coded, errs.HTTPStatus(coded))
}

// noRoute refuses a request no route takes: 405 naming allow when the
// path is one of replication's, else 404.
func (h *handler) noRoute(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		coded := NoRoute.With("method", r.Method, "path", r.URL.Path)
		if allow == "" {
			frontend.WriteProblem(w, r, h.cfg.Logger, coded, http.StatusNotFound)
			return
		}
		w.Header().Set("Allow", allow)
		frontend.WriteProblem(w, r, h.cfg.Logger, coded, http.StatusMethodNotAllowed)
	}
}

// put receives a copy of an object and answers 204 once it is durable
// here: every frame checked, the file fdatasynced, its name fsynced.
func (h *handler) put(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(r.PathValue("id"))
	if !ok {
		h.fail(w, r, ReplicaID.With("id", r.PathValue("id"), "reason", "not an object id: 16 lower-case hex digits, not zero"))
		return
	}
	max := h.cfg.MaxObjectBytes
	if r.ContentLength > max {
		h.fail(w, r, ReplicaTooLarge.With("object", id, "size", r.ContentLength, "max", max))
		return
	}
	_, err := h.cfg.Store.WriteReplica(id, http.MaxBytesReader(w, r.Body, max))
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case frontend.Abandoned(r, err):
		// The sender gave up (its Sync failed): nobody reads an answer.
	case errors.As(err, &tooLarge):
		h.fail(w, r, ReplicaTooLarge.With("object", id, "max", max))
	case errors.Is(err, objstore.ErrCorrupt):
		h.fail(w, r, ReplicaRefused.With("object", id, "reason", err.Error()))
	case errors.Is(err, objstore.ErrReplicaID):
		h.fail(w, r, ReplicaID.With("id", r.PathValue("id"), "reason", "this member hands the id out itself, or holds it as a pool file or in memory"))
	case errors.Is(err, objstore.ErrReplicaConflict):
		h.fail(w, r, ReplicaConflict.With("object", id))
	case errors.Is(err, objstore.ErrInUse):
		h.fail(w, r, ReplicaBusy.With("object", id))
	default:
		if _, coded := errs.As(err); !coded && !errors.Is(err, objstore.ErrClosed) {
			// Not the store's failure: the body could not be read whole.
			h.fail(w, r, ReplicaRefused.With("object", id, "reason", err.Error()))
			return
		}
		h.fail(w, r, frontend.Coded(err, "replication.put"))
	}
}

// object serves this member's whole file of an object, for a copy made
// elsewhere (CopyBetween): the receiver checks every frame as it arrives.
func (h *handler) object(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(r.PathValue("id"))
	if !ok {
		h.fail(w, r, ReplicaID.With("id", r.PathValue("id"), "reason", "not an object id: 16 lower-case hex digits, not zero"))
		return
	}
	f, size, err := h.cfg.Store.OpenObject(id)
	if errors.Is(err, fs.ErrNotExist) && h.cfg.Object != nil {
		if raw, ok := h.cfg.Object(id); ok {
			hd := w.Header()
			hd.Set("Content-Type", "application/octet-stream")
			hd.Set("Content-Length", strconv.Itoa(len(raw)))
			hd.Set("Cache-Control", "no-store")
			_, _ = w.Write(raw)
			return
		}
		// Written to its file, and its journal segment dropped, between
		// the two looks: "not found" would be false (repair stops
		// naming a member that answers so).
		f, size, err = h.cfg.Store.OpenObject(id)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		h.fail(w, r, ReplicaNotFound.With("object", id))
		return
	case err != nil:
		h.fail(w, r, frontend.Coded(err, "replication.object"))
		return
	}
	defer f.Close()
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(size, 10))
	hd.Set("Cache-Control", "no-store")
	_, _ = io.CopyN(w, f, size)
}

// frame serves the frame of len bytes at pos, header included, once it
// checked here too: a copy that fails is REPLICA_CORRUPT, never served.
func (h *handler) frame(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(r.PathValue("id"))
	if !ok {
		h.fail(w, r, ReplicaID.With("id", r.PathValue("id"), "reason", "not an object id: 16 lower-case hex digits, not zero"))
		return
	}
	q := r.URL.Query()
	pos, perr := strconv.ParseInt(q.Get("pos"), 10, 64)
	n, nerr := strconv.ParseInt(q.Get("len"), 10, 64)
	if perr != nil || nerr != nil {
		h.fail(w, r, BadFrameRange.With("object", id, "pos", q.Get("pos"), "len", q.Get("len")))
		return
	}
	frame, err := h.cfg.Store.ReadFrameRaw(id, pos, n)
	if errors.Is(err, fs.ErrNotExist) && h.cfg.Frames != nil {
		if f, ok := h.cfg.Frames(id, pos, n); ok {
			frame, err = f, nil
		} else {
			frame, err = h.cfg.Store.ReadFrameRaw(id, pos, n) // made a file meanwhile, as in object
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrFrameSize):
		h.fail(w, r, BadFrameRange.With("object", id, "pos", pos, "len", n))
		return
	case errors.Is(err, fs.ErrNotExist):
		h.fail(w, r, ReplicaNotFound.With("object", id))
		return
	case errors.Is(err, objstore.ErrCorrupt):
		h.cfg.Logger.Error("this member's copy of an object failed its checksum; not serving it", "object", id, "pos", pos, "len", n, "err", err)
		h.fail(w, r, ReplicaCorrupt.With("object", id, "pos", pos))
		return
	default:
		h.fail(w, r, frontend.Coded(err, "replication.frame"))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.Itoa(len(frame)))
	hd.Set("Cache-Control", "no-store")
	_, _ = w.Write(frame)
}
