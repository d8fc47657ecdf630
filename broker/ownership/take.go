package ownership

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
		case holder == "" || m.slotExpiredLocked(l, now):
			cands = append(cands, s)
		default:
			if at := m.slotExpiresLocked(l); need > 0 && (next.IsZero() || at.Before(next)) {
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
	fenced := map[string]bool{} // holders whose member Lease no longer names them
	for _, s := range append(orphans, cands...) {
		if need <= 0 {
			break
		}
		if m.clk.Since(start) >= m.cfg.RetryPeriod {
			return
		}
		if h := holderOf(bases[s]); h != "" && h != m.cfg.Identity {
			ok, done := fenced[h]
			if !done {
				ok = m.fence(ctx, h)
				fenced[h] = ok
			}
			if !ok {
				continue
			}
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
		m.relearn(ctx, base.Name)
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
	m.observeOwnLocked(got, base.ResourceVersion, sent)
	m.mu.Unlock()
	m.met.handoffs.WithLabelValues(eventTaken).Inc()
	m.log.Info("slot taken", "slot", s, "from", holderOf(base))
	m.serve(ctx, s)
	return true
}

// fence makes sure holder, whose slots this broker is about to take, can
// no longer keep them by renewing its member Lease. It reads the member
// Leases from the API server, not the cache: a cache that lags could miss
// the Lease that names the holder. One that names it is written naming
// nobody, conditionally on the version this broker saw unchanged for
// LeaseDuration; a renewal that got there first makes the write fail, and
// the holder is live after all. A holder no member Lease names (another
// incarnation wrote it, it was deleted, fenced already, or not written
// yet) cannot extend its slots by a renewal — its next write of the member
// Lease would not continue a version naming it, which makes it write each
// slot's Lease again first (writeMemberLocked), and that conflicts with
// this broker's take — but may have renewed just before: its slots are
// taken LeaseDuration after this broker saw the change.
func (m *Manager) fence(ctx context.Context, holder string) bool {
	ctx, cancel := m.ioContext(ctx)
	defer cancel()
	sel := labels.SelectorFromSet(leaseLabels(m.cfg.Cluster, RoleMember)).String()
	list, err := m.leases.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		m.noteErr(err)
		m.log.Warn("reading the member Leases before a take failed", "member", holder, "err", err)
		return false
	}
	now := m.clk.Now()
	var l *coordinationv1.Lease
	m.mu.Lock()
	for i := range list.Items {
		// A version new to us makes its holder, or the one it no longer
		// names, live from now.
		item := &list.Items[i]
		m.observeLocked(item, now)
		if holderOf(item) == holder {
			l = item
		}
	}
	var expired bool
	switch {
	case l != nil:
		expired = m.expiredLocked(l, now)
	case m.gone[holder]:
		expired = true // fenced already (by us, or another taker)
	default:
		// Its Lease names another (or is gone) since a change this broker
		// has seen for LeaseDuration: any renewal of the holder's came
		// before, and the next would find the Lease not its own.
		expired = !now.Before(m.alive[holder].Add(m.cfg.LeaseDuration))
	}
	if m.promiseHoldsLocked(holder, now) {
		expired = false // we confirmed its failsafe round: not ours to take yet
	}
	m.mu.Unlock()
	if l == nil || !expired {
		return expired // renewed since the slot looked expired: not ours to take
	}
	n := l.DeepCopy()
	n.Spec.HolderIdentity = nil
	got, err := m.leases.Update(ctx, n, metav1.UpdateOptions{})
	switch {
	case err == nil:
		m.mu.Lock()
		m.observeOwnLocked(got, l.ResourceVersion, m.clk.Now())
		m.mu.Unlock()
		m.met.fences.Inc()
		m.log.Info("member Lease fenced: its slots are taken", "member", holder)
		return true
	case apierrors.IsConflict(err):
		m.relearn(ctx, l.Name)
		return false
	case apierrors.IsNotFound(err):
		m.forgetLease(l.Name)
		return true
	}
	m.noteErr(err)
	m.log.Warn("fencing a member Lease failed", "member", holder, "err", err)
	return false
}

// relearn reads Lease name from the API server after a write of it
// conflicted, and observes it as it is.
func (m *Manager) relearn(ctx context.Context, name string) {
	if latest, err := m.leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
		m.mu.Lock()
		m.observeLocked(latest, m.clk.Now())
		m.mu.Unlock()
	}
}
