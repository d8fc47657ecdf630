package controllers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
)

// clusterStatus is the status one reconcile observed: the previous
// conditions updated by the three condition functions (a condition whose
// status did not change keeps its lastTransitionTime), and the counts,
// endpoint, cluster id, leader, configuration, slots and under-replicated
// objects. The cluster id, once recorded, is kept whatever the brokers say
// (recordedClusterID); the rest describes the brokers of that cluster
// (members).
func clusterStatus(c *streamsv1alpha1.StreamCluster, o clusterObservation) streamsv1alpha1.StreamClusterStatus {
	st := c.Status.DeepCopy()
	st.ObservedGeneration = c.Generation
	st.Endpoint = resources.Endpoint(c)
	st.Replicas, st.ReadyReplicas = 0, 0
	if o.sts != nil {
		st.Replicas = o.sts.Status.Replicas
		st.ReadyReplicas = o.sts.Status.ReadyReplicas
	}
	st.ClusterID = recordedClusterID(c.Status.ClusterID, o.brokers)
	o.clusterID = st.ClusterID
	ms := members(o)
	st.MetadataLeader = metadataLeader(ms)
	st.Voters, st.NonVoters = configuration(ms, st.MetadataLeader)
	st.SlotsHeld = slotsHeld(o.brokers)
	st.UnderReplicated = underReplicated(ms, st.MetadataLeader)
	st.TieredStorage = tierStatus(c, o.brokers)
	o.tierReason, o.tierMessage = tierProblem(c, st.TieredStorage)
	for _, cond := range []metav1.Condition{readyCondition(o), progressingCondition(o), degradedCondition(o)} {
		cond.ObservedGeneration = c.Generation
		meta.SetStatusCondition(&st.Conditions, cond)
	}
	return *st
}

// effectiveSlots is the cluster's slot count.
func (o clusterObservation) effectiveSlots() int32 {
	if o.slots < 1 {
		return streamsv1alpha1.DefaultSlots
	}
	return o.slots
}

// answered counts the brokers that answered the status call.
func answered(brokers []brokerObservation) int {
	n := 0
	for _, b := range brokers {
		if b.err == nil {
			n++
		}
	}
	return n
}

// readyCondition: every desired broker is ready, the metadata log has a
// leader and every slot has a live holder. A broker is only ready
// (/readyz) while it knows a metadata leader, but the pods' readiness is
// what the kubelet saw last, not an answer: when brokers answer and none
// knows a leader the cluster is not Ready, and when none answers at all
// (names that do not resolve, refused connections: an operator outside the
// cluster network, say) whether it is cannot be known, so Ready is Unknown
// and says which broker could not be reached and why.
//
// Slots: the operator renders PICOMQ_CLUSTER for every StreamCluster, one
// broker or many, so every broker it runs is a cluster-mode broker, and
// each reports the slots it holds. A slot counts as held when a broker
// that answered (and belongs to the recorded cluster) holds it; a slot
// held only by a broker that did not answer is not known to be served, so
// it counts as unheld. Brokers that report no slots at all (an image from
// before cluster mode: a lone broker holding every slot itself) skip the
// check.
func readyCondition(o clusterObservation) metav1.Condition {
	c := metav1.Condition{Type: streamsv1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	sts := o.sts
	if sts == nil {
		c.Reason, c.Message = streamsv1alpha1.ReasonCreating, "the brokers' StatefulSet does not exist yet"
		return c
	}
	ready, running := sts.Status.ReadyReplicas, sts.Status.Replicas
	// A removed broker is never ready (its /readyz answers 503), whatever
	// the kubelet saw last: the ready pods are at most the others.
	rm := removedBrokers(o.brokers)
	if n := int32(len(rm)); n > 0 && ready > running-n {
		ready = max(running-n, 0)
	}
	count := brokerCount(o, running, ready)
	if ready < o.desired || running > o.desired && ready < running {
		c.Reason, c.Message = streamsv1alpha1.ReasonBrokersNotReady, count
		var see []string
		if len(o.failing) > 0 {
			see = append(see, "failing pods")
		}
		if len(rm) > 0 {
			see = append(see, "removed from the cluster: "+pods(rm))
		}
		if len(see) > 0 {
			c.Message += " (" + strings.Join(see, "; ") + ": see the Degraded condition)"
		}
		return c
	}
	if answered(o.brokers) == 0 {
		c.Status, c.Reason = metav1.ConditionUnknown, streamsv1alpha1.ReasonBrokerUnreachable
		c.Message = count + ", but no broker answered the operator's status call, so whether the metadata log has a leader is unknown"
		if why := unreachable(o.brokers); why != "" {
			c.Message += ": " + why
		}
		return c
	}
	ms := members(o)
	leader := metadataLeader(ms)
	if leader == "" {
		c.Reason = streamsv1alpha1.ReasonNoMetadataLeader
		c.Message = fmt.Sprintf("%s, but the %d brokers that answered know no metadata leader", count, answered(o.brokers))
		if why := notMembers(o); why != "" {
			c.Message += " of this cluster (" + why + ": see the Degraded condition)"
		}
		return c
	}
	if cov := coverage(ms, o.effectiveSlots()); cov.reported && cov.held < cov.want {
		c.Reason = streamsv1alpha1.ReasonSlotsUnheld
		c.Message = fmt.Sprintf("%s; metadata leader %s, but %d of %d slots have no live holder (the brokers that answered hold %d)",
			count, leader, cov.want-cov.held, cov.want, cov.held)
		if why := notCounted(o); why != "" {
			c.Message += "; " + why
		}
		return c
	}
	if sh := share(ms); !sh.even() {
		c.Reason = streamsv1alpha1.ReasonSlotsUnbalanced
		c.Message = fmt.Sprintf("%s; metadata leader %s; every slot has a live holder, but the shares are not even yet: %s (slots move through the hand-off until the shares differ by at most one)",
			count, leader, sh)
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady
	c.Message = count + "; metadata leader " + leader
	return c
}

// notCounted names the brokers whose slots were not counted: those that did
// not answer, those of another cluster, and those the cluster removed.
func notCounted(o clusterObservation) string {
	var silent, others, gone []string
	for _, b := range o.brokers {
		switch {
		case b.err != nil:
			silent = append(silent, b.pod)
		case removed(b):
			gone = append(gone, b.pod)
		case foreign(b, o.clusterID):
			others = append(others, b.pod)
		}
	}
	var parts []string
	if len(silent) > 0 {
		parts = append(parts, fmt.Sprintf("not answering: %s", strings.Join(silent, ", ")))
	}
	if len(others) > 0 {
		parts = append(parts, fmt.Sprintf("of another cluster: %s", strings.Join(others, ", ")))
	}
	if len(gone) > 0 {
		parts = append(parts, fmt.Sprintf("removed from the cluster: %s", strings.Join(gone, ", ")))
	}
	return strings.Join(parts, "; ")
}

// notMembers counts the brokers that answered but are not members of this
// cluster: of another one, or removed from it; "" when none.
func notMembers(o clusterObservation) string {
	others, gone := 0, 0
	for _, b := range o.brokers {
		switch {
		case removed(b):
			gone++
		case foreign(b, o.clusterID):
			others++
		}
	}
	var parts []string
	if others > 0 {
		parts = append(parts, fmt.Sprintf("%d of them belong to another", others))
	}
	if gone > 0 {
		parts = append(parts, fmt.Sprintf("%d of them %s removed from it", gone, plural(gone, "was", "were")))
	}
	return strings.Join(parts, ", ")
}

// pods names brokers, comma-separated.
func pods(brokers []brokerObservation) string {
	names := make([]string, len(brokers))
	for i, b := range brokers {
		names[i] = b.pod
	}
	return strings.Join(names, ", ")
}

// brokerCount words the brokers' counts for people. Against the desired
// count while the StatefulSet has as many pods; while it has more (a
// scale-down held, draining, or under way) the desired count alone would
// read "3 of 1 brokers ready", so the brokers that run are counted
// against themselves and the scale-down named.
func brokerCount(o clusterObservation, running, ready int32) string {
	if running <= o.desired {
		return fmt.Sprintf("%d of %d %s ready", ready, o.desired, plural(int(o.desired), "broker", "brokers"))
	}
	state := "under way"
	switch {
	case o.plan.blocked != "":
		state = "held"
	case o.plan.draining != "":
		state = "waiting for drains"
	}
	return fmt.Sprintf("scale-down to %d %s: %d brokers running, %d ready", o.desired, state, running, ready)
}

// unreachable names the brokers that did not answer and why (the first
// few: one line each would be as long as the cluster).
func unreachable(brokers []brokerObservation) string {
	const shown = 3
	var parts []string
	n := 0
	for _, b := range brokers {
		if b.err == nil {
			continue
		}
		n++
		if n <= shown {
			parts = append(parts, fmt.Sprintf("broker %s could not be reached: %s", b.pod, cause(b.err)))
		}
	}
	if n > shown {
		parts = append(parts, fmt.Sprintf("and %d more", n-shown))
	}
	return strings.Join(parts, "; ")
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// progressingCondition: a rollout, a scaling or a drain is under way.
func progressingCondition(o clusterObservation) metav1.Condition {
	c := metav1.Condition{Type: streamsv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue}
	sts := o.sts
	switch {
	case o.paused:
		c.Status, c.Reason = metav1.ConditionFalse, streamsv1alpha1.ReasonPaused
		c.Message = "spec.paused is true: the operator changes no child object until it is false"
	case o.plan.blocked != "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, streamsv1alpha1.ReasonScaleDownBlocked, o.plan.blocked
	case o.plan.draining != "":
		c.Reason, c.Message = streamsv1alpha1.ReasonDraining, o.plan.draining
	case sts == nil:
		c.Reason, c.Message = streamsv1alpha1.ReasonCreating, "creating the brokers"
	default:
		reason, msg := rollout(sts)
		if reason == "" {
			reason, msg = settling(o)
		}
		if reason == "" {
			c.Status, c.Reason = metav1.ConditionFalse, streamsv1alpha1.ReasonStable
			c.Message = fmt.Sprintf("%d brokers at the current revision", sts.Status.Replicas)
		} else {
			c.Reason, c.Message = reason, msg
		}
	}
	return c
}

// settling says what the brokers still do by themselves once every pod
// runs the latest revision: slots moving to even the shares, objects
// copied again to reach the replication factor; "" when neither.
func settling(o clusterObservation) (reason, message string) {
	ms := members(o)
	if sh := share(ms); !sh.even() {
		return streamsv1alpha1.ReasonRebalancing, "slots move to even the brokers' shares: " + sh.String()
	}
	if n := underReplicated(ms, metadataLeader(ms)); n != nil && *n > 0 {
		return streamsv1alpha1.ReasonRepairing, fmt.Sprintf("%d committed %s fewer copies on the current members than the replication factor asks: the metadata leader copies %s again from a surviving replica",
			*n, plural(int(*n), "object has", "objects have"), plural(int(*n), "it", "them"))
	}
	return "", ""
}

// rollout reads a StatefulSet's status: what it is still doing, or "".
func rollout(sts *appsv1.StatefulSet) (reason, message string) {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	s := sts.Status
	switch {
	case s.ObservedGeneration < sts.Generation:
		return streamsv1alpha1.ReasonRollingUpdate, fmt.Sprintf("the StatefulSet controller has not yet seen generation %d", sts.Generation)
	case s.Replicas < want:
		return streamsv1alpha1.ReasonScalingUp, fmt.Sprintf("%d of %d brokers created", s.Replicas, want)
	case s.Replicas > want:
		return streamsv1alpha1.ReasonScalingDown, fmt.Sprintf("%d brokers, going to %d", s.Replicas, want)
	case s.UpdatedReplicas < want || (s.UpdateRevision != "" && s.CurrentRevision != s.UpdateRevision):
		return streamsv1alpha1.ReasonRollingUpdate, fmt.Sprintf("%d of %d brokers at revision %s", s.UpdatedReplicas, want, s.UpdateRevision)
	case s.ReadyReplicas < want:
		return streamsv1alpha1.ReasonBrokersNotStarted, fmt.Sprintf("%d of %d brokers ready", s.ReadyReplicas, want)
	}
	return "", ""
}

// degradedCondition: something needs a person: a broker of another
// cluster, a broker the cluster removed for good, a spec the operator
// cannot build, a child it cannot apply, broker pods that fail (a crash
// loop, an image that cannot be pulled), a scale-down it holds, a storage
// change a StatefulSet cannot take, an object storage the brokers cannot
// use.
func degradedCondition(o clusterObservation) metav1.Condition {
	c := metav1.Condition{Type: streamsv1alpha1.ConditionDegraded, Status: metav1.ConditionTrue}
	// A broker of another metadata log comes first: it may hold this
	// cluster's slot Leases, and it is what a person must look at.
	// A removed broker comes next: it serves nothing until a person sets
	// its data aside, and nothing else will change that.
	mismatch, gone := clusterIDMismatch(o), memberRemoved(o)
	switch {
	case mismatch != "":
		c.Reason, c.Message = streamsv1alpha1.ReasonClusterIDMismatch, mismatch
	case gone != "":
		c.Reason, c.Message = streamsv1alpha1.ReasonMemberRemoved, gone
	case failsafe(o) != "":
		c.Reason, c.Message = streamsv1alpha1.ReasonFailsafe, failsafe(o)
	case o.specErr != nil:
		c.Reason, c.Message = streamsv1alpha1.ReasonInvalidSpec, o.specErr.Error()
	case o.secret != nil:
		c.Reason, c.Message = o.secret.reason, o.secret.message
	case o.applyErr != nil:
		c.Reason, c.Message = streamsv1alpha1.ReasonApplyFailed, o.applyErr.Error()
	case len(o.failing) > 0:
		c.Reason, c.Message = streamsv1alpha1.ReasonBrokersFailing, failingMessage(o.failing, o.pods)
	case o.plan.blocked != "":
		c.Reason, c.Message = streamsv1alpha1.ReasonScaleDownBlocked, o.plan.blocked
	case o.storageChange != "":
		c.Reason, c.Message = streamsv1alpha1.ReasonStorageImmutable, o.storageChange
	case o.tierReason != "":
		c.Reason, c.Message = o.tierReason, o.tierMessage
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected, "nothing needs attention"
	}
	return c
}

// transitionEvents records an event for every condition that changed
// reason: the cluster became Ready or stopped being, was paused or
// resumed, started draining, became Degraded (a Warning naming why). A
// condition that stays as it was records nothing, so a held scale-down or a
// retried failure does not repeat its event on every reconcile; the one
// exception is a broker newly removed while another already was (Degraded
// stays MemberRemoved), which records its Warning once too.
func (r *StreamClusterReconciler) transitionEvents(c *streamsv1alpha1.StreamCluster, old *streamsv1alpha1.StreamClusterStatus, o clusterObservation) {
	changed := func(typ string) (now *metav1.Condition, ok bool) {
		now = meta.FindStatusCondition(c.Status.Conditions, typ)
		was := meta.FindStatusCondition(old.Conditions, typ)
		if now == nil {
			return nil, false
		}
		return now, was == nil || was.Status != now.Status || was.Reason != now.Reason
	}
	if now, ok := changed(streamsv1alpha1.ConditionReady); ok {
		wasReady := meta.IsStatusConditionTrue(old.Conditions, streamsv1alpha1.ConditionReady)
		switch {
		case now.Status == metav1.ConditionTrue:
			event(r.Recorder, c, eventNormal, "Ready", "Observe", "%s", now.Message)
		case wasReady:
			event(r.Recorder, c, eventWarning, "NotReady", "Observe", "%s: %s", now.Reason, now.Message)
		}
	}
	if now, ok := changed(streamsv1alpha1.ConditionProgressing); ok {
		was := meta.FindStatusCondition(old.Conditions, streamsv1alpha1.ConditionProgressing)
		switch {
		case now.Reason == streamsv1alpha1.ReasonPaused:
			event(r.Recorder, c, eventNormal, "Paused", "Pause", "%s", now.Message)
		case was != nil && was.Reason == streamsv1alpha1.ReasonPaused:
			event(r.Recorder, c, eventNormal, "Resumed", "Pause", "spec.paused is false: the operator manages the children again")
		}
		if now.Reason == streamsv1alpha1.ReasonDraining {
			event(r.Recorder, c, eventNormal, "Draining", "ScaleDown", "%s", now.Message)
		}
	}
	if now, ok := changed(streamsv1alpha1.ConditionDegraded); ok && now.Status == metav1.ConditionTrue {
		event(r.Recorder, c, eventWarning, now.Reason, "Reconcile", "%s", now.Message)
	} else if removedAgain(now, meta.FindStatusCondition(old.Conditions, streamsv1alpha1.ConditionDegraded), o) {
		// Still MemberRemoved, but another broker came back removed: it
		// is news too.
		event(r.Recorder, c, eventWarning, now.Reason, "Reconcile", "%s", now.Message)
	}
	r.tierEvents(c, old)
	if old.ClusterID == "" && c.Status.ClusterID != "" {
		event(r.Recorder, c, eventNormal, "ClusterIDRecorded", "Observe",
			"the brokers formed cluster %s: recorded in status.clusterId and passed to the brokers (ConfigMap %s), so that a broker on an empty data directory joins it", c.Status.ClusterID, resources.ClusterIDConfigMapName(c))
	}
}

// removedAgain reports whether Degraded was and is MemberRemoved and names
// a removed broker (of o) that it did not name before.
func removedAgain(now, was *metav1.Condition, o clusterObservation) bool {
	if now == nil || was == nil || now.Status != metav1.ConditionTrue || was.Status != metav1.ConditionTrue ||
		now.Reason != streamsv1alpha1.ReasonMemberRemoved || was.Reason != streamsv1alpha1.ReasonMemberRemoved {
		return false
	}
	return len(newlyRemoved(o, was.Message)) > 0
}
