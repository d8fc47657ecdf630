package ownership

import (
	"context"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// renewParallelism bounds the renewals in flight at once: 64 slots renewed
// one after another at a few milliseconds each would eat much of a period
// on a busy API server; all at once would be a burst the rate limiter
// queues anyway.
const renewParallelism = 8

// renew renews the member Lease and every held slot not being let go, at
// most renewParallelism requests at once, all bounded by one ioContext.
// Failures are counted each, and logged once per period.
func (m *Manager) renew(ctx context.Context) {
	type job struct {
		slot  int
		lease *coordinationv1.Lease
	}
	var jobs []job
	m.mu.Lock()
	for s, h := range m.held {
		if !h.letGo {
			jobs = append(jobs, job{s, h.lease})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(jobs, func(a, b job) int { return a.slot - b.slot })

	ioctx, cancel := m.ioContext(ctx)
	defer cancel()
	results := make([]renewResult, len(jobs))
	sem := make(chan struct{}, renewParallelism)
	var wg sync.WaitGroup
	var memberErr error
	wg.Go(func() {
		sem <- struct{}{}
		defer func() { <-sem }()
		m.memberMu.Lock()
		defer m.memberMu.Unlock()
		memberErr = m.writeMemberLocked(ioctx)
	})
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = m.renewSlot(ioctx, j.slot, j.lease)
		})
	}
	wg.Wait()

	var revoke, failedSlots []int
	var firstErr error
	if memberErr != nil {
		firstErr = memberErr
		m.met.renewFailures.Inc()
	}
	m.mu.Lock()
	for _, r := range results {
		h := m.held[r.slot]
		if h == nil {
			continue
		}
		switch {
		case r.err == nil && !r.lost:
			h.lease, h.sent, h.deadline = r.lease, r.sent, r.sent.Add(m.cfg.RenewDeadline)
			if r.sent.After(m.lastOK) {
				m.lastOK = r.sent
			}
			m.observeLocked(r.lease, r.sent)
		case r.lost:
			if m.dropLocked(r.slot) {
				revoke = append(revoke, r.slot)
			}
			m.met.handoffs.WithLabelValues(eventLost).Inc()
			m.log.Warn("slot lost", "slot", r.slot, "holder", r.holder)
		default:
			failedSlots = append(failedSlots, r.slot)
			if firstErr == nil {
				firstErr = r.err
			}
			m.met.renewFailures.Inc()
		}
	}
	if firstErr != nil {
		m.lastErr, m.errAt = firstErr, m.clk.Now()
	} else {
		m.lastErr = nil // every renewal of the period went through
	}
	m.mu.Unlock()
	if firstErr != nil {
		m.log.Warn("renewals failed", "member", memberErr != nil, "slots", failedSlots, "err", firstErr)
	}
	for _, s := range revoke {
		m.cfg.Revoke(s)
	}
}

// renewResult is what one slot's renewal learned.
type renewResult struct {
	slot   int
	lease  *coordinationv1.Lease // the renewed Lease
	sent   time.Time             // when the successful request was sent
	lost   bool                  // the Lease names another holder, or is gone
	holder string                // its holder then, if lost
	err    error                 // the renewal failed; nothing is known
}

// renewSlot renews one slot from cur, our last write. A Conflict means the
// Lease changed under us: a Get says whether it still names us (our own
// earlier write whose answer was lost, or an edit of another field: renew
// from it once more) or not (lost).
func (m *Manager) renewSlot(ctx context.Context, slot int, cur *coordinationv1.Lease) renewResult {
	for attempt := 0; ; attempt++ {
		sent := m.clk.Now()
		got, err := m.leases.Update(ctx, m.renewed(cur, sent), metav1.UpdateOptions{})
		if err == nil {
			return renewResult{slot: slot, lease: got, sent: sent}
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return renewResult{slot: slot, err: err}
		}
		latest, gerr := m.leases.Get(ctx, cur.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			return renewResult{slot: slot, lost: true}
		case gerr != nil:
			return renewResult{slot: slot, err: gerr}
		case holderOf(latest) != m.cfg.Identity:
			return renewResult{slot: slot, lost: true, holder: holderOf(latest)}
		case attempt > 0:
			return renewResult{slot: slot, err: err}
		}
		cur = latest
	}
}

// renewed returns a copy of l naming this broker as holder, renewed at now.
func (m *Manager) renewed(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	n := l.DeepCopy()
	n.Spec.HolderIdentity = ptr.To(m.cfg.Identity)
	n.Spec.LeaseDurationSeconds = ptr.To(int32(m.cfg.LeaseDuration / time.Second))
	n.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	return n
}

// dropLocked forgets a held slot and reports whether Revoke is owed (it
// may still have been written).
func (m *Manager) dropLocked(slot int) (revoke bool) {
	h := m.held[slot]
	if h == nil {
		return false
	}
	delete(m.held, slot)
	return !h.quiesced
}
