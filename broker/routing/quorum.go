package routing

import (
	"context"
	"sync"
	"time"
)

// QuorumWatch decides whether the cluster lost its quorum — the one case
// in which a broker answers reads from its own, possibly stale, copy. A
// momentary look is not enough: a broker just resumed from a pause (or
// whose process was starved) sees every peer silent and every other
// member's Lease run out on its own clock before its views have caught
// up, and would serve stale data while the others carry on. So the loss
// must be seen at every sample for For, and a gap between samples (the
// broker itself stood still) starts the count again.
type QuorumWatch struct {
	// Lost is the momentary view: no contact with a leader, no other
	// member renewing its Lease.
	Lost func() bool
	// For is how long Lost must hold without a break (e.g. the Lease
	// duration: by then another member's Lease, renewed, would show).
	For time.Duration
	// Tick is how often Lost is sampled (default For/10, at least 50ms).
	Tick time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu    sync.Mutex
	since time.Time // when the current unbroken streak of Lost began
	last  time.Time // the previous sample
}

func (q *QuorumWatch) tick() time.Duration {
	if q.Tick > 0 {
		return q.Tick
	}
	return max(q.For/10, 50*time.Millisecond)
}

func (q *QuorumWatch) now() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}

// Sample takes one look; Run calls it every Tick.
func (q *QuorumWatch) Sample() {
	now := q.now()
	lost := q.Lost()
	q.mu.Lock()
	defer q.mu.Unlock()
	gap := !q.last.IsZero() && now.Sub(q.last) > 3*q.tick()
	q.last = now
	switch {
	case !lost:
		q.since = time.Time{}
	case gap || q.since.IsZero():
		// After a gap this broker stood still, and what it sees now is
		// not yet what is: the count starts again from here.
		q.since = now
	}
}

// QuorumLost reports whether Lost held at every sample for For, up to a
// sample a moment ago.
func (q *QuorumWatch) QuorumLost() bool {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.since.IsZero() || now.Sub(q.last) > 3*q.tick() {
		return false
	}
	return now.Sub(q.since) >= q.For
}

// Run samples until ctx ends.
func (q *QuorumWatch) Run(ctx context.Context) {
	t := time.NewTicker(q.tick())
	defer t.Stop()
	for {
		q.Sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
