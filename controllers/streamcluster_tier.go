package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

// tierStatus sums up the brokers' views of the object storage (GET
// /v1/admin/tier) for status.tieredStorage: reachable while every broker
// that reported reaches it, the first failing broker's error, the pending
// uploads of all, and the tiered bytes (the same on every broker, from the
// metadata log: the largest, the freshest). nil without spec.tieredStorage
// or while no broker reported.
func tierStatus(c *streamsv1alpha1.StreamCluster, brokers []brokerObservation) *streamsv1alpha1.TieredStorageStatus {
	if c.Spec.TieredStorage == nil {
		return nil
	}
	var st *streamsv1alpha1.TieredStorageStatus
	for _, b := range brokers {
		t := b.tier
		if t == nil || !t.Enabled {
			continue
		}
		if st == nil {
			st = &streamsv1alpha1.TieredStorageStatus{Reachable: true}
		}
		st.UploadsPending += int64(t.UploadsPending)
		st.TieredBytes = max(st.TieredBytes, t.TieredBytes)
		if t.Reachable || !st.Reachable {
			continue
		}
		st.Reachable = false
		st.LastError = &streamsv1alpha1.TieredStorageError{Broker: b.pod, Code: brokeradmin.CodeTierUnreachable}
		if e := t.LastError; e != nil {
			st.LastError.Code, st.LastError.Message = e.Code, clip(e.Message, maxTierMessage)
		}
	}
	return st
}

// maxTierMessage bounds the broker's error text in status (an S3 answer
// may quote a whole XML body).
const maxTierMessage = 512

// tierProblem is the Degraded reason and message of a cluster whose
// brokers cannot use its object storage, or "" when they can (or none
// reported). A refusal (TIER_REFUSED: credentials, bucket) needs a person
// to change something; anything else is reported as unreachable.
func tierProblem(c *streamsv1alpha1.StreamCluster, st *streamsv1alpha1.TieredStorageStatus) (reason, message string) {
	if st == nil || st.Reachable || st.LastError == nil {
		return "", ""
	}
	t := c.Spec.TieredStorage
	e := st.LastError
	where := fmt.Sprintf("bucket %s at %s", t.Bucket, t.Endpoint)
	if e.Code == brokeradmin.CodeTierRefused {
		return streamsv1alpha1.ReasonTieredStorageRefused, fmt.Sprintf(
			"broker %s: the object storage refuses the brokers (%s): %s: %s; check the bucket and Secret %s (the brokers re-read it as it changes); sealed segments stay on the brokers' disks meanwhile",
			e.Broker, where, e.Code, orUnknown(e.Message), t.CredentialsSecret.Name)
	}
	return streamsv1alpha1.ReasonTieredStorageUnreachable, fmt.Sprintf(
		"broker %s cannot reach the object storage (%s): %s: %s; sealed segments stay on the brokers' disks and reads of tiered ranges fail until it answers",
		e.Broker, where, e.Code, orUnknown(e.Message))
}

func orUnknown(s string) string {
	if s == "" {
		return "no detail"
	}
	return s
}

// tierDegraded: Degraded says the brokers cannot use the object storage,
// which no Kubernetes event will announce the end of.
func tierDegraded(st *streamsv1alpha1.StreamClusterStatus) bool {
	d := meta.FindStatusCondition(st.Conditions, streamsv1alpha1.ConditionDegraded)
	return d != nil && d.Status == metav1.ConditionTrue &&
		(d.Reason == streamsv1alpha1.ReasonTieredStorageUnreachable || d.Reason == streamsv1alpha1.ReasonTieredStorageRefused)
}

// tierEvents records the object storage becoming reachable again (its
// loss is Degraded's Warning).
func (r *StreamClusterReconciler) tierEvents(c *streamsv1alpha1.StreamCluster, old *streamsv1alpha1.StreamClusterStatus) {
	was, now := old.TieredStorage, c.Status.TieredStorage
	if was != nil && !was.Reachable && now != nil && now.Reachable {
		event(r.Recorder, c, eventNormal, "TieredStorageReachable", "Observe",
			"every broker that reported reaches bucket %s at %s again", c.Spec.TieredStorage.Bucket, c.Spec.TieredStorage.Endpoint)
	}
}
