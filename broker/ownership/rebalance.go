package ownership

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// rebalance moves this broker toward its fair share: it hands off the
// slots it holds beyond it, serves again the ones it keeps, finishes the
// hand-offs whose holder is still to clear, and takes free or expired
// slots up to it. It also notes when an expiry may change its decisions.
func (m *Manager) rebalance(ctx context.Context) {
	start := m.clk.Now()
	m.mu.Lock()
	live := m.liveLocked(start)
	target := 0
	if !m.draining {
		target = targetShare(m.cfg.Identity, live, m.cfg.Slots)
	}
	m.target, m.live = target, live
	var active, letGo []int
	for s, h := range m.held {
		if h.letGo {
			letGo = append(letGo, s)
		} else {
			active = append(active, s)
		}
	}
	// Extras: hand-offs already begun first (so the choice does not flip
	// between periods), then slots not served, then the rendezvous order.
	slices.Sort(active)
	orderToRelease(m.cfg.Identity, live, active)
	slices.SortStableFunc(active, func(a, b int) int { return m.releaseClassLocked(a) - m.releaseClassLocked(b) })
	m.mu.Unlock()

	var release, keep []int
	if extra := len(active) - target; extra > 0 {
		release, keep = active[:extra], active[extra:]
	} else {
		keep = active
	}
	slices.Sort(keep)
	for _, s := range keep {
		m.resume(ctx, s)
	}
	for _, s := range release {
		if m.clk.Since(start) >= m.cfg.RetryPeriod {
			break // the rest next period: renewals must not wait on hand-offs
		}
		m.handOff(ctx, s)
	}
	slices.Sort(letGo)
	for _, s := range letGo {
		m.clear(ctx, s)
	}
	m.take(ctx, start, live, target-len(keep))
	m.expire(m.clk.Now()) // an Acquire that returned past the deadline
}

// releaseClassLocked orders held slots for hand-off: 0 being handed off,
// 1 not served, 2 served.
func (m *Manager) releaseClassLocked(s int) int {
	h := m.held[s]
	switch {
	case h.handing:
		return 0
	case !h.serving:
		return 1
	}
	return 2
}

// resume serves again a held slot it keeps: a hand-off begun and no longer
// needed is called off (the streams it did not close stay open), and a
// slot not served (just taken, Acquire failed, or renewed again after its
// deadline passed) is acquired.
func (m *Manager) resume(ctx context.Context, s int) {
	now := m.clk.Now()
	m.mu.Lock()
	h := m.held[s]
	if h == nil || (h.serving && !h.handing) || !now.Before(h.deadline) {
		m.mu.Unlock()
		return
	}
	if h.handing && !h.quiesced {
		h.handing, h.serving = false, true
		m.mu.Unlock()
		m.log.Info("hand-off called off", "slot", s)
		return
	}
	h.handing = false
	m.mu.Unlock()
	m.serve(ctx, s)
}

// serve calls Acquire and, once it returns nil, serves the slot until its
// renew deadline. From then on a loss calls Revoke.
func (m *Manager) serve(ctx context.Context, s int) {
	if m.cfg.Acquire != nil {
		actx, cancel := m.ioContext(ctx)
		err := m.cfg.Acquire(actx, s)
		cancel()
		if err != nil {
			m.log.Warn("Acquire failed: slot held, not served; tried again next period", "slot", s, "err", err)
			return
		}
	}
	now := m.clk.Now()
	m.mu.Lock()
	if h := m.held[s]; h != nil {
		h.quiesced = false
		h.serving = now.Before(h.deadline)
	}
	m.mu.Unlock()
}

// handOff lets a slot go gracefully: stop admitting opens, Release (the
// broker closes the slot's open streams through the log), then clear the
// holder. A Release that fails leaves the slot held and not served, to
// finish (or call off) next period.
func (m *Manager) handOff(ctx context.Context, s int) {
	m.mu.Lock()
	h := m.held[s]
	if h == nil {
		m.mu.Unlock()
		return
	}
	h.serving, h.handing = false, true
	quiesced := h.quiesced
	m.mu.Unlock()
	if !quiesced {
		rctx, cancel := m.ioContext(ctx)
		err := m.cfg.Release(rctx, s)
		cancel()
		if err != nil {
			m.log.Warn("Release failed: slot kept, not served; tried again next period", "slot", s, "err", err)
			return
		}
	}
	m.mu.Lock()
	if h := m.held[s]; h != nil {
		h.handing, h.quiesced, h.letGo = false, true, true
	}
	m.mu.Unlock()
	m.clear(ctx, s)
}

// clear writes the holder of a slot let go away, conditionally on our last
// write. If the Lease changed meanwhile and still names us it is cleared
// from what it is now; if it names another, that one took it after it
// expired, and the slot is simply forgotten.
func (m *Manager) clear(ctx context.Context, s int) {
	m.mu.Lock()
	h := m.held[s]
	if h == nil || !h.letGo {
		m.mu.Unlock()
		return
	}
	cur := h.lease
	m.mu.Unlock()
	ctx, cancel := m.ioContext(ctx)
	defer cancel()
	for range 2 {
		got, err := m.leases.Update(ctx, m.cleared(cur, m.clk.Now()), metav1.UpdateOptions{})
		if err == nil {
			m.mu.Lock()
			delete(m.held, s)
			m.observeLocked(got, m.clk.Now())
			m.mu.Unlock()
			m.met.handoffs.WithLabelValues(eventReleased).Inc()
			m.log.Info("slot handed off", "slot", s)
			return
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			m.noteErr(err)
			m.log.Warn("clearing a slot's holder failed; tried again next period", "slot", s, "err", err)
			return
		}
		latest, gerr := m.leases.Get(ctx, cur.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) || (gerr == nil && holderOf(latest) != m.cfg.Identity) {
			// Gone, or taken by another after it expired: let go all the same.
			m.mu.Lock()
			delete(m.held, s)
			m.mu.Unlock()
			m.met.handoffs.WithLabelValues(eventReleased).Inc()
			return
		}
		if gerr != nil {
			m.noteErr(gerr)
			return
		}
		cur = latest
		m.mu.Lock()
		h.lease = latest
		m.mu.Unlock()
	}
}

// cleared returns a copy of l with no holder.
func (m *Manager) cleared(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	n := l.DeepCopy()
	n.Spec.HolderIdentity = nil
	n.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	return n
}

// take takes up to need slots from the cache that are free, expired by
// this broker's observation, or still name this broker from before a
// restart, in the order this broker ranks highest for; slots that still
// name it beyond its need are cleared, since nothing of them is served. It
// sets nextPass to when an expiry may next change a decision.
func (m *Manager) take(ctx context.Context, start time.Time, live []string, need int) {
	now := m.clk.Now()
	var cands, orphans []int
	bases := map[int]*coordinationv1.Lease{}
	m.mu.Lock()
	var next time.Time
	for s, l := range m.slots {
		if l == nil || m.held[s] != nil {
			continue
		}
		holder := holderOf(l)
		switch {
		case holder == m.cfg.Identity:
			orphans = append(orphans, s)
		case holder == "" || m.expiredLocked(l, now):
			cands = append(cands, s)
		default:
			if at := m.expiresLocked(l); need > 0 && (next.IsZero() || at.Before(next)) {
				next = at
			}
			continue
		}
		bases[s] = l
	}
	if at := m.nextMemberChangeLocked(now); !at.IsZero() && (next.IsZero() || at.Before(next)) {
		next = at
	}
	m.nextPass = next
	m.mu.Unlock()

	// Our own come first: they need no expiry and nobody else may take them.
	orderToTake(m.cfg.Identity, live, orphans)
	orderToTake(m.cfg.Identity, live, cands)
	for _, s := range append(orphans, cands...) {
		if need <= 0 {
			break
		}
		if m.clk.Since(start) >= m.cfg.RetryPeriod {
			return
		}
		if m.takeOne(ctx, s, bases[s]) {
			need--
		}
	}
	for _, s := range orphans {
		m.mu.Lock()
		mine := m.held[s] != nil
		m.mu.Unlock()
		if !mine {
			m.clearOrphan(ctx, bases[s])
		}
	}
}

// takeOne takes slot s from base, its Lease as the cache shows it, with a
// conditional update; a Conflict means another broker got there first (or
// the cache was behind), and the slot is left. A slot taken is served once
// Acquire returns.
func (m *Manager) takeOne(ctx context.Context, s int, base *coordinationv1.Lease) bool {
	ctx, cancel := m.ioContext(ctx)
	defer cancel()
	sent := m.clk.Now()
	n := m.renewed(base, sent)
	if holderOf(base) != m.cfg.Identity {
		n.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(sent))
		n.Spec.LeaseTransitions = ptr.To(ptr.Deref(base.Spec.LeaseTransitions, 0) + 1)
	}
	got, err := m.leases.Update(ctx, n, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		// Another broker won, or our cache is behind (a stalled watch would
		// make every Lease look expired): learn the Lease as it is, so the
		// next decision starts its expiry from now instead of failing again.
		if latest, gerr := m.leases.Get(ctx, base.Name, metav1.GetOptions{}); gerr == nil {
			m.mu.Lock()
			m.observeLocked(latest, m.clk.Now())
			m.mu.Unlock()
		}
		return false
	case apierrors.IsNotFound(err):
		m.forgetLease(base.Name)
		return false
	case err != nil:
		m.noteErr(err)
		m.log.Warn("taking a slot failed", "slot", s, "err", err)
		return false
	}
	m.mu.Lock()
	m.held[s] = &heldSlot{lease: got, sent: sent, deadline: sent.Add(m.cfg.RenewDeadline), quiesced: true}
	m.observeLocked(got, sent)
	m.mu.Unlock()
	m.met.handoffs.WithLabelValues(eventTaken).Inc()
	m.log.Info("slot taken", "slot", s, "from", holderOf(base))
	m.serve(ctx, s)
	return true
}

// clearOrphan clears the holder of a slot that names this broker but that
// it does not hold (a previous run of the same identity held it): nothing
// of it is served here, so no Release is owed.
func (m *Manager) clearOrphan(ctx context.Context, l *coordinationv1.Lease) {
	ctx, cancel := m.ioContext(ctx)
	defer cancel()
	got, err := m.leases.Update(ctx, m.cleared(l, m.clk.Now()), metav1.UpdateOptions{})
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			m.noteErr(err)
		}
		return
	}
	m.mu.Lock()
	m.observeLocked(got, m.clk.Now())
	m.mu.Unlock()
}
