package ownership

import (
	"slices"
	"time"
)

// MemberInfo is one member of the cluster as this broker sees it.
type MemberInfo struct {
	Identity string `json:"identity"`
	Node     string `json:"node"`
	Draining bool   `json:"draining,omitempty"`
	// Leaving: it drains to leave the cluster (its copies move).
	Leaving bool `json:"leaving,omitempty"`
	Self    bool `json:"self,omitempty"`
}

// Members returns the members whose member Lease changed within
// LeaseDuration of this broker's clock, itself included, sorted by
// identity; draining ones are listed and marked (they target no slots).
func (m *Manager) Members() []MemberInfo {
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []MemberInfo{{Identity: m.cfg.Identity, Node: m.cfg.Node, Draining: m.draining, Leaving: m.leaving, Self: true}}
	for node, l := range m.members {
		if node == m.cfg.Node || holderOf(l) == "" || m.expiredLocked(l, now) {
			continue
		}
		out = append(out, MemberInfo{Identity: holderOf(l), Node: node, Draining: isDraining(l), Leaving: isLeaving(l)})
	}
	slices.SortFunc(out, func(a, b MemberInfo) int {
		switch {
		case a.Identity < b.Identity:
			return -1
		case a.Identity > b.Identity:
			return 1
		}
		return 0
	})
	return out
}

// Status is what /v1/admin/node reports of ownership.
type Status struct {
	Identity string `json:"identity"`
	Node     string `json:"node"`
	// SlotsHeld is how many slot Leases name this broker; Held lists them.
	SlotsHeld int   `json:"slotsHeld"`
	Held      []int `json:"held"`
	// Serving is how many of them MayOpen allows now.
	Serving int `json:"serving"`
	// Target is this broker's fair share as of the last decision.
	Target      int  `json:"target"`
	MembersLive int  `json:"membersLive"`
	Draining    bool `json:"draining,omitempty"`
	// LastRenew is when the last successful renew was sent (this broker's clock).
	LastRenew time.Time `json:"lastRenew,omitzero"`
	// LastRenewError is the last failed request of a renewal, take or
	// hand-off, with its time; cleared by the next successful renew.
	LastRenewError   string    `json:"lastRenewError,omitempty"`
	LastRenewErrorAt time.Time `json:"lastRenewErrorAt,omitzero"`
	// FailsafeSince is when this broker began serving its slots through
	// an API server outage on failsafe rounds every member confirmed
	// (zero: it does not); FailsafeRounds counts the rounds since.
	FailsafeSince  time.Time `json:"failsafeSince,omitzero"`
	FailsafeRounds int       `json:"failsafeRounds,omitempty"`
}

// Status reports the slots held and served, the target and the live
// members, for the admin API.
func (m *Manager) Status() Status {
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{
		Identity:    m.cfg.Identity,
		Node:        m.cfg.Node,
		SlotsHeld:   len(m.held),
		Held:        m.heldLocked(),
		Target:      m.target,
		MembersLive: len(m.live),
		Draining:    m.draining,
		LastRenew:   m.lastOK,

		FailsafeSince:  m.failsafeSince,
		FailsafeRounds: m.failsafeRoundsConfirmed,
	}
	for _, h := range m.held {
		if h.serving && now.Before(h.deadline) {
			st.Serving++
		}
	}
	if m.lastErr != nil {
		st.LastRenewError, st.LastRenewErrorAt = m.lastErr.Error(), m.errAt
	}
	return st
}
