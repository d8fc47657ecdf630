package ownership

import "context"

// SetDraining turns draining on or off. While on, this broker's fair share
// is 0: it takes no slot, hands every held slot off (Release, then the
// holder cleared) from its loop, and its member Lease carries
// streams.picomq.io/draining=true so the others count it out at once
// instead of after LeaseDuration. The drain is complete when Held is empty.
//
// The flag takes effect at once, whatever the API server says; the error
// is that of writing the member Lease (the loop writes it again every
// period).
func (m *Manager) SetDraining(ctx context.Context, on bool) error {
	err := m.setMemberFlag(ctx, &m.draining, "draining", on)
	m.signal()
	return err
}

// SetLeaving marks (or unmarks) this broker's member Lease as leaving the
// cluster: a drain for a scale down, whose copies of objects the others
// move (broker/repair), as against a graceful stop's drain, which only
// hands the slots off. The error is that of writing the member Lease.
func (m *Manager) SetLeaving(ctx context.Context, on bool) error {
	return m.setMemberFlag(ctx, &m.leaving, "leaving", on)
}

// setMemberFlag sets one of the flags the member Lease carries (guarded by
// mu) and writes the Lease.
func (m *Manager) setMemberFlag(ctx context.Context, flag *bool, name string, on bool) error {
	m.mu.Lock()
	*flag = on
	m.mu.Unlock()
	m.memberMu.Lock()
	_, err := m.writeMemberLocked(ctx)
	m.memberMu.Unlock()
	if err != nil {
		m.noteErr(err)
		m.log.Warn("writing the member Lease's "+name+" state failed", name, on, "err", err)
	}
	return err
}
