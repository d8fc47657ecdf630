package ownership

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Run is the manager's loop: it starts the informer on the cluster's
// Leases, waits for its cache, then does each period's work (tick) every
// RetryPeriod, wakes at every renew deadline to stop serving at once, and
// wakes early when a slot comes free, a member changes or an expiry is due.
// Every callback is called from this goroutine.
//
// Run returns nil when ctx ends, after calling Revoke for every slot still
// served: it makes no request then, so its Leases are left to expire as
// after a crash. A graceful stop is SetDraining(ctx, true), waiting until
// Held is empty, then ending ctx. Run may be called once.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("ownership: Run called twice")
	}
	stopInformer, err := m.startInformer(ctx)
	if err != nil {
		m.shutdown()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopInformer()
	for {
		next := m.wake(ctx)
		if ctx.Err() != nil {
			break
		}
		timer := m.clk.NewTimer(max(next.Sub(m.clk.Now()), 0))
		select {
		case <-ctx.Done():
		case <-timer.C():
		case <-m.poke:
			m.poked = true
		}
		timer.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	m.shutdown()
	return nil
}

// wake does what is due at the clock's now and returns when it must run
// next: revoke what is past its renew deadline; the period's work when due;
// otherwise a failsafe round sent again when due, and a decision pass when
// poked or an expiry is due.
func (m *Manager) wake(ctx context.Context) time.Time {
	now := m.clk.Now()
	m.expire(now)
	if m.cfg.InContact != nil && !m.cfg.InContact() {
		// Cut from the metadata log: whatever this broker would write, it
		// could not commit. It renews nothing and takes nothing, so its
		// slots pass, by the timing rule, to brokers that can commit — a
		// blip shorter than RenewDeadline only skips a renewal or two.
		if !now.Before(m.nextTick) {
			m.nextTick = now.Add(m.cfg.RetryPeriod)
		}
		m.nextPass, m.roundAt = time.Time{}, time.Time{}
		m.poked = false
		m.publish()
		return m.nextWake()
	}
	switch {
	case !now.Before(m.nextTick):
		m.nextTick = now.Add(m.cfg.RetryPeriod)
		m.tick(ctx)
	default:
		if !m.roundAt.IsZero() && !now.Before(m.roundAt) {
			m.retryFailsafe(ctx)
		}
		if m.poked || (!m.nextPass.IsZero() && !now.Before(m.nextPass)) {
			m.pass(ctx)
		}
	}
	m.poked = false
	return m.nextWake()
}

// nextWake is the earliest of the next period, the next renew deadline of
// a slot that may still be written, and the next expiry that may change a
// decision.
func (m *Manager) nextWake() time.Time {
	next := m.nextTick
	if !m.nextPass.IsZero() && m.nextPass.Before(next) {
		next = m.nextPass
	}
	if !m.roundAt.IsZero() && m.roundAt.Before(next) {
		next = m.roundAt
	}
	if d, ok := m.earliestDeadline(); ok && d.Before(next) {
		next = d
	}
	return next
}

// tick is one period's work: observe the cache, create missing slot
// Leases, renew the member Lease and every held slot, stop serving what
// the renewals could not keep, then hand off extras and take up to the
// fair share.
func (m *Manager) tick(ctx context.Context) {
	// Renewals need no view of the cluster, so a cache that cannot answer
	// skips only the decisions.
	ok := m.refresh(m.clk.Now())
	if ok {
		m.dropTaken()
		m.ensureSlots(ctx)
	}
	m.renew(ctx)
	m.expire(m.clk.Now())
	if ok {
		m.rebalance(ctx)
	}
	m.publish()
}

// pass is a decision between periods: observe, hand off, take.
func (m *Manager) pass(ctx context.Context) {
	if !m.refresh(m.clk.Now()) {
		return
	}
	m.dropTaken()
	m.rebalance(ctx)
	m.publish()
}

// expire stops serving every slot past its renew deadline and calls Revoke
// for each that may still have been written (once: the slot is quiesced
// after). The timing rule: a holder stops serving at the send time of its
// last successful renew plus RenewDeadline, whether or not the API server
// answers.
func (m *Manager) expire(now time.Time) {
	var revoke []int
	m.mu.Lock()
	for s, h := range m.held {
		if now.Before(h.deadline) {
			continue
		}
		h.rewrite = true // a renewal of the member Lease no longer keeps it
		if !h.quiesced {
			h.serving, h.quiesced = false, true
			revoke = append(revoke, s)
		}
	}
	m.mu.Unlock()
	slices.Sort(revoke)
	for _, s := range revoke {
		m.log.Warn("slot past its renew deadline: stopped serving", "slot", s)
		m.cfg.Revoke(s)
	}
}

// dropTaken forgets the held slots whose Lease, as the cache shows it,
// names another holder since our last write of it — taken after our
// deadline passed, or handed over by hand — and calls Revoke for each
// that may still have been written. Renewals write no slot Lease, so this
// is where such a loss is learnt.
func (m *Manager) dropTaken() {
	var revoke []int
	m.mu.Lock()
	for s, h := range m.held {
		l := m.slots[s]
		if l == nil || l.ResourceVersion == h.lease.ResourceVersion || holderOf(l) == m.cfg.Identity {
			continue // ours (a cache behind our take is never observed: observeOwnLocked)
		}
		if m.dropLocked(s) {
			revoke = append(revoke, s)
		}
		m.met.handoffs.WithLabelValues(eventLost).Inc()
		m.log.Warn("slot lost", "slot", s, "holder", holderOf(l))
	}
	m.mu.Unlock()
	slices.Sort(revoke)
	for _, s := range revoke {
		m.cfg.Revoke(s)
	}
}

// earliestDeadline is the renew deadline nearest in time among the slots
// that may still be written.
func (m *Manager) earliestDeadline() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Time
	ok := false
	for _, h := range m.held {
		if !h.quiesced && (!ok || h.deadline.Before(d)) {
			d, ok = h.deadline, true
		}
	}
	return d, ok
}

// ioContext bounds one phase of requests or callbacks: RetryPeriod at most,
// and never past the earliest renew deadline, so the loop is back in time
// to stop serving however the API server (or a Release) behaves.
func (m *Manager) ioContext(ctx context.Context) (context.Context, context.CancelFunc) {
	limit := m.cfg.RetryPeriod
	if d, ok := m.earliestDeadline(); ok {
		if left := d.Sub(m.clk.Now()); left < limit {
			limit = max(left, time.Millisecond)
		}
	}
	return context.WithTimeout(ctx, limit)
}

// shutdown stops serving everything, calling Revoke for what may still be
// written, and forgets the holdings: Run has ended and renews no more.
func (m *Manager) shutdown() {
	var revoke []int
	m.mu.Lock()
	for s, h := range m.held {
		if !h.quiesced {
			revoke = append(revoke, s)
		}
	}
	m.held = map[int]*heldSlot{}
	m.mu.Unlock()
	slices.Sort(revoke)
	for _, s := range revoke {
		m.cfg.Revoke(s)
	}
	m.publish()
}

// publish sets the gauges.
func (m *Manager) publish() {
	m.mu.Lock()
	held, live := len(m.held), len(m.live)
	m.mu.Unlock()
	m.met.slotsHeld.Set(float64(held))
	m.met.membersLive.Set(float64(live))
}

// noteErr records a failed request for Status.
func (m *Manager) noteErr(err error) {
	m.mu.Lock()
	m.lastErr, m.errAt = err, m.clk.Now()
	m.mu.Unlock()
}
