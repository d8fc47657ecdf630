package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/objstore"
)

// Fetcher reads frames of objects this member holds no file of from the
// members that do (core.Config.Fetcher).
type Fetcher struct{ r *Replication }

// Fetcher returns the member's fetcher.
func (r *Replication) Fetcher() *Fetcher { return &Fetcher{r: r} }

// FetchFrame returns the payload of the frame of n bytes at pos in object,
// from the first of replicas (this member left out) that gives one whose
// length and CRC check here — never bytes it could not check. Replicas are
// tried in rendezvous order, so that every reader of an object asks the
// same member first and finds its pages cached. Nothing is cached here
// (the core caches frames).
//
// When none gives a good frame: if any replica was down (not a live
// member), unreachable or failing, REPLICA_UNAVAILABLE (retriable: a good
// copy may be where it could not look); else, if any replica's bytes
// failed the check, objstore.ErrCorrupt; else (every replica said it holds
// no copy: collected) an error wrapping fs.ErrNotExist.
func (f *Fetcher) FetchFrame(object uint64, replicas []string, pos, n int64) ([]byte, error) {
	if pos < objstore.HeaderSize || n <= objstore.FrameHeaderSize || n > objstore.FrameHeaderSize+objstore.MaxPayload {
		return nil, fmt.Errorf("replication: frame of %d bytes at %d in object %016x: %w", n, pos, object, objstore.ErrFrameSize)
	}
	r := f.r
	if r.cfg.Client == nil {
		return nil, ReplicaUnavailable.With("object", object, "reason", "no peer client configured")
	}
	addrs := map[string]string{}
	for _, p := range r.peers() {
		addrs[p.ID] = p.Addr
	}
	var others []string
	seen := map[string]bool{}
	for _, id := range replicas {
		if id != r.cfg.Self && id != "" && !seen[id] {
			seen[id] = true
			others = append(others, id)
		}
	}
	var unavailable, corrupt, missing []error
	ranked := Rank(object, others)
	for _, id := range ranked {
		addr, live := addrs[id]
		if !live {
			r.m.FetchFailures.WithLabelValues(reasonDown).Inc()
			unavailable = append(unavailable, fmt.Errorf("%s: not a live member", id))
			continue
		}
		frame, err := f.fetchOne(addr, object, pos, n)
		if err == nil {
			var payload []byte
			if payload, err = objstore.CheckFrame(object, pos, frame); err == nil {
				r.m.Fetches.Inc()
				return payload, nil
			}
		}
		err = fmt.Errorf("%s: %w", id, err)
		switch {
		case errors.Is(err, objstore.ErrCorrupt):
			r.m.FetchFailures.WithLabelValues(reasonCorrupt).Inc()
			r.cfg.Logger.Error("a replica's frame failed its check; trying the next replica", "object", object, "pos", pos, "member", id, "err", err)
			corrupt = append(corrupt, err)
		case errors.Is(err, ReplicaNotFound):
			r.m.FetchFailures.WithLabelValues(reasonNotFound).Inc()
			missing = append(missing, err)
		default:
			r.m.FetchFailures.WithLabelValues(fetchReason(err)).Inc()
			unavailable = append(unavailable, err)
		}
	}
	switch {
	case len(unavailable) > 0:
		return nil, ReplicaUnavailable.Wrap(errors.Join(unavailable...), "object", object, "replicas", strings.Join(ranked, ","),
			"reason", fmt.Sprintf("%d of %d replicas unavailable, %d corrupt, %d without a copy", len(unavailable), len(ranked), len(corrupt), len(missing)))
	case len(corrupt) > 0:
		return nil, fmt.Errorf("replication: object %016x at %d: no replica gave a frame that checks: %w", object, pos, errors.Join(corrupt...))
	default:
		return nil, fmt.Errorf("replication: object %016x: no replica holds it (%s): %w", object, strings.Join(ranked, ","), errors.Join(append(missing, fs.ErrNotExist)...))
	}
}

// fetchOne GETs the raw frame from the member at addr. A replica whose own
// copy failed its check answers REPLICA_CORRUPT, returned as ErrCorrupt
// too; a body of another length than n is ErrCorrupt.
func (f *Fetcher) fetchOne(addr string, object uint64, pos, n int64) ([]byte, error) {
	r := f.r
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.Client.URL(addr, framePath(object, pos, n)), nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(err, ReplicaCorrupt) {
			return nil, errors.Join(err, &objstore.CorruptError{ID: object, Pos: pos, Reason: "the replica's own copy failed its check"})
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("replication: GET %s: unexpected answer %s", framePath(object, pos, n), resp.Status)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != n {
		return nil, &objstore.CorruptError{ID: object, Pos: pos, Reason: fmt.Sprintf("the replica sent %d bytes for a frame of %d", resp.ContentLength, n)}
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return nil, err // cut off on the way: the replica is not to blame
	}
	return buf, nil
}

// fetchReason is the FetchFailures label of a replica that could not be
// asked or answered otherwise than with bytes.
func fetchReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return reasonTimeout
	}
	if _, ok := errs.As(err); ok {
		return reasonPeerError
	}
	return reasonUnreachable
}
