package controllers

// Unit tests (the -short tier) of the cluster view: the cluster id, the
// leader and configuration, slot coverage and under-replicated objects,
// and the Ready and Degraded conditions they make.

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

// member is a cluster-mode broker's answer: pod demo-<i>, member id
// demo-<i>~inc<i>, in cluster id, naming leader, holding slots.
func member(i int, id, leader string, slots ...int32) brokerObservation {
	pod := "demo-" + string(rune('0'+i))
	st := brokeradmin.NodeStatus{NodeID: pod, MemberID: pod + "~inc" + string(rune('0'+i)), ClusterID: id, Leader: leader,
		RaftState: "Follower", SlotsHeld: ptr.To(int32(len(slots))), Slots: slots}
	if leader == st.MemberID {
		st.RaftState = "Leader"
	}
	return brokerObservation{pod: pod, status: st}
}

// span is the slots from..to-1.
func span(from, to int32) []int32 {
	var out []int32
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

func readyObservation(brokers ...brokerObservation) clusterObservation {
	return clusterObservation{desired: 3, slots: 64, sts: stsWith(3, 3, nil), brokers: brokers}
}

// The id is learned from the brokers once they agree, and once recorded it
// stays, whatever a broker reports later.
func TestClusterIDRecordedOnce(t *testing.T) {
	t.Parallel()
	const l = "demo-0~inc0"
	joining := member(2, "", l) // not named yet: reports no id
	for _, tc := range []struct {
		name, recorded string
		brokers        []brokerObservation
		want           string
	}{
		{"none reported", "", []brokerObservation{member(0, "", ""), {pod: "demo-1", err: errors.New("down")}}, ""},
		{"learned", "", []brokerObservation{member(0, "c-a", l), member(1, "c-a", l), joining}, "c-a"},
		{"brokers disagree: nothing recorded", "", []brokerObservation{member(0, "c-a", l), member(1, "c-b", l)}, ""},
		{"recorded stays", "c-a", []brokerObservation{member(0, "c-b", l), member(1, "c-b", l)}, "c-a"},
		{"recorded stays with nobody answering", "c-a", []brokerObservation{{pod: "demo-0", err: errors.New("down")}}, "c-a"},
	} {
		if got := recordedClusterID(tc.recorded, tc.brokers); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	// Through clusterStatus: recorded at the first look, kept at the next
	// when every broker reports another id.
	c := testCluster()
	st := clusterStatus(c, readyObservation(member(0, "c-a", l, span(0, 64)...), member(1, "c-a", l), joining))
	if st.ClusterID != "c-a" {
		t.Fatalf("clusterId %q, want c-a", st.ClusterID)
	}
	c.Status = st
	st = clusterStatus(c, readyObservation(member(0, "c-z", "demo-0~inc0", span(0, 64)...)))
	if st.ClusterID != "c-a" {
		t.Errorf("clusterId overwritten with %q", st.ClusterID)
	}
}

// A broker reporting another id than the recorded one is a Degraded
// condition naming it and both ids, and counts for nothing.
func TestClusterIDMismatchReported(t *testing.T) {
	t.Parallel()
	const l = "demo-0~inc0"
	o := readyObservation(member(0, "c-a", l, span(0, 32)...), member(1, "c-a", l, span(32, 64)...), member(2, "c-b", "demo-2~inc2", span(0, 64)...))
	o.clusterID = "c-a"
	d := degradedCondition(o)
	if d.Status != metav1.ConditionTrue || d.Reason != streamsv1alpha1.ReasonClusterIDMismatch ||
		!containsAll(d.Message, "demo-2 reports cluster id c-b", "not the recorded c-a", "counts for no leader and no slot") {
		t.Errorf("Degraded = %s/%s (%s)", d.Status, d.Reason, d.Message)
	}
	// It outranks a lesser trouble.
	o.plan.blocked = "no drain"
	if d := degradedCondition(o); d.Reason != streamsv1alpha1.ReasonClusterIDMismatch {
		t.Errorf("Degraded reason %s, want the mismatch first", d.Reason)
	}
	o.plan.blocked = ""
	// Its leader is not this cluster's, its slots are not counted: the
	// other two hold all 64, so Ready.
	if r := readyCondition(o); r.Status != metav1.ConditionTrue || !strings.Contains(r.Message, "metadata leader "+l) {
		t.Errorf("Ready = %s/%s (%s)", r.Status, r.Reason, r.Message)
	}
	// Without the others, its 64 slots do not make the cluster Ready.
	o.brokers = []brokerObservation{member(0, "c-a", l, span(0, 32)...), o.brokers[2]}
	if r := readyCondition(o); r.Reason != streamsv1alpha1.ReasonSlotsUnheld || !containsAll(r.Message, "32 of 64 slots", "of another cluster: demo-2") {
		t.Errorf("Ready = %s/%s (%s)", r.Status, r.Reason, r.Message)
	}
	// A broker reporting no id yet (joining) is no mismatch.
	o.brokers = []brokerObservation{member(0, "c-a", l, span(0, 64)...), member(1, "", "")}
	if d := degradedCondition(o); d.Status != metav1.ConditionFalse {
		t.Errorf("a joining broker made the cluster Degraded: %s", d.Message)
	}
	// Before any id is recorded, brokers of two logs are a mismatch too.
	o = readyObservation(member(0, "c-a", l), member(1, "c-b", "demo-1~inc1"))
	if d := degradedCondition(o); d.Reason != streamsv1alpha1.ReasonClusterIDMismatch || !containsAll(d.Message, "2 different metadata logs", "demo-0 reports c-a", "demo-1 reports c-b") {
		t.Errorf("Degraded = %s/%s (%s)", d.Status, d.Reason, d.Message)
	}
}

// Ready needs a leader and a live holder for every slot; the message
// counts what is missing and names the brokers not counted.
func TestReadyNeedsEverySlotHeld(t *testing.T) {
	t.Parallel()
	const l = "demo-1~inc1"
	for _, tc := range []struct {
		name    string
		o       clusterObservation
		status  metav1.ConditionStatus
		reason  string
		message []string
	}{
		{"all held", readyObservation(member(0, "c", l, span(0, 22)...), member(1, "c", l, span(22, 43)...), member(2, "c", l, span(43, 64)...)),
			metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady, []string{"3 of 3 brokers ready; metadata leader demo-1~inc1"}},
		{"no leader", readyObservation(member(0, "c", "", span(0, 64)...), member(1, "c", ""), member(2, "c", "")),
			metav1.ConditionFalse, streamsv1alpha1.ReasonNoMetadataLeader, []string{"the 3 brokers that answered know no metadata leader"}},
		{"a holder gone", readyObservation(member(0, "c", l, span(0, 22)...), member(1, "c", l, span(22, 43)...), brokerObservation{pod: "demo-2", err: errors.New("refused")}),
			metav1.ConditionFalse, streamsv1alpha1.ReasonSlotsUnheld, []string{"21 of 64 slots have no live holder", "hold 43", "not answering: demo-2"}},
		// Two brokers list slot 5 (one has not noticed it lost it): one
		// slot, not two; so are slots beyond the count.
		{"no double count", readyObservation(member(0, "c", l, span(0, 33)...), member(1, "c", l, append(span(5, 6), span(33, 63)...)...), member(2, "c", l, 64, 65)),
			metav1.ConditionFalse, streamsv1alpha1.ReasonSlotsUnheld, []string{"1 of 64 slots have no live holder", "hold 63"}},
		// Counts without lists add up, capped at the slot count.
		{"counts only", readyObservation(counts(0, l, 33), counts(1, l, 32)),
			metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady, nil},
		{"counts only, short", readyObservation(counts(0, l, 40), counts(1, l, 20)),
			metav1.ConditionFalse, streamsv1alpha1.ReasonSlotsUnheld, []string{"4 of 64 slots"}},
		// Every slot held, but a broker that joined (or came back) has not
		// taken its share yet: not Ready until the shares are even
		// within one slot.
		{"uneven", readyObservation(member(0, "c", l, span(0, 40)...), member(1, "c", l, span(40, 62)...), member(2, "c", l, span(62, 64)...)),
			metav1.ConditionFalse, streamsv1alpha1.ReasonSlotsUnbalanced, []string{"every slot has a live holder", "demo-0 holds 40 slots, demo-2 2"}},
		{"within one", readyObservation(counts(0, l, 22), counts(1, l, 21), counts(2, l, 21)),
			metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady, nil},
		// A draining broker hands its slots off on purpose: its empty
		// share is not uneven.
		{"one draining", readyObservation(counts(0, l, 32), counts(1, l, 32), draining(counts(2, l, 0))),
			metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady, nil},
		// Brokers that report no slots (an image without cluster mode):
		// the leader is enough.
		{"no slots reported", readyObservation(brokersWithLeader("demo-0", 3)...),
			metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady, nil},
		// The spec's slot count, not the default.
		{"spec slots", func() clusterObservation {
			o := readyObservation(member(0, "c", l, span(0, 8)...))
			o.slots = 8
			return o
		}(), metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady, nil},
	} {
		c := readyCondition(tc.o)
		if c.Status != tc.status || c.Reason != tc.reason || !containsAll(c.Message, tc.message...) {
			t.Errorf("%s: %s/%s (%s), want %s/%s with %q", tc.name, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
		}
	}
}

// underReplicatedBy is b reporting n objects under-replicated.
func underReplicatedBy(b brokerObservation, n int32) brokerObservation {
	b.status.UnderReplicated = ptr.To(n)
	return b
}

// draining is b draining.
func draining(b brokerObservation) brokerObservation {
	b.status.Drain.Phase = brokeradmin.DrainInProgress
	return b
}

// counts is a broker that reports how many slots it holds, not which.
func counts(i int, leader string, n int32) brokerObservation {
	b := member(i, "c", leader)
	b.status.SlotsHeld, b.status.Slots = ptr.To(n), nil
	return b
}

// The status shows the leader, the configuration as the leader reports
// it, the slots per broker, and the leader's count of under-replicated
// objects: every broker counts the whole cluster, so a sum would be wrong.
func TestClusterStatusShowsTheCluster(t *testing.T) {
	t.Parallel()
	const l = "demo-1~inc1"
	b0, b1, b2 := member(0, "c", l, span(0, 22)...), member(1, "c", l, span(22, 43)...), member(2, "c", l, span(43, 64)...)
	b0.status.Voters, b0.status.NonVoters = []string{"demo-0~inc0", "demo-1~inc1"}, []string{"demo-2~inc2"} // lagging
	b1.status.Voters = []string{"demo-2~inc2", "demo-1~inc1", "demo-0~inc0"}
	b0.status.UnderReplicated, b1.status.UnderReplicated, b2.status.UnderReplicated = ptr.To[int32](9), ptr.To[int32](4), ptr.To[int32](4)
	st := clusterStatus(testCluster(), readyObservation(b0, b1, b2))
	if st.MetadataLeader != l || st.ClusterID != "c" {
		t.Errorf("leader %q, cluster %q", st.MetadataLeader, st.ClusterID)
	}
	if !slices.Equal(st.Voters, []string{"demo-0~inc0", "demo-1~inc1", "demo-2~inc2"}) || len(st.NonVoters) != 0 {
		t.Errorf("voters %v, non-voters %v: want the leader's view, sorted", st.Voters, st.NonVoters)
	}
	if st.UnderReplicated == nil || *st.UnderReplicated != 4 {
		t.Errorf("underReplicated %v, want the leader's 4 (not the sum 17)", st.UnderReplicated)
	}
	if want := []streamsv1alpha1.BrokerSlots{{Broker: "demo-0", Slots: 22}, {Broker: "demo-1", Slots: 21}, {Broker: "demo-2", Slots: 21}}; !slices.Equal(st.SlotsHeld, want) {
		t.Errorf("slotsHeld %v", st.SlotsHeld)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, streamsv1alpha1.ConditionReady) {
		t.Errorf("not Ready: %+v", st.Conditions)
	}

	// The leader does not answer: the first broker's configuration, the
	// highest count.
	b1 = brokerObservation{pod: "demo-1", err: errors.New("refused")}
	b0.status.Leader, b2.status.Leader = l, l
	st = clusterStatus(testCluster(), readyObservation(b0, b1, b2))
	if !slices.Equal(st.Voters, []string{"demo-0~inc0", "demo-1~inc1"}) || !slices.Equal(st.NonVoters, []string{"demo-2~inc2"}) {
		t.Errorf("voters %v, non-voters %v", st.Voters, st.NonVoters)
	}
	if st.UnderReplicated == nil || *st.UnderReplicated != 9 {
		t.Errorf("underReplicated %v, want the highest reported, 9", st.UnderReplicated)
	}
	// Nobody reports it: absent, not 0.
	st = clusterStatus(testCluster(), readyObservation(brokersWithLeader("demo-0", 3)...))
	if st.UnderReplicated != nil || st.Voters != nil {
		t.Errorf("underReplicated %v, voters %v from brokers that report neither", st.UnderReplicated, st.Voters)
	}
}

// A status write that records the id comes after this reconcile applied
// the children, and status writes bring no reconcile: the cluster is
// looked at again soon, to render it, not at the next resync.
func TestRecordedClusterIDRenderedSoon(t *testing.T) {
	t.Parallel()
	r := &StreamClusterReconciler{Options: Options{}.withDefaults()}
	ready := []metav1.Condition{{Type: streamsv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
	st := &streamsv1alpha1.StreamClusterStatus{ClusterID: "c-1", Conditions: ready}
	if d := r.nextLook(clusterObservation{}, st); d != conflictRetry {
		t.Errorf("recorded, not rendered: next look in %s, want %s", d, conflictRetry)
	}
	if d := r.nextLook(clusterObservation{renderedClusterID: "c-1"}, st); d < r.Options.ResyncPeriod {
		t.Errorf("rendered: next look in %s, want the resync", d)
	}
	if d := r.nextLook(clusterObservation{paused: true}, st); d < r.Options.ResyncPeriod {
		t.Errorf("paused: next look in %s, want the resync (nothing is applied while paused)", d)
	}
}

// A Ready cluster whose brokers still move slots or copies is looked at
// again soon: no Kubernetes event says when they are done, and status
// must follow (status.underReplicated back to 0, Progressing Stable).
func TestSettlingClusterLookedAtSoon(t *testing.T) {
	t.Parallel()
	r := &StreamClusterReconciler{Options: Options{}.withDefaults()}
	o := clusterObservation{renderedClusterID: "c-1"}
	for _, tc := range []struct {
		reason string
		soon   bool
	}{{streamsv1alpha1.ReasonRepairing, true}, {streamsv1alpha1.ReasonRebalancing, true}, {streamsv1alpha1.ReasonStable, false}} {
		status := metav1.ConditionTrue
		if tc.reason == streamsv1alpha1.ReasonStable {
			status = metav1.ConditionFalse
		}
		st := &streamsv1alpha1.StreamClusterStatus{ClusterID: "c-1", Conditions: []metav1.Condition{
			{Type: streamsv1alpha1.ConditionReady, Status: metav1.ConditionTrue},
			{Type: streamsv1alpha1.ConditionProgressing, Status: status, Reason: tc.reason}}}
		d := r.nextLook(o, st)
		if tc.soon && d != r.Options.DrainPollInterval || !tc.soon && d < r.Options.ResyncPeriod {
			t.Errorf("Progressing %s: next look in %s", tc.reason, d)
		}
	}
}
