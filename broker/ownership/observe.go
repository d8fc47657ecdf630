package ownership

import (
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// What this broker has seen of the cluster's Leases. Every change (a new
// resourceVersion) is stamped with this broker's clock when it is first
// seen; expiry and liveness are measured from that stamp. Seeing a change
// late only makes a Lease expire later here, never sooner.

// refresh lists the Leases from the source and observes them all: new or
// changed ones are stamped now, vanished ones forgotten.
func (m *Manager) refresh(now time.Time) bool {
	list, err := m.source()
	if err != nil {
		m.log.Warn("listing the cluster's Leases from the cache failed", "err", err)
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	present := make(map[string]bool, len(list))
	for _, l := range list {
		present[l.Name] = true
		m.observeLocked(l, now)
	}
	for name := range m.seen {
		if !present[name] {
			m.forgetLocked(name)
		}
	}
	m.pruneAliveLocked()
	m.synced = true
	return true
}

// observeLease records one Lease from an informer event, and reports
// whether the change may call for a decision before the next period: a
// slot came free, or a member appeared, changed identity or drain state.
func (m *Manager) observeLease(l *coordinationv1.Lease) bool {
	now := m.clk.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var before *coordinationv1.Lease
	if slot, ok := slotOfLease(m.cfg.Cluster, m.cfg.Slots, l.Name); ok {
		before = m.slots[slot]
		m.observeLocked(l, now)
		return holderOf(l) == "" && (before == nil || holderOf(before) != "")
	}
	if node, ok := nodeOfMemberLease(m.cfg.Cluster, l.Name); ok {
		before = m.members[node]
		m.observeLocked(l, now)
		return before == nil || holderOf(before) != holderOf(l) || isDraining(before) != isDraining(l)
	}
	return false
}

// maxOlder bounds the replaced versions remembered per Lease: a cache more
// than a few of our writes behind is seen as new again (its expiry only
// starts later).
const maxOlder = 4

// observeOwnLocked records got, the answer to this broker's own write of
// a Lease, and remembers the versions it replaced — base, which the write
// was conditional on, and the one last seen — so that a cache still
// showing one of them is not taken for a change back.
//
// The version last seen is not always older than got: the cache may
// deliver another broker's write made after ours (a taker's, right after
// our hand-off cleared the slot) before this goroutine gets the lock with
// our answer. Taken for older, that newer version would be ignored from
// then on, and with it every later look at the Lease: a slot seen free
// for as long as it stays held (renewals write no slot Lease). Versions
// are compared where the API server's are comparable (etcd's revisions:
// KEP-5504); a newer one seen first stays, and our write only joins the
// versions it replaced.
func (m *Manager) observeOwnLocked(got *coordinationv1.Lease, base string, now time.Time) {
	o, ok := m.seen[got.Name]
	if ok && o.rv != got.ResourceVersion {
		newer := versionOrder(o.rv, got.ResourceVersion) > 0
		for _, rv := range []string{o.rv, base, got.ResourceVersion} {
			switch {
			case rv == "" || slices.Contains(o.older, rv):
			case rv == o.rv && newer:
			case rv == got.ResourceVersion && !newer:
			default:
				o.older = append(o.older, rv)
			}
		}
		if len(o.older) > maxOlder {
			o.older = o.older[len(o.older)-maxOlder:]
		}
		m.seen[got.Name] = o
		if newer {
			return
		}
	}
	m.observeLocked(got, now)
}

// versionOrder compares two resourceVersions of one Lease: -1, 0 or +1
// when the API server's versions are comparable, 0 when they are not
// (then only our own writes order them).
func versionOrder(a, b string) int {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return 0
	}
	return c
}

// forgetLease drops a deleted Lease.
func (m *Manager) forgetLease(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(name)
}

// observeLocked stamps l's resourceVersion with now if it is new to this
// broker, and files l as a slot's or a member's.
func (m *Manager) observeLocked(l *coordinationv1.Lease, now time.Time) {
	changed := false
	o, ok := m.seen[l.Name]
	switch {
	case ok && slices.Contains(o.older, l.ResourceVersion):
		// A version one of this broker's own writes replaced: the
		// source (a cache) lags behind what is known here.
		return
	case ok && versionOrder(l.ResourceVersion, o.rv) < 0:
		// Older than one seen before (a fresh read, then a cache behind
		// it), as the API server's comparable versions tell.
		return
	case !ok || o.rv != l.ResourceVersion:
		// Anything else is taken as it comes: where versions are not
		// comparable, only our own writes tell which is the older.
		m.seen[l.Name] = observation{rv: l.ResourceVersion, at: now, older: o.older}
		changed = true
	}
	if slot, ok := slotOfLease(m.cfg.Cluster, m.cfg.Slots, l.Name); ok {
		m.slots[slot] = l
	} else if node, ok := nodeOfMemberLease(m.cfg.Cluster, l.Name); ok && l.Labels[LabelRole] == RoleMember {
		prev := m.members[node]
		m.members[node] = l
		if !changed {
			return
		}
		if id := holderOf(l); id != "" {
			// Only the member itself writes its Lease naming it (a
			// fence names nobody): a change naming it may be a renewal.
			m.alive[id] = now
			delete(m.gone, id)
		}
		switch was := holderOf(prev); {
		case was == "" || was == holderOf(l):
		case holderOf(l) == "":
			// Fenced: written over the version the fencer saw unchanged
			// for LeaseDuration, the member's last renewal, so no
			// renewal of its keeps a slot any more: each expires
			// LeaseDuration after its own Lease's change (a take).
			m.gone[was] = true
		default:
			// Another incarnation wrote it: the member renewed last
			// before this change, maybe after the version this cache had.
			m.alive[was] = now
		}
	}
}

// slotExpiresLocked is when slot Lease l expires for this broker: its
// holder renews no slot Lease, only its member Lease, so LeaseDuration
// after the later of the slot Lease's last change and the last change of
// a member Lease naming the holder (or ceasing to), both as this broker
// first saw them — or, once the holder's member Lease was fenced,
// LeaseDuration after the slot Lease's own change alone.
//
// A failsafe promise to the holder (failsafe.go) holds the slot longer.
func (m *Manager) slotExpiresLocked(l *coordinationv1.Lease) time.Time {
	holder := holderOf(l)
	at := m.expiresLocked(l)
	if seen, ok := m.alive[holder]; ok && !m.gone[holder] {
		// (Once fenced, renewals no longer count, but a slot the holder
		// took after its last renewal is its own until the take's
		// deadline.)
		if d := seen.Add(m.leaseDuration(l)); d.After(at) {
			at = d
		}
	}
	if until := m.promiseUntilLocked(holder, m.clk.Now()); until.After(at) {
		at = until
	}
	return at
}

func (m *Manager) slotExpiredLocked(l *coordinationv1.Lease, now time.Time) bool {
	return !now.Before(m.slotExpiresLocked(l))
}

// memberLeaseOfLocked is the member Lease that names identity, if one
// does as last seen.
func (m *Manager) memberLeaseOfLocked(identity string) *coordinationv1.Lease {
	for _, l := range m.members {
		if holderOf(l) == identity {
			return l
		}
	}
	return nil
}

// pruneAliveLocked forgets the identities no Lease names any more.
func (m *Manager) pruneAliveLocked() {
	named := map[string]bool{}
	for _, l := range m.slots {
		named[holderOf(l)] = true
	}
	for _, l := range m.members {
		named[holderOf(l)] = true
	}
	for id := range m.alive {
		if !named[id] {
			delete(m.alive, id)
		}
	}
	for id := range m.gone {
		if !named[id] {
			delete(m.gone, id)
		}
	}
	now := m.clk.Now()
	for id := range m.promised {
		m.promiseUntilLocked(id, now) // forgets a promise that has run out
	}
}

func (m *Manager) forgetLocked(name string) {
	delete(m.seen, name)
	if slot, ok := slotOfLease(m.cfg.Cluster, m.cfg.Slots, name); ok {
		m.slots[slot] = nil
	} else if node, ok := nodeOfMemberLease(m.cfg.Cluster, name); ok {
		delete(m.members, node)
	}
}

// leaseDuration is how long l stays held after its last change: the
// configured LeaseDuration, or the Lease's own leaseDurationSeconds when
// longer (a broker configured differently, during a rollout).
func (m *Manager) leaseDuration(l *coordinationv1.Lease) time.Duration {
	d := m.cfg.LeaseDuration
	if s := l.Spec.LeaseDurationSeconds; s != nil && time.Duration(*s)*time.Second > d {
		d = time.Duration(*s) * time.Second
	}
	return d
}

// expiresLocked is when l expires for this broker: LeaseDuration after it
// first saw l's current resourceVersion.
func (m *Manager) expiresLocked(l *coordinationv1.Lease) time.Time {
	o, ok := m.seen[l.Name]
	if !ok || o.rv != l.ResourceVersion {
		// Not observed yet (cannot happen for a Lease from the cache): treat
		// as just changed.
		return m.clk.Now().Add(m.leaseDuration(l))
	}
	return o.at.Add(m.leaseDuration(l))
}

func (m *Manager) expiredLocked(l *coordinationv1.Lease, now time.Time) bool {
	return !now.Before(m.expiresLocked(l))
}

// liveLocked returns the identities counted for fair shares, sorted: the
// members whose Lease changed within LeaseDuration and that do not drain,
// plus this broker unless it drains. This broker counts itself whatever
// its own member Lease shows: it knows it is alive, and an API server it
// cannot reach must not make it hand its slots off.
func (m *Manager) liveLocked(now time.Time) []string {
	var live []string
	if !m.draining {
		live = append(live, m.cfg.Identity)
	}
	for node, l := range m.members {
		id := holderOf(l)
		if node == m.cfg.Node || id == "" || id == m.cfg.Identity || isDraining(l) || m.expiredLocked(l, now) {
			continue
		}
		live = append(live, id)
	}
	slices.Sort(live)
	return slices.Compact(live)
}

// nextMemberChangeLocked is the earliest time a member now live expires:
// the fair shares change then.
func (m *Manager) nextMemberChangeLocked(now time.Time) time.Time {
	var next time.Time
	for node, l := range m.members {
		if node == m.cfg.Node || holderOf(l) == "" || isDraining(l) {
			continue
		}
		if at := m.expiresLocked(l); at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}
