// Package routing lets any broker of a cluster serve any request: a request
// about a partition goes to the broker that owns the partition's slot —
// served here when that is this broker, proxied to the owner otherwise,
// long-polls and SSE streamed as they come. The owner refuses a request
// routed to it for a slot it does not serve (NOT_SLOT_OWNER); the proxy
// then looks the owner up again and tries once more; a slot with no live
// owner answers 503 with Retry-After. Requests that need no owner — the
// admin API, metadata such as consumer-group offsets — are served here, the
// metadata log forwarding their commands to its leader.
//
// It sits in front of the broker's HTTP handlers and knows their URLs, not
// their insides: the front ends stay single-node code.
package routing

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
)

// RouteHeader marks a proxied request with the member and slot it was
// routed to: "<member>;<slot>". A broker never proxies such a request
// again; it serves it, or refuses it when it does not serve that slot.
const RouteHeader = "Picomq-Route"

// StaleHeader marks an answer served from this broker's own copy while the
// cluster had no quorum: it may miss the last commits.
const StaleHeader = "Picomq-Stale"

// Prefix of the Durable Streams protocol's URLs (broker/dsapi.Prefix).
const streamPrefix = "/v1/stream/"

// Config configures a Router.
type Config struct {
	// Self is this broker's member id; Local serves what this broker owns.
	Self  string
	Local http.Handler
	// Broker is this broker, for the streams' partitions and policies.
	Broker node.Broker
	// Locate, when set, finds a stream's Name, Partitions and Policy (all
	// a route is decided by) whatever its lifetime says
	// (core.Broker.Locate): its owner judges a sliding TTL, from accesses
	// this broker's view of may trail. Default: Broker.Get.
	Locate func(name string) (*node.Entry, error)
	// SlotOf maps an internal stream to its slot; Owner says who holds a
	// slot and whether its lease is live; Serving whether this broker
	// serves a slot now.
	SlotOf  func(id uint64) int
	Owner   func(slot int) (member string, live bool)
	Serving func(slot int) bool
	// Address is a member's client API address (host:port).
	Address func(member string) (string, bool)
	// Fresh, when set, prepares this broker to serve internal stream id:
	// a cluster member opens the partition (core.OpenForServing) before it
	// answers its reads, so that its state holds all that was committed.
	Fresh func(ctx context.Context, id uint64) error
	// QuorumLost, when set, says whether the cluster has lost its quorum
	// as this broker sees it: no metadata leader in sight, and no other
	// member renewing its Lease. Then, for a partition no live owner
	// serves, a read is answered from this broker's own copy, marked with
	// StaleHeader: committed data stays readable, though it may miss the
	// last commits. (A broker cut off alone sees the others renewing, and
	// answers no stale read.)
	QuorumLost func() bool
	// Settled, when set, gates readiness (/readyz) until it has returned
	// true once: the ownership manager's Settled, this broker serving its
	// share of the slots since it started.
	Settled func() bool
	// Catchup, when set, waits until this broker's state has what the
	// leader committed: a stream just created through another broker may
	// not have reached it yet. Once one failed, nothing is answered from
	// this broker's copy (METADATA_CATCHING_UP) until one succeeds; a
	// metadata answer (a stream's heads, a listing, offsets, "not found")
	// needs one made for it.
	Catchup func(ctx context.Context) error
	// MaxBodyBytes bounds a body the router reads (to decide a partition
	// from the keys, or to send a request again): the front ends' limit.
	MaxBodyBytes int64
	// Transport sends proxied requests (default: a transport of its own).
	Transport http.RoundTripper
	// TLS, when set, is how this broker reaches the other brokers' client
	// ports, which then serve HTTPS: proxied requests go as https, the
	// owner verified against TLS.RootCAs (the default transport's; a
	// Transport given is used as it is).
	//
	// A proxied request carries the client's Authorization header, and the
	// owner checks the token again: the owner trusts no broker to have
	// authenticated for it, so a request reaching a client port straight
	// (or through a broker that serves no token check) is refused exactly
	// as it would be here. Every broker mounts the same tokens.
	TLS     *tls.Config
	Logger  *slog.Logger
	Metrics prometheus.Registerer
}

// Router is the routing front of one broker. It is an http.Handler.
type Router struct {
	cfg     Config
	log     *slog.Logger
	rt      http.RoundTripper
	scheme  string // of other brokers' client ports: http, or https with TLS
	metrics *metrics

	rrMu sync.Mutex
	rr   map[string]*atomicCounter // round-robin cursor of unkeyed appends, per stream

	// draining ends when Drain is called: proxied reads still streaming
	// (long-polls, SSE) end with it.
	draining context.Context
	drain    context.CancelFunc

	// The catch-ups' outcome (catchup.go): behind after a failed one,
	// until one that started later succeeds.
	catchMu      sync.Mutex
	catchSeq     uint64 // catch-ups started
	settled      uint64 // the latest one whose outcome is recorded
	behind       bool
	caughtUpOnce bool
}

// New returns the router of cfg.
func New(cfg Config) *Router {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = frontend.DefaultMaxBodyBytes
	}
	rt := cfg.Transport
	if rt == nil {
		rt = &http.Transport{
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       time.Minute,
			ResponseHeaderTimeout: 0, // long-polls and SSE answer late
			TLSClientConfig:       cfg.TLS,
		}
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	draining, drain := context.WithCancel(context.Background())
	return &Router{cfg: cfg, log: cfg.Logger, rt: rt, scheme: scheme, metrics: newMetrics(cfg.Metrics), rr: map[string]*atomicCounter{}, draining: draining, drain: drain}
}

// Drain ends every proxied read still in flight (a shutdown): a long-poll
// or SSE stream from another broker would otherwise hold this one open.
// Proxied writes are left to finish.
func (rt *Router) Drain() { rt.drain() }

// routedKey marks a request routed here by another broker's proxy, its
// slot checked: it is served here, never proxied again.
type routedKey struct{}

// ServeHTTP routes a request.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if v := r.Header.Get(RouteHeader); v != "" {
		if !rt.acceptRouted(w, r, v) {
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), routedKey{}, true))
	}
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, wire.LogPrefix):
		rt.serveLog(w, r)
	case path == wire.AppendsPath && r.Method == http.MethodPost:
		rt.serveAppends(w, r)
	case strings.HasPrefix(path, streamPrefix):
		rt.serveStream(w, r)
	case strings.HasPrefix(path, wire.StreamsPrefix) && (r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodDelete):
		// Creating (or opening) an existing stream, changing its policy,
		// deleting it: its owner's, who judges its lifetime.
		rt.serveMeta(w, r, strings.TrimPrefix(r.URL.EscapedPath(), wire.StreamsPrefix), false)
	case (strings.HasPrefix(path, wire.StreamsPrefix) || path == wire.StreamsPath) && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		// A stream's description (its partitions' heads, its producers)
		// and the listing come from this broker's copy of the metadata:
		// served once caught up with the leader, so that they hold every
		// append acknowledged before, and a stream created through another
		// broker a moment ago is never "not found".
		rt.serveCaughtUp(w, r)
	case path == "/readyz":
		rt.serveReadyz(w, r)
	default:
		rt.cfg.Local.ServeHTTP(w, r) // admin, probes, metrics: this broker's
	}
}

// acceptRouted checks a request a proxy routed here: it is refused (and
// false returned) when this broker does not serve the slot it was routed
// for.
func (rt *Router) acceptRouted(w http.ResponseWriter, r *http.Request, route string) bool {
	member, slotText, _ := strings.Cut(route, ";")
	slot, err := strconv.Atoi(slotText)
	// Slot -1 routes a group of appends of several slots to their owner:
	// its core refuses, per append, an open of a slot it does not hold.
	// Nothing else is ever routed so: a client sending it on another
	// route (member ids are in /v1/admin/node) would otherwise have a
	// broker serve a stream's metadata change it does not own.
	groupOfAppends := slot == -1 && r.URL.Path == wire.AppendsPath && r.Method == http.MethodPost
	if err != nil || member != rt.cfg.Self || (slot < 0 && !groupOfAppends) || (slot >= 0 && !rt.cfg.Serving(slot)) {
		owner, _ := rt.cfg.Owner(slot)
		rt.fail(w, r, NotSlotOwner.With("slot", slot, "routed_to", member, "self", rt.cfg.Self, "owner", owner))
		return false
	}
	return true
}

// target is where a request about internal stream id goes: here, or the
// owner's address.
type target struct {
	slot   int
	member string
	addr   string // "" when here
}

// targetOf finds who serves internal stream id now: here, for a request
// routed here (its slot checked already).
func (rt *Router) targetOf(ctx context.Context, id uint64) (target, error) {
	slot := rt.cfg.SlotOf(id)
	if routed, _ := ctx.Value(routedKey{}).(bool); routed {
		return target{slot: slot, member: rt.cfg.Self}, nil
	}
	member, live := rt.cfg.Owner(slot)
	t := target{slot: slot, member: member}
	switch {
	case member == rt.cfg.Self && rt.cfg.Serving(slot):
		return t, nil
	case member == rt.cfg.Self, !live || member == "":
		return t, NoSlotOwner.With("slot", slot, "holder", member, "live", live)
	}
	addr, ok := rt.cfg.Address(member)
	if !ok {
		return t, NoSlotOwner.With("slot", slot, "holder", member, "reason", "no client address known for the holder")
	}
	t.addr = addr
	return t, nil
}

// ownerWait bounds how long a request waits for its slot's next owner: a
// hand-off (a rebalance, a drain, a broker stopping) takes well under it,
// and a client would rather wait that long than retry; a holder that died
// is only replaced when its Lease runs out, longer than a request should
// hang, so the client gets NO_SLOT_OWNER (retry shortly) then.
const ownerWait = 4 * time.Second

// sameOwnerPause is how long a refused request waits before it goes to
// the same holder again, when no other has appeared.
const sameOwnerPause = 250 * time.Millisecond

// awaitTarget is targetOf, waiting up to ownerWait while the slot is
// between owners (NO_SLOT_OWNER), unless the cluster lost its quorum (no
// owner can come: a catch-up read is answered from this copy at once).
func (rt *Router) awaitTarget(ctx context.Context, id uint64) (target, error) {
	t, err := rt.targetOf(ctx, id)
	if !errors.Is(err, NoSlotOwner) || (rt.cfg.QuorumLost != nil && rt.cfg.QuorumLost()) {
		return t, err
	}
	deadline := time.Now().Add(ownerWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return t, err
		case <-time.After(50 * time.Millisecond):
		}
		next, nerr := rt.targetOf(ctx, id)
		if !errors.Is(nerr, NoSlotOwner) {
			rt.metrics.waited.WithLabelValues("found").Inc()
			return next, nerr
		}
		t, err = next, nerr
	}
	rt.metrics.waited.WithLabelValues("none").Inc()
	return t, err
}

// partitions returns a stream's internal stream ids, looking again after
// catching up with the leader when this broker does not know the stream.
// After a failed catch-up this broker's copy is not used until one
// succeeds: it fails with METADATA_CATCHING_UP, which the caller answers
// (never a "not found" from a copy that may miss the stream).
//
// The one exception is a read that may be answered marked stale (staleOK:
// see staleReadAllowed): with the quorum lost no catch-up can succeed, and
// committed data stays readable, its answer saying it may miss the last
// commits.
func (rt *Router) partitions(ctx context.Context, name string, staleOK bool) (*node.Entry, error) {
	if err := rt.ready(ctx); err != nil {
		if staleOK {
			if e, lerr := rt.locate(name); lerr == nil {
				return e, nil
			}
		}
		return nil, err
	}
	e, err := rt.locate(name)
	if err == nil || rt.cfg.Catchup == nil || !errors.Is(err, node.StreamNotFound) {
		return e, err
	}
	if err := rt.catchUp(ctx); err != nil {
		return nil, err
	}
	return rt.locate(name)
}

// locate finds a stream's entry for routing (Config.Locate).
func (rt *Router) locate(name string) (*node.Entry, error) {
	if rt.cfg.Locate != nil {
		return rt.cfg.Locate(name)
	}
	return rt.cfg.Broker.Get(name)
}

func (rt *Router) fail(w http.ResponseWriter, r *http.Request, err error) {
	if frontend.Abandoned(r, err) {
		return
	}
	coded := frontend.Coded(err, "routing")
	frontend.WriteProblem(w, r, rt.log, coded, errs.HTTPStatus(coded))
}

type atomicCounter = atomic.Uint64
