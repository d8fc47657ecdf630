package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
)

// copyTo sends object id — pieces, size bytes in all — to p and returns
// nil once p answered that its copy is durable (checked, fdatasynced, its
// name fsynced). It reads none of pieces after it returned.
func (r *Replication) copyTo(p Peer, id uint64, pieces [][]byte, size int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CopyTimeout)
	defer cancel()
	var (
		mu     sync.Mutex
		bodies []*body
	)
	open := func() *body {
		b := newBody(pieces)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		return b
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bodies {
			b.release()
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.cfg.Client.URL(p.Addr, objectPath(id)), open())
	if err != nil {
		return err
	}
	req.ContentLength = size
	// The transport may send a PUT again on a fresh connection when a
	// kept-alive one turns out closed: the receiver takes the same bytes
	// twice.
	req.GetBody = func() (io.ReadCloser, error) { return open(), nil }
	req.Header.Set("Content-Type", "application/octet-stream")

	start := time.Now()
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v: %w", r.cfg.CopyTimeout, err)
		}
		r.m.CopyFailures.WithLabelValues(copyReason(ctx, err)).Inc()
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		r.m.CopyFailures.WithLabelValues(reasonPeerError).Inc()
		return fmt.Errorf("replication: PUT %s: unexpected answer %s", objectPath(id), resp.Status)
	}
	r.m.Copies.Inc()
	r.m.CopyBytes.Add(float64(size))
	r.m.CopySeconds.Observe(time.Since(start).Seconds())
	return nil
}

// copyReason is the CopyFailures label of a failed copy.
func copyReason(ctx context.Context, err error) string {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return reasonTimeout
	}
	if coded, ok := errs.As(err); ok {
		if s := errs.HTTPStatus(coded); s >= 400 && s < 500 {
			return reasonRefused
		}
		return reasonPeerError
	}
	// The transport's own failures come as *url.Error; anything else is
	// an answer that was not a coded problem.
	var ue *url.Error
	if errors.As(err, &ue) {
		return reasonUnreachable
	}
	return reasonPeerError
}

// CopyBetween makes a copy of object id on member to from member from's
// file (a repair or a drain moving copies: the metadata leader relays the
// bytes), and returns nil once to answered that its copy is durable. to
// checks every frame as it arrives, so a bad copy at from is refused
// there, never spread. Both are members' configuration addresses of
// their peer ports.
func (r *Replication) CopyBetween(ctx context.Context, id uint64, from, to Peer) error {
	if r.cfg.Client == nil {
		return ReplicaUnavailable.With("object", id, "reason", "no peer client configured")
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CopyTimeout)
	defer cancel()
	get, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.Client.URL(from.Addr, objectPath(id)), nil)
	if err != nil {
		return err
	}
	src, err := r.cfg.Client.Do(get)
	if err != nil {
		return ReplicaUnavailable.Wrap(err, "object", id, "member", from.ID, "reason", "the source's copy could not be read")
	}
	defer src.Body.Close()
	if src.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(src.Body, 4<<10))
		return problemOrStatus(http.MethodGet, objectPath(id), src, data)
	}
	put, err := http.NewRequestWithContext(ctx, http.MethodPut, r.cfg.Client.URL(to.Addr, objectPath(id)), src.Body)
	if err != nil {
		return err
	}
	put.ContentLength = src.ContentLength
	put.Header.Set("Content-Type", "application/octet-stream")
	start := time.Now()
	resp, err := r.cfg.Client.Do(put)
	if err != nil {
		r.m.CopyFailures.WithLabelValues(copyReason(ctx, err)).Inc()
		return fmt.Errorf("replication: copy of %016x from %s to %s: %w", id, from.ID, to.ID, err)
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		r.m.CopyFailures.WithLabelValues(reasonPeerError).Inc()
		return problemOrStatus(http.MethodPut, objectPath(id), resp, data)
	}
	r.m.Copies.Inc()
	r.m.CopyBytes.Add(float64(src.ContentLength))
	r.m.CopySeconds.Observe(time.Since(start).Seconds())
	return nil
}

// problemOrStatus is a peer's refusal: its coded problem when it sent one,
// else the status it answered.
func problemOrStatus(method, path string, resp *http.Response, data []byte) error {
	if coded, err := errs.Unmarshal(data); err == nil && coded != nil {
		return coded
	}
	return fmt.Errorf("replication: %s %s: unexpected answer %s", method, path, resp.Status)
}
