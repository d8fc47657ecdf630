package ownership

import (
	"context"
	"slices"
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
	m.noteSettled(target)
}

// noteSettled latches Settled once this broker serves its fair share and
// has renewed its member Lease.
func (m *Manager) noteSettled(target int) {
	if m.settled.Load() {
		return
	}
	now := m.clk.Now()
	m.mu.Lock()
	serving := 0
	for _, h := range m.held {
		if h.serving && !h.handing && !h.letGo && now.Before(h.deadline) {
			serving++
		}
	}
	ok := !m.lastOK.IsZero() && serving >= target
	m.mu.Unlock()
	if ok {
		m.settled.Store(true)
		m.log.Info("serving its fair share of the slots", "slots", serving, "target", target)
	}
}

// Settled reports whether this broker has served its fair share of the
// slots at least once since it started (a share of 0 counts: draining,
// or more brokers than slots). Once it has, the others count it live —
// they handed it its slots, or left them free — so the broker may be
// reported ready, and a rolling restart may go on to the next broker: one
// that went on before would stop a broker while the one before it is not
// yet counted, and leave the others with too few live members for an
// ensemble. It stays true: shares change with every join and drain, and
// readiness must not follow them.
func (m *Manager) Settled() bool { return m.settled.Load() }

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
