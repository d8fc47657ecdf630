package ownership

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// writeMemberLocked creates or renews the member Lease: holder this
// broker's identity, renewed now, annotated while draining, and returns
// when the successful write was sent. The caller holds memberMu.
//
// Every update is conditional on our last write. A write that does not
// continue a version naming this broker — a create, or a write over a
// version another broker fenced (naming nobody), another incarnation
// wrote, or over a deletion — sets fenced: the slots held may have been
// taken, so none is served again before its own Lease is written (renew).
func (m *Manager) writeMemberLocked(ctx context.Context) (time.Time, error) {
	ctx, cancel := m.ioContext(ctx)
	defer cancel()
	m.mu.Lock()
	draining, leaving := m.draining, m.leaving
	base := m.member
	if base == nil {
		base = m.members[m.cfg.Node]
	}
	m.mu.Unlock()

	name := MemberLeaseName(m.cfg.Cluster, m.cfg.Node)
	for attempt := 0; ; attempt++ {
		now := m.clk.Now()
		var got *coordinationv1.Lease
		var err error
		if base == nil {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.cfg.Namespace,
				Labels: leaseLabels(m.cfg.Cluster, RoleMember)}}
			l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
			got, err = m.leases.Create(ctx, m.memberLease(l, now, draining, leaving), metav1.CreateOptions{})
		} else {
			got, err = m.leases.Update(ctx, m.memberLease(base, now, draining, leaving), metav1.UpdateOptions{})
		}
		if err == nil {
			m.member = got
			m.mu.Lock()
			baseRV := ""
			if base != nil {
				baseRV = base.ResourceVersion
			}
			m.observeOwnLocked(got, baseRV, now)
			if base == nil || holderOf(base) != m.cfg.Identity {
				// Not a continuation of a version naming us (created,
				// or written over another's): a broker that found no
				// Lease naming us may have taken our slots meanwhile.
				m.fenced = true
			}
			m.mu.Unlock()
			return now, nil
		}
		conflict := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
		if !conflict || attempt > 0 {
			return time.Time{}, err
		}
		// Our copy is stale (a fence, a previous incarnation's write, or
		// our last write whose answer was lost): read it and write once
		// more.
		base, err = m.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			base = nil
		} else if err != nil {
			return time.Time{}, err
		}
	}
}

// memberLease returns a copy of l as this broker's member Lease now.
func (m *Manager) memberLease(l *coordinationv1.Lease, now time.Time, draining, leaving bool) *coordinationv1.Lease {
	n := m.renewed(l, now)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range leaseLabels(m.cfg.Cluster, RoleMember) {
		n.Labels[k] = v
	}
	for key, on := range map[string]bool{AnnotationDraining: draining, AnnotationLeaving: leaving} {
		if on {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[key] = "true"
		} else {
			delete(n.Annotations, key)
		}
	}
	return n
}
