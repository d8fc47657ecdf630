package ownership

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

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
