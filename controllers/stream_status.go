package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

// withReady sets a Stream's Ready condition (its lastTransitionTime kept
// when its status does not change) and the generation observed.
func withReady(ready metav1.Condition) func(*streamsv1alpha1.Stream) {
	return func(s *streamsv1alpha1.Stream) {
		s.Status.ObservedGeneration = s.Generation
		ready.Type = streamsv1alpha1.ConditionReady
		ready.ObservedGeneration = s.Generation
		meta.SetStatusCondition(&s.Status.Conditions, ready)
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
		parts = append(parts, streamsv1alpha1.PartitionStatus{
			Partition:  int32(p.Partition),
			InternalID: int64(p.ID),
			Epoch:      p.Epoch,
			Owner:      p.Owner,
			Start:      int64(p.Start),
			End:        int64(p.End),
		})
	}
	st.Partitions = parts
	st.Closed = info.Closed
	st.ExpiresAt = nil
	switch {
	case !info.ExpiresAt.IsZero():
		st.ExpiresAt = &metav1.Time{Time: info.ExpiresAt.Truncate(time.Second)}
	case info.TTL > 0 && !info.LastAccess.IsZero():
		st.ExpiresAt = &metav1.Time{Time: info.LastAccess.Add(info.TTL).Truncate(time.Second)}
	}
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

func clusterNotFound(s *streamsv1alpha1.Stream) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonClusterNotFound, Message: fmt.Sprintf(
		"StreamCluster %s does not exist in namespace %s", s.Spec.ClusterRef.Name, s.Namespace)}
}

func clusterNotReady(c *streamsv1alpha1.StreamCluster, endpoint string, err error) metav1.Condition {
	return metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonClusterNotReady, Message: fmt.Sprintf(
		"StreamCluster %s is not Ready and its admin API at %s does not answer: %v", c.Name, endpoint, err)}
}

func brokerError(c *streamsv1alpha1.StreamCluster, endpoint, op string, err error) metav1.Condition {
	code := brokeradmin.ErrorCode(err)
	if brokeradmin.IsUnreachable(err) {
		code = "UNREACHABLE"
	}
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
