package controllers

// Unit tests (the -short tier) of how the status tells of a broker the
// cluster removed for good: Degraded MemberRemoved naming it and what to
// do, and a broker that counts for nothing (not ready, no slots, no view
// of the leader or of the configuration), plus its Warning event, once.

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// removedMember is what a removed broker answers (cmd/broker's
// serveRemoved), with, to show that none of it counts, a leader, voters,
// slots and an under-replicated count it should not have.
func removedMember(i int) brokerObservation {
	b := member(i, "c", "demo-9~stale", span(0, 64)...)
	b.status.RaftState, b.status.Removed = "Removed", true
	b.status.Problem = "MEMBER_REMOVED (0.16.1.14): This broker was removed from the cluster [member=" + b.status.MemberID + "]"
	b.status.Voters = []string{"demo-9~stale"}
	b.status.UnderReplicated = ptr.To[int32](99)
	return b
}

func TestRemovedBrokerCountsForNothing(t *testing.T) {
	t.Parallel()
	const l = "demo-0~inc0"
	b0, b1 := member(0, "c", l, span(0, 32)...), member(1, "c", l, span(32, 48)...)
	b0.status.Voters = []string{"demo-0~inc0", "demo-1~inc1"}
	b0.status.UnderReplicated = ptr.To[int32](4)
	// The kubelet has not seen its /readyz fail yet: 3 of 3 pods ready.
	o := readyObservation(b0, b1, removedMember(2))

	r := readyCondition(o)
	if r.Status != metav1.ConditionFalse || r.Reason != streamsv1alpha1.ReasonBrokersNotReady ||
		!containsAll(r.Message, "2 of 3 brokers ready", "removed from the cluster: demo-2", "see the Degraded condition") {
		t.Errorf("Ready = %s/%s (%s): a removed broker is never ready", r.Status, r.Reason, r.Message)
	}
	if cov := coverage(members(o), o.effectiveSlots()); cov.held != 48 {
		t.Errorf("%d slots held, want the members' 48: the removed broker holds none", cov.held)
	}
	st := clusterStatus(testCluster(), o)
	if st.MetadataLeader != l || !slices.Equal(st.Voters, b0.status.Voters) || st.UnderReplicated == nil || *st.UnderReplicated != 4 {
		t.Errorf("leader %q, voters %v, underReplicated %v: the removed broker's view counted", st.MetadataLeader, st.Voters, st.UnderReplicated)
	}
	for _, s := range st.SlotsHeld {
		if s.Broker == "demo-2" {
			t.Errorf("slotsHeld lists the removed broker: %v", st.SlotsHeld)
		}
	}
	if d := meta.FindStatusCondition(st.Conditions, streamsv1alpha1.ConditionDegraded); d == nil || d.Reason != streamsv1alpha1.ReasonMemberRemoved {
		t.Errorf("Degraded %+v, want MemberRemoved", d)
	}

	// Among the brokers that answer but are not members, it is said
	// apart from one of another cluster.
	o = readyObservation(member(0, "c", ""), member(1, "other", ""), removedMember(2))
	o.clusterID = "c"
	if got := notMembers(o); got != "1 of them belong to another, 1 of them was removed from it" {
		t.Errorf("notMembers %q", got)
	}
	if got := notCounted(o); got != "of another cluster: demo-1; removed from the cluster: demo-2" {
		t.Errorf("notCounted %q", got)
	}
	// A held scale-down: counted against the brokers that run.
	o.brokers = []brokerObservation{member(0, "c", ""), removedMember(1)}
	o.desired, o.sts = 1, stsWith(2, 2, nil)
	o.plan.blocked = "no drain"
	if r := readyCondition(o); r.Reason != streamsv1alpha1.ReasonBrokersNotReady || !containsAll(r.Message, "2 brokers running, 1 ready", "removed from the cluster: demo-1") {
		t.Errorf("Ready = %s/%s (%s)", r.Status, r.Reason, r.Message)
	}
}

func TestMemberRemovedDegraded(t *testing.T) {
	t.Parallel()
	const l = "demo-0~inc0"
	o := readyObservation(member(0, "c", l, span(0, 64)...), member(1, "c", l), removedMember(2))
	o.clusterID = "c"
	d := degradedCondition(o)
	if d.Status != metav1.ConditionTrue || d.Reason != streamsv1alpha1.ReasonMemberRemoved ||
		!containsAll(d.Message, "broker demo-2 (member demo-2~inc2) was removed from the cluster for good", "serves nothing",
			"set its data directory aside or wipe it", "kubectl delete pvc data-demo-2 --wait=false && kubectl delete pod demo-2",
			"join again as a new member", "demo-2 says: MEMBER_REMOVED") {
		t.Errorf("Degraded = %s/%s (%s)", d.Status, d.Reason, d.Message)
	}
	// It outranks a lesser trouble; a broker of another metadata log
	// outranks it.
	o.plan.blocked = "no drain"
	if d := degradedCondition(o); d.Reason != streamsv1alpha1.ReasonMemberRemoved {
		t.Errorf("Degraded reason %s, want MemberRemoved before a held scale-down", d.Reason)
	}
	o.brokers[1].status.ClusterID = "other"
	if d := degradedCondition(o); d.Reason != streamsv1alpha1.ReasonClusterIDMismatch {
		t.Errorf("Degraded reason %s, want the mismatch first", d.Reason)
	}

	// Two: both named, both PVCs in one command.
	o = readyObservation(member(0, "c", l, span(0, 64)...), removedMember(1), removedMember(2))
	two := degradedCondition(o).Message
	if !containsAll(two, "brokers demo-1 (member demo-1~inc1), demo-2 (member demo-2~inc2) were removed", "serve nothing",
		"kubectl delete pvc data-demo-1 data-demo-2 --wait=false && kubectl delete pod demo-1 demo-2", "demo-1 says:", "demo-2 says:") {
		t.Errorf("two removed: %s", two)
	}
	// The broker's own account is quoted, not a wall of it.
	long := removedMember(1)
	long.status.Problem = strings.Repeat("x", 5000)
	if msg := memberRemoved(readyObservation(long)); len(msg) > 1500 {
		t.Errorf("message of %d bytes", len(msg))
	}
	// None removed: nothing to say.
	if msg := memberRemoved(readyObservation(member(0, "c", l))); msg != "" {
		t.Errorf("no broker removed: %q", msg)
	}
}

// The Warning comes once when a broker appears removed (Degraded turns
// MemberRemoved), once more when another one does while the first still
// is, and not at the looks in between, nor when one of two is set right.
func TestMemberRemovedEventOnce(t *testing.T) {
	t.Parallel()
	const l = "demo-0~inc0"
	rec := &captureRecorder{}
	r := &StreamClusterReconciler{Recorder: rec}
	c := testCluster()
	look := func(brokers ...brokerObservation) {
		o := readyObservation(brokers...)
		old := c.Status.DeepCopy()
		c.Status = clusterStatus(c, o)
		r.transitionEvents(c, old, o)
	}
	warnings := func() int {
		n := 0
		for _, e := range rec.find("demo", streamsv1alpha1.ReasonMemberRemoved) {
			if e.Type == eventWarning {
				n++
			}
		}
		return n
	}
	b0, b1 := member(0, "c", l, span(0, 64)...), member(1, "c", l)
	look(b0, b1, member(2, "c", l))
	look(b0, b1, removedMember(2))
	look(b0, b1, removedMember(2))
	if n := warnings(); n != 1 {
		t.Fatalf("%d MemberRemoved warnings after two looks at demo-2 removed, want 1; events:\n%s", n, rec)
	}
	look(b0, removedMember(1), removedMember(2))
	look(b0, removedMember(1), removedMember(2))
	if n := warnings(); n != 2 {
		t.Fatalf("%d MemberRemoved warnings once demo-1 was removed too, want 2; events:\n%s", n, rec)
	}
	if e := rec.find("demo", streamsv1alpha1.ReasonMemberRemoved); !strings.Contains(e[1].Note, "demo-1 (member demo-1~inc1)") {
		t.Errorf("the second warning does not name demo-1: %s", e[1].Note)
	}
	look(b0, b1, removedMember(2))
	if n := warnings(); n != 2 {
		t.Errorf("%d MemberRemoved warnings once demo-1 joined again, want still 2; events:\n%s", n, rec)
	}
	look(b0, b1, member(2, "c", l))
	if n := warnings(); n != 2 || meta.IsStatusConditionTrue(c.Status.Conditions, streamsv1alpha1.ConditionDegraded) {
		t.Errorf("%d warnings, Degraded %v once every broker is a member again", n, c.Status.Conditions)
	}

	// A member id that begins another's is not mistaken for it.
	prev := memberRemoved(readyObservation(removedMember(1)))
	b := removedMember(1)
	b.status.MemberID += "0"
	if got := newlyRemoved(readyObservation(b), prev); !slices.Equal(got, []string{"demo-1"}) {
		t.Errorf("newlyRemoved %v, want demo-1 (member demo-1~inc10 is not demo-1~inc1)", got)
	}
}
