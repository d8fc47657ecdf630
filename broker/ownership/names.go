package ownership

import (
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The labels and annotation every Lease of a cluster carries, so one label
// selector finds them all and an operator reads them with kubectl.
const (
	// LabelCluster names the StreamCluster a Lease belongs to.
	LabelCluster = "streams.picomq.io/cluster"
	// LabelRole says what a Lease is: RoleSlot or RoleMember.
	LabelRole = "streams.picomq.io/role"
	// LabelManagedBy is the recommended label naming the tool that writes it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value.
	ManagedBy = "picomq"
	// AnnotationDraining is "true" on a member Lease while its broker drains.
	AnnotationDraining = "streams.picomq.io/draining"
	// AnnotationLeaving is "true" on a member Lease while its broker
	// drains to leave the cluster (a scale down): its copies of objects
	// move to the others. A drain without it (a graceful stop) only hands
	// the slots off.
	AnnotationLeaving = "streams.picomq.io/leaving"

	RoleSlot   = "slot"
	RoleMember = "member"
)

// SlotLeaseName is the name of slot n's Lease.
func SlotLeaseName(cluster string, n int) string {
	return cluster + "-slot-" + strconv.Itoa(n)
}

// MemberLeaseName is the name of node's member Lease.
func MemberLeaseName(cluster, node string) string {
	return cluster + "-member-" + node
}

// slotOfLease returns the slot a Lease of this cluster stands for, if it is
// one of the slots 0..slots-1. A Lease named like a slot beyond the count
// (written by brokers configured with more slots) is ignored, not served.
func slotOfLease(cluster string, slots int, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, cluster+"-slot-")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n >= slots {
		return 0, false
	}
	return n, true
}

// nodeOfMemberLease returns the node a member Lease is for.
func nodeOfMemberLease(cluster, name string) (string, bool) {
	node, ok := strings.CutPrefix(name, cluster+"-member-")
	return node, ok && node != ""
}

// leaseLabels returns the labels a Lease of role carries.
func leaseLabels(cluster, role string) map[string]string {
	return map[string]string{LabelCluster: cluster, LabelRole: role, LabelManagedBy: ManagedBy}
}

// holderOf reads spec.holderIdentity, "" when none.
func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// isLeaving reads the leaving annotation of a member Lease.
func isLeaving(l *coordinationv1.Lease) bool {
	return l.Annotations[AnnotationLeaving] == "true"
}

// isDraining reads the draining annotation of a member Lease.
func isDraining(l *coordinationv1.Lease) bool {
	return l.Annotations[AnnotationDraining] == "true"
}
