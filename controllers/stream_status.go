package controllers

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

// withReady sets a Stream's Ready condition (its lastTransitionTime kept
// when its status does not change), which describes the current
// generation whatever it says.
func withReady(ready metav1.Condition) func(*streamsv1alpha1.Stream) {
	return func(s *streamsv1alpha1.Stream) {
		ready.Type = streamsv1alpha1.ConditionReady
		ready.ObservedGeneration = s.Generation
		meta.SetStatusCondition(&s.Status.Conditions, ready)
	}
}

// withApplied records that the current spec is fully applied: the
// generation, and the policy now on the broker, which the next sync tells
// drift from. Only a sync that made the broker's stream what the spec asks
// writes it: a failed or refused one leaves the last applied generation
// and policy, so that the next sync reads a user's change as a change, not
// as drift.
func withApplied(policy string) func(*streamsv1alpha1.Stream) {
	return func(s *streamsv1alpha1.Stream) {
		s.Status.ObservedGeneration = s.Generation
		s.Status.AppliedPolicy = policy
	}
}

// withBrokerInfo copies the broker's view of the stream into a Stream's
// status; nil (unknown) leaves it as it was.
func withBrokerInfo(info *client.StreamInfo) func(*streamsv1alpha1.Stream) {
	return func(s *streamsv1alpha1.Stream) {
		if info != nil {
			applyBrokerInfo(&s.Status, info)
		}
	}
}

// applyBrokerInfo copies the broker's view of the stream into st: every
// partition's internal stream, closed, and when it expires.
func applyBrokerInfo(st *streamsv1alpha1.StreamStatus, info *client.StreamInfo) {
	parts := make([]streamsv1alpha1.PartitionStatus, 0, len(info.Partitions))
	for _, p := range info.Partitions {
		parts = append(parts, partitionStatus(p))
	}
	st.Partitions = parts
	st.LocalBytes, st.TieredBytes = 0, 0
	for _, p := range parts {
		st.LocalBytes += p.LocalBytes
		st.TieredBytes += p.TieredBytes
	}
	st.LocalSize, st.TieredSize = humanBytes(st.LocalBytes), humanBytes(st.TieredBytes)
	st.Closed = info.Closed
	st.ExpiresAt = nil
	switch {
	case !info.ExpiresAt.IsZero():
		st.ExpiresAt = &metav1.Time{Time: info.ExpiresAt.Truncate(time.Second)}
	case info.TTL > 0 && !info.LastAccess.IsZero():
		st.ExpiresAt = &metav1.Time{Time: info.LastAccess.Add(info.TTL).Truncate(time.Second)}
	}
}

// partitionStatus is one partition as status shows it. The broker reports
// a partition no broker has opened yet with epoch -1 and no owner; status
// says NotOpened and leaves both out rather than show a -1 that reads like
// a fault.
func partitionStatus(p wire.PartitionInfo) streamsv1alpha1.PartitionStatus {
	ps := streamsv1alpha1.PartitionStatus{
		Partition:   int32(p.Partition),
		InternalID:  int64(p.ID),
		Start:       int64(p.Start),
		End:         int64(p.End),
		LocalBytes:  p.LocalBytes,
		TieredBytes: p.TieredBytes,
	}
	switch {
	case p.Epoch < 0:
		ps.State = streamsv1alpha1.PartitionNotOpened
		return ps
	case p.Open:
		ps.State = streamsv1alpha1.PartitionOpen
	default:
		ps.State = streamsv1alpha1.PartitionClosed
	}
	ps.Epoch = ptr.To(p.Epoch)
	ps.Owner = p.Owner
	return ps
}

// streamReady is Ready=True: the stream exists as asked. A stream found
// deleted out of band and recreated says so until the spec changes.
func streamReady(s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster, info client.StreamInfo, recreated bool) metav1.Condition {
	if recreated {
		return metav1.Condition{Status: metav1.ConditionTrue, Reason: streamsv1alpha1.ReasonRecreated, Message: fmt.Sprintf(
			"stream %s was deleted on the broker outside the operator and recreated at %s: its offsets restarted at 0",
			info.Name, time.Now().UTC().Format(time.RFC3339))}
	}
	if was := meta.FindStatusCondition(s.Status.Conditions, streamsv1alpha1.ConditionReady); was != nil &&
		was.Reason == streamsv1alpha1.ReasonRecreated && was.ObservedGeneration == s.Generation {
		return metav1.Condition{Status: metav1.ConditionTrue, Reason: streamsv1alpha1.ReasonRecreated, Message: was.Message}
	}
	return metav1.Condition{Status: metav1.ConditionTrue, Reason: streamsv1alpha1.ReasonCreated, Message: fmt.Sprintf(
		"stream %s exists on cluster %s with %d partitions", info.Name, c.Name, info.PartitionCount)}
}

// humanBytes is a byte count as kubectl get shows it: binary units with
// one decimal below ten (0, 512, 1.5Ki, 12Mi, 3.2Gi), never longer than
// six characters, so a column reads at a glance; the exact count is
// beside it in status.
func humanBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatInt(n, 10)
	}
	v, u := float64(n), -1
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if v < 10 {
		// One decimal, truncated so that 1023.99Ki never reads 1024Ki.
		s := strconv.FormatFloat(math.Floor(v*10)/10, 'f', -1, 64)
		return s + units[u:u+1] + "i"
	}
	return strconv.FormatInt(int64(v), 10) + units[u:u+1] + "i"
}

// tieringNotConfigured: the Stream asks for tiering on a cluster without
// object storage; nothing is asked of the brokers.
func tieringNotConfigured(s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonTieringNotConfigured, Message: fmt.Sprintf(
		"spec.tiering is Enabled but StreamCluster %s has no spec.tieredStorage: stream %s is left as it is on the brokers; set the cluster's tieredStorage, or remove spec.tiering",
		clusterRefString(s), s.StreamName())}
}

func clusterNotFound(s *streamsv1alpha1.Stream) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonClusterNotFound, Message: fmt.Sprintf(
		"StreamCluster %s does not exist in namespace %s", s.Spec.ClusterRef.Name, s.ClusterNamespace())}
}

// clusterNotWatched: the cluster's namespace is not one the operator
// watches (its --namespaces), so it cannot see the cluster.
func clusterNotWatched(s *streamsv1alpha1.Stream) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonClusterNotFound, Message: fmt.Sprintf(
		"the operator does not watch namespace %s, so it cannot see StreamCluster %s: add the namespace to the operator's --namespaces",
		s.ClusterNamespace(), clusterRefString(s))}
}

// namespaceNotAllowed: the cluster does not admit the Stream's namespace
// (denied says which cluster and rule); the broker's stream is left alone.
func namespaceNotAllowed(s *streamsv1alpha1.Stream, denied string) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonNamespaceNotAllowed, Message: fmt.Sprintf(
		"%s: the operator neither creates, updates nor deletes stream %s for this Stream until the cluster's rule or this namespace's labels admit it",
		denied, s.StreamName())}
}

func clusterNotReady(c *streamsv1alpha1.StreamCluster, endpoint string, err error) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonClusterNotReady, Message: fmt.Sprintf(
		"StreamCluster %s is not Ready and its brokers could not be reached at %s: %s", c.Name, endpoint, cause(err))}
}

// brokerUnreachable: the cluster is Ready, but its admin API could not be
// reached from the operator.
func brokerUnreachable(c *streamsv1alpha1.StreamCluster, endpoint, op string, err error) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonBrokerUnreachable, Message: fmt.Sprintf(
		"the brokers of cluster %s could not be reached at %s (%s): %s", c.Name, endpoint, op, cause(err))}
}

// brokerError: the broker answered a refusal (or a failure); the message
// starts with its code.
func brokerError(c *streamsv1alpha1.StreamCluster, endpoint, op string, err error) metav1.Condition {
	code := brokeradmin.ErrorCode(err)
	if code == "" {
		code = "UNKNOWN"
	}
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonBrokerError, Message: fmt.Sprintf(
		"%s: %s on cluster %s (%s) failed: %v", code, op, c.Name, endpoint, err)}
}

func conflict(why string) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonConflict, Message: why}
}

func invalidSpec(err error) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonInvalidSpec, Message: err.Error()}
}

func unmanaged(s *streamsv1alpha1.Stream) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionUnknown, Reason: streamsv1alpha1.ReasonUnmanaged, Message: fmt.Sprintf(
		"annotation %s is \"false\": the operator does not reconcile stream %s", AnnotationManaged, s.StreamName())}
}

func timeOrNone(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}
