package routing

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// catchupWait bounds one catch-up with the metadata leader: a read index
// and the wait to apply up to it take milliseconds when a leader is in
// sight; past this the request is refused (METADATA_CATCHING_UP) and the
// client retries, rather than hang on a broker cut off.
const catchupWait = 2 * time.Second

// catchUp waits until this broker's copy of the metadata holds what the
// leader committed (Config.Catchup), and records the outcome: after a
// failure nothing is answered from the local copy until a catch-up
// succeeds (ready). Without Catchup (one broker) there is nothing to catch
// up with.
func (rt *Router) catchUp(ctx context.Context) error {
	if rt.cfg.Catchup == nil {
		return nil
	}
	rt.catchMu.Lock()
	rt.catchSeq++
	seq := rt.catchSeq
	rt.catchMu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, catchupWait)
	err := rt.cfg.Catchup(cctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		// The client went: that says nothing about this broker.
		return MetadataCatchingUp.Wrap(err, "reason", "the request ended before the catch-up did")
	}
	rt.catchMu.Lock()
	// Only the latest catch-up to start decides: an older one finishing
	// late says less about now.
	if seq > rt.settled {
		rt.settled, rt.behind = seq, err != nil
		if err == nil {
			rt.caughtUpOnce = true
		}
	}
	rt.catchMu.Unlock()
	if err != nil {
		rt.metrics.catchups.WithLabelValues("failed").Inc()
		return MetadataCatchingUp.Wrap(err)
	}
	rt.metrics.catchups.WithLabelValues("ok").Inc()
	return nil
}

// ready returns nil when this broker's copy may be used to route: no
// catch-up failed since the last one that succeeded, and one did succeed.
// Otherwise it catches up first (and fails with METADATA_CATCHING_UP).
func (rt *Router) ready(ctx context.Context) error {
	if rt.cfg.Catchup == nil {
		return nil
	}
	rt.catchMu.Lock()
	ok := rt.caughtUpOnce && !rt.behind
	rt.catchMu.Unlock()
	if ok {
		return nil
	}
	return rt.catchUp(ctx)
}

// everCaughtUp reports whether a catch-up succeeded since this broker
// started: a broker that restarted and never reached a leader holds a copy
// from before its death, which it never vouched for.
func (rt *Router) everCaughtUp() bool {
	if rt.cfg.Catchup == nil {
		return true
	}
	rt.catchMu.Lock()
	defer rt.catchMu.Unlock()
	return rt.caughtUpOnce
}

// serveCaughtUp serves a metadata answer from this broker's copy (a
// stream's description with its partitions' heads, a listing, a
// consumer group's offsets) once a catch-up made now succeeded: such an
// answer must hold every commit acknowledged before the request came.
func (rt *Router) serveCaughtUp(w http.ResponseWriter, r *http.Request) {
	if err := rt.catchUp(r.Context()); err != nil {
		rt.fail(w, r, err)
		return
	}
	rt.cfg.Local.ServeHTTP(w, r)
}

// serveReadyz adds to the broker's own readiness that its copy of the
// metadata was vouched for once since it started: a broker restarted (or
// joined) and not yet caught up with the leader refuses every routed
// request with METADATA_CATCHING_UP, so the Service must not send it any.
// The broker's own refusal (draining, removed, storage failed, no leader)
// comes first: it says more. The probe itself tries the catch-up. Only
// the first one gates: a later failure (the leader moving, a broker cut
// off) is the metadata log's to report, which the broker's own /readyz
// does, and gating on it would take every broker out of the Service at
// each election.
//
// The same holds for the broker's share of the slots (Config.Settled):
// until it has served it once, the others may not count it live yet, and
// a rolling restart that stopped the next broker then would leave too few
// live members for an ensemble.
func (rt *Router) serveReadyz(w http.ResponseWriter, r *http.Request) {
	settled := rt.cfg.Settled == nil || rt.cfg.Settled()
	if rt.everCaughtUp() && settled {
		rt.cfg.Local.ServeHTTP(w, r)
		return
	}
	own := &capture{header: http.Header{}, code: http.StatusOK}
	rt.cfg.Local.ServeHTTP(own, r)
	if own.code == http.StatusOK {
		if err := rt.ready(r.Context()); err != nil {
			rt.fail(w, r, wire.NotReady.Wrap(err, "reason", "not caught up with the metadata leader since start"))
			return
		}
		if !settled {
			rt.fail(w, r, wire.NotReady.With("reason", "not serving its share of the slots yet since start: the other brokers may not count it live"))
			return
		}
	}
	for k, v := range own.header {
		w.Header()[k] = v
	}
	w.WriteHeader(own.code)
	_, _ = w.Write(own.body.Bytes())
}

// capture holds a small answer (a probe's) to look at before sending it.
type capture struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (c *capture) Header() http.Header         { return c.header }
func (c *capture) WriteHeader(code int)        { c.code = code }
func (c *capture) Write(b []byte) (int, error) { return c.body.Write(b) }
