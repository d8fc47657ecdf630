package ownership

import (
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// Manager is one broker's lease manager: it holds, renews, hands off and
// takes the cluster's slot Leases, and answers the broker core whether it
// may open a stream (MayOpen). Its decisions run on one goroutine, Run's;
// its queries may be called from any.
type Manager struct {
	cfg    Config
	clk    clock.Clock
	log    *slog.Logger
	met    *metrics
	leases typedcoordinationv1.LeaseInterface

	// source lists the cluster's Leases as the informer's cache holds them.
	// Run sets it; the deterministic tests set their own.
	source func() ([]*coordinationv1.Lease, error)
	// poke wakes Run's loop early: a slot came free, the members changed,
	// or SetDraining was called.
	poke    chan struct{}
	running atomic.Bool
	// settled: since it started, this broker has served its fair share
	// once (Settled).
	settled atomic.Bool

	// memberMu serializes writes of the member Lease: the loop's renewals
	// and SetDraining's.
	memberMu sync.Mutex
	member   *coordinationv1.Lease // our last write of it, base of the next update

	mu   sync.Mutex
	seen map[string]observation // Lease name -> the last change this broker saw
	// alive: identity -> when this broker last saw a member Lease change
	// naming it, by its clock: the slots an identity holds expire
	// LeaseDuration after the later of this and their own Lease's change.
	alive map[string]time.Time
	// gone: identities whose member Lease was fenced since they last
	// named themselves in it; their slots may be taken at once.
	gone map[string]bool
	// fenced: a write of our member Lease found it no longer ours (another
	// broker fenced it, another incarnation wrote it, or it was deleted):
	// nothing held may be served again before its slot Lease is written.
	fenced bool
	// apiFailing: our last write of the member Lease could not reach the
	// API server (what a failsafe answer confirms). promised: the
	// holders whose failsafe rounds this broker confirmed (failsafe.go).
	apiFailing bool
	// writingSince: when the renewal of the member Lease under way was
	// sent (zero: none is).
	writingSince time.Time
	promised     map[string]promise
	// failsafeSince: when this broker began serving on failsafe rounds
	// (zero: it is not); failsafeRoundsConfirmed counts them since.
	failsafeSince           time.Time
	failsafeRoundsConfirmed int
	slots                   []*coordinationv1.Lease          // slot -> its Lease as last seen (nil: none seen)
	members                 map[string]*coordinationv1.Lease // node -> its member Lease as last seen
	held                    map[int]*heldSlot
	draining                bool
	leaving                 bool // drains to leave the cluster (SetLeaving)
	target                  int
	live                    []string // identities counted for fair shares, sorted
	synced                  bool     // source has answered once
	lastOK                  time.Time
	lastErr                 error
	errAt                   time.Time

	// Loop-only state.
	nextTick time.Time // when the next period's work is due
	nextPass time.Time // when an expiry may change a decision (zero: none expected)
	roundAt  time.Time // when a failsafe round not confirmed goes again (zero: none due)
	poked    bool
}

// heldSlot is what this broker knows of a slot whose Lease names it.
type heldSlot struct {
	lease    *coordinationv1.Lease // our last write, base of the next conditional update
	sent     time.Time             // when the last successful renew (or the take) was sent
	deadline time.Time             // sent + RenewDeadline: serving ends here
	serving  bool                  // MayOpen allows (until deadline)
	// quiesced: nothing of the slot may be written by this broker: it was
	// never acquired, or Release returned nil, or Revoke was called. While
	// it is false, losing the slot calls Revoke.
	quiesced bool
	// rewrite: the slot's deadline passed, or our member Lease was fenced:
	// member renewals no longer extend it; only a write of its slot Lease
	// (conditional on ours, so it fails if another broker took it) does.
	rewrite bool
	handing bool // a hand-off began (serving stopped); Release has not returned nil yet
	letGo   bool // Release returned nil (or nothing was open); the holder is still to clear
}

// observation is the last change of a Lease this broker saw: its
// resourceVersion, and this broker's clock when it first saw it. Expiry is
// measured from at, never from the Lease's renewTime.
type observation struct {
	rv string
	at time.Time
	// older: the versions this one replaced, newest last, so that a
	// source behind (a cache that has not seen our own write yet) is not
	// taken for a change back.
	older []string
}

// New validates cfg and returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	met, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log = log.With("component", "ownership", "identity", cfg.Identity)
	return &Manager{
		cfg:      cfg,
		clk:      clk,
		log:      log,
		met:      met,
		leases:   cfg.Client.CoordinationV1().Leases(cfg.Namespace),
		poke:     make(chan struct{}, 1),
		seen:     map[string]observation{},
		alive:    map[string]time.Time{},
		gone:     map[string]bool{},
		promised: map[string]promise{},
		slots:    make([]*coordinationv1.Lease, cfg.Slots),
		members:  map[string]*coordinationv1.Lease{},
		held:     map[int]*heldSlot{},
	}, nil
}

// SlotOf returns the slot internal stream id hashes onto: id % Slots, or
// PlaceBy(id) % Slots.
func (m *Manager) SlotOf(id uint64) int {
	if m.cfg.PlaceBy != nil {
		id = m.cfg.PlaceBy(id)
	}
	return int(id % uint64(m.cfg.Slots))
}

// MayOpen returns nil if and only if this broker holds and serves slot(id)
// now; otherwise a NotSlotOwner carrying the slot, the reason and, when
// known, the owner. It implements the broker core's Ownership.
func (m *Manager) MayOpen(id uint64) error {
	slot := m.SlotOf(id)
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.held[slot]
	if h != nil && h.serving && now.Before(h.deadline) {
		return nil
	}
	var reason string
	switch {
	case h == nil:
		reason = "not held"
	case h.handing || h.letGo:
		reason = "handing off"
	case !now.Before(h.deadline):
		reason = "renew deadline passed"
	default:
		reason = "taking"
	}
	kv := []any{"slot", slot, "reason", reason}
	if owner, live := m.cachedOwnerLocked(slot, now); owner != "" && owner != m.cfg.Identity {
		kv = append(kv, "owner", owner, "ownerLive", live)
	}
	return NotSlotOwner.With(kv...)
}

// Serving reports whether this broker serves slot now: it holds its Lease,
// Acquire returned, no hand-off began, and the renew deadline has not
// passed.
func (m *Manager) Serving(slot int) bool {
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.held[slot]
	return h != nil && h.serving && now.Before(h.deadline)
}

// Owner returns who holds slot as this broker knows it, and whether that
// holding is live: for a slot this broker holds, whether it serves it; for
// another's, whether its Lease has changed within LeaseDuration of this
// broker's clock. "" when nobody holds it (or slot is out of range).
func (m *Manager) Owner(slot int) (identity string, live bool) {
	if slot < 0 || slot >= m.cfg.Slots {
		return "", false
	}
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.held[slot]; h != nil && !h.letGo {
		return m.cfg.Identity, h.serving && now.Before(h.deadline)
	}
	return m.cachedOwnerLocked(slot, now)
}

// cachedOwnerLocked reads slot's holder from the cache.
func (m *Manager) cachedOwnerLocked(slot int, now time.Time) (string, bool) {
	l := m.slots[slot]
	holder := holderOf(l)
	if holder == "" {
		return "", false
	}
	return holder, !m.slotExpiredLocked(l, now)
}

// Held returns the slots whose Leases name this broker, sorted: served, or
// being handed off.
func (m *Manager) Held() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heldLocked()
}

func (m *Manager) heldLocked() []int {
	out := make([]int, 0, len(m.held))
	for s := range m.held {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// signal wakes the loop without blocking.
func (m *Manager) signal() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}
