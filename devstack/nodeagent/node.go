package nodeagent

import (
	"context"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Heartbeat timings, the kubelet's: the node controller marks a node whose
// Lease is not renewed for 40 s NotReady and evicts its pods.
const (
	heartbeatPeriod      = 10 * time.Second
	nodeLeaseDurationSec = 40
)

// KubeletVersion is what the nodes report as their kubelet.
const KubeletVersion = "v1.37.2-picomq-dev"

// runNode registers node name and keeps its Ready condition and its Lease
// renewed until ctx ends.
func (a *Agent) runNode(ctx context.Context, name string) {
	tick := time.NewTicker(heartbeatPeriod)
	defer tick.Stop()
	for {
		if err := a.heartbeat(ctx, name); err != nil && ctx.Err() == nil {
			a.log.Error(err, "node heartbeat", "node", name)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) heartbeat(ctx context.Context, name string) error {
	nodes := a.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   runtime.GOOS,
				corev1.LabelArchStable: runtime.GOARCH,
				"picomq.dev/agent":     "true",
			},
		}}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	node.Status = nodeStatus(node.Status, a.opts.NodeIP, now)
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return a.renewLease(ctx, node, now)
}

// nodeStatus is the status a healthy agent node reports: Ready, no
// pressure, the machine's capacity, its address.
func nodeStatus(old corev1.NodeStatus, ip string, now metav1.Time) corev1.NodeStatus {
	var mem int64 = 8 << 30
	if m := memTotal(); m > 0 {
		mem = m
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "picomq dev node agent is posting ready status"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          KubeletVersion,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "picomq-dev://processes",
		},
	}
}

// renewLease renews the node's Lease in kube-node-lease, owned by the
// Node as the kubelet's is.
func (a *Agent) renewLease(ctx context.Context, node *corev1.Node, now metav1.Time) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	micro := metav1.NewMicroTime(now.Time)
	lease, err := leases.Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: node.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(node.Name),
				LeaseDurationSeconds: ptr.To[int32](nodeLeaseDurationSec),
				RenewTime:            &micro,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity = ptr.To(node.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](nodeLeaseDurationSec)
	lease.Spec.RenewTime = &micro
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
