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

// renewParallelism bounds the slot Lease writes in flight at once: after
// an outage every held slot may need one, and all at once would be a burst
// the rate limiter queues anyway.
const renewParallelism = 8

// renew renews the member Lease, which is what keeps every held slot: a
// slot is served until the send time of the last successful renewal plus
// RenewDeadline, and the others take it only LeaseDuration after they last
// saw that Lease (or the slot's) change. Slot Leases are written when their
// holder changes, not each period, so the API server's writes grow with
// the brokers and not with the slots.
//
// A slot that cannot be extended so — its deadline passed before the
// renewal was sent, or the member Lease was fenced since — is written
// again (conditionally on our last write of it: it fails when another
// broker took the slot meanwhile) and kept only if that succeeds; such
// writes go at most renewParallelism at once. All requests are bounded by
// one ioContext; failures are counted each, and logged once per period.
func (m *Manager) renew(ctx context.Context) {
	ioctx, cancel := m.ioContext(ctx)
	defer cancel()
	// While the API server could not be reached at the last renewal, the
	// failsafe round goes out beside this one: a renewal that hangs until
	// the context ends would leave it no time after.
	m.mu.Lock()
	wasFailing := m.apiFailing
	m.mu.Unlock()
	var round chan failsafeResult
	if wasFailing && m.cfg.Failsafe != nil {
		round = make(chan failsafeResult, 1)
		go func() {
			sent, ok := m.failsafeRound(ioctx)
			round <- failsafeResult{sent, ok}
		}()
	}
	m.memberMu.Lock()
	m.mu.Lock()
	m.writingSince = m.clk.Now() // a write hanging long says as much as a failed one (AnswerFailsafe)
	m.mu.Unlock()
	sent, memberErr := m.writeMemberLocked(ioctx)
	m.memberMu.Unlock()
	m.mu.Lock()
	m.writingSince = time.Time{}
	// At once: the other brokers' rounds ask whether this one reaches
	// the API server.
	m.noteMemberWriteLocked(memberErr, m.clk.Now())
	m.mu.Unlock()
	var fs failsafeResult
	switch {
	case round != nil:
		fs = <-round
	case apiUnreachable(memberErr):
		// A write that hung used up ioctx: the round gets its own.
		rctx, rcancel := m.ioContext(ctx)
		fs.sent, fs.ok = m.failsafeRound(rctx)
		rcancel()
	}
	m.roundAt = time.Time{}
	if apiUnreachable(memberErr) && !fs.ok && m.cfg.Failsafe != nil && m.servesAny() {
		// The others may learn only now that they cannot reach the API
		// server either: ask again soon, not a whole period later.
		m.roundAt = m.clk.Now().Add(m.failsafeRetry())
	}

	type job struct {
		slot  int
		lease *coordinationv1.Lease
	}
	var jobs []job
	var revoke []int
	m.mu.Lock()
	var fsEnded time.Time
	var fsRounds, fsExtended int
	switch {
	case memberErr == nil || !fs.ok:
		fsEnded, fsRounds = m.endFailsafeLocked()
	case apiUnreachable(memberErr):
		fsExtended = m.extendByFailsafeLocked(fs.sent)
		fsRounds = m.failsafeRoundsConfirmed
	}
	fenced := m.fenced
	m.fenced = false
	if memberErr == nil && sent.After(m.lastOK) {
		m.lastOK = sent
	}
	for s, h := range m.held {
		if h.letGo {
			continue
		}
		if fenced {
			// Our member Lease was written by another: a taker may have
			// the slot already. (By the timing rule its deadline passed
			// long before; this only makes sure it is not extended.)
			h.rewrite = true
			if !h.quiesced {
				h.serving, h.quiesced = false, true
				revoke = append(revoke, s)
			}
		}
		if memberErr != nil {
			continue // the slots keep their deadlines, and stop there
		}
		if !h.rewrite && sent.Before(h.deadline) {
			h.sent, h.deadline = sent, sent.Add(m.cfg.RenewDeadline)
			continue
		}
		h.rewrite = true
		jobs = append(jobs, job{s, h.lease})
	}
	m.mu.Unlock()
	switch {
	case fsExtended > 0 && fsRounds == 1:
		m.log.Warn("API server unreachable: serving on failsafe, every member confirmed it cannot reach it either", "slots", fsExtended, "err", memberErr)
	case !fsEnded.IsZero():
		m.failsafeEnded(ctx, fsEnded, fsRounds, memberErr)
	}
	slices.Sort(revoke)
	for _, s := range revoke {
		m.log.Warn("member Lease fenced by another broker: slot not served until its Lease is written again", "slot", s)
		m.cfg.Revoke(s)
	}
	slices.SortFunc(jobs, func(a, b job) int { return a.slot - b.slot })

	results := make([]renewResult, len(jobs))
	sem := make(chan struct{}, renewParallelism)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = m.renewSlot(ioctx, j.slot, j.lease)
		})
	}
	wg.Wait()

	revoke = revoke[:0]
	var failedSlots []int
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
			base := h.lease.ResourceVersion
			h.lease, h.sent, h.deadline, h.rewrite = r.lease, r.sent, r.sent.Add(m.cfg.RenewDeadline), false
			m.observeOwnLocked(r.lease, base, r.sent)
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

// failsafeResult is a failsafe round's outcome: when it was sent, and
// whether every member confirmed.
type failsafeResult struct {
	sent time.Time
	ok   bool
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
