package ownership

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ensureSlots creates, free, every slot Lease the cache does not hold.
// Create is conditional by nature: AlreadyExists means another broker (or
// an earlier period whose write the cache has not shown yet) did it.
func (m *Manager) ensureSlots(ctx context.Context) {
	var missing []int
	m.mu.Lock()
	for s, l := range m.slots {
		if l == nil {
			missing = append(missing, s)
		}
	}
	m.mu.Unlock()
	if len(missing) == 0 {
		return
	}
	ctx, cancel := m.ioContext(ctx)
	defer cancel()
	for _, s := range missing {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: SlotLeaseName(m.cfg.Cluster, s), Namespace: m.cfg.Namespace,
				Labels: leaseLabels(m.cfg.Cluster, RoleSlot)},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(int32(m.cfg.LeaseDuration / time.Second))},
		}
		got, err := m.leases.Create(ctx, l, metav1.CreateOptions{})
		switch {
		case err == nil:
			m.mu.Lock()
			m.observeLocked(got, m.clk.Now())
			m.mu.Unlock()
		case apierrors.IsAlreadyExists(err):
		default:
			m.noteErr(err)
			m.log.Warn("creating a slot Lease failed", "slot", s, "err", err)
			if ctx.Err() != nil {
				return
			}
		}
	}
}
