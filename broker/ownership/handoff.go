package ownership

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

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
			m.observeOwnLocked(got, cur.ResourceVersion, m.clk.Now())
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
	m.observeOwnLocked(got, l.ResourceVersion, m.clk.Now())
	m.mu.Unlock()
}
