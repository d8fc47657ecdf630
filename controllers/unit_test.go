package controllers

// Unit tests of the controllers' pure parts: status functions, the
// Stream's conflict and diff rules. The applier's and the status patch's
// tests, against controller-runtime's fake client, are in apply_test.go and
// status_test.go.

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

func testCluster() *streamsv1alpha1.StreamCluster {
	return &streamsv1alpha1.StreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", Generation: 4},
		Spec:       streamsv1alpha1.StreamClusterSpec{Replicas: 3, Service: streamsv1alpha1.ServiceSpec{Port: 4437}},
	}
}

func stsWith(replicas, ready int32, mutate func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: replicas, ReadyReplicas: ready, UpdatedReplicas: replicas,
			CurrentRevision: "r1", UpdateRevision: "r1"},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func brokersWithLeader(leader string, n int) []brokerObservation {
	out := make([]brokerObservation, n)
	for i := range out {
		out[i] = brokerObservation{pod: resources.PodName(testCluster(), int32(i)), status: brokeradmin.NodeStatus{Leader: leader}}
	}
	return out
}

func TestReadyCondition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		o      clusterObservation
		status metav1.ConditionStatus
		reason string
	}{
		{"no StatefulSet", clusterObservation{desired: 3}, metav1.ConditionFalse, streamsv1alpha1.ReasonCreating},
		{"starting", clusterObservation{desired: 3, sts: stsWith(3, 1, nil)}, metav1.ConditionFalse, streamsv1alpha1.ReasonBrokersNotReady},
		{"all ready, leader known", clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("demo-0", 3)}, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady},
		{"all ready, nobody answers: readiness implies a leader", clusterObservation{desired: 3, sts: stsWith(3, 3, nil),
			brokers: []brokerObservation{{pod: "demo-0", err: errors.New("dns")}}}, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady},
		{"all ready, answers without leader", clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("", 3)}, metav1.ConditionFalse, streamsv1alpha1.ReasonNoMetadataLeader},
		{"held scale-down, extra broker not ready", clusterObservation{desired: 2, sts: stsWith(3, 2, nil)}, metav1.ConditionFalse, streamsv1alpha1.ReasonBrokersNotReady},
		{"held scale-down, all ready", clusterObservation{desired: 2, sts: stsWith(3, 3, nil)}, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady},
	} {
		c := readyCondition(tc.o)
		if c.Status != tc.status || c.Reason != tc.reason || c.Type != streamsv1alpha1.ConditionReady || c.Message == "" {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.name, c.Status, c.Reason, c.Message, tc.status, tc.reason)
		}
	}
}

func TestProgressingCondition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		o      clusterObservation
		status metav1.ConditionStatus
		reason string
	}{
		{"paused wins", clusterObservation{paused: true, sts: stsWith(3, 1, nil)}, metav1.ConditionFalse, streamsv1alpha1.ReasonPaused},
		{"blocked", clusterObservation{plan: scalePlan{blocked: "x"}, sts: stsWith(3, 3, nil)}, metav1.ConditionFalse, streamsv1alpha1.ReasonScaleDownBlocked},
		{"draining", clusterObservation{plan: scalePlan{draining: "x"}, sts: stsWith(3, 3, nil)}, metav1.ConditionTrue, streamsv1alpha1.ReasonDraining},
		{"creating", clusterObservation{}, metav1.ConditionTrue, streamsv1alpha1.ReasonCreating},
		{"generation not observed", clusterObservation{sts: stsWith(3, 3, func(s *appsv1.StatefulSet) { s.Generation = 3 })}, metav1.ConditionTrue, streamsv1alpha1.ReasonRollingUpdate},
		{"scaling up", clusterObservation{sts: stsWith(3, 3, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](5) })}, metav1.ConditionTrue, streamsv1alpha1.ReasonScalingUp},
		{"scaling down", clusterObservation{sts: stsWith(3, 3, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](2) })}, metav1.ConditionTrue, streamsv1alpha1.ReasonScalingDown},
		{"revision rolling", clusterObservation{sts: stsWith(3, 3, func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "r2"; s.Status.UpdatedReplicas = 1 })}, metav1.ConditionTrue, streamsv1alpha1.ReasonRollingUpdate},
		{"pods starting", clusterObservation{sts: stsWith(3, 2, nil)}, metav1.ConditionTrue, streamsv1alpha1.ReasonBrokersNotStarted},
		{"stable", clusterObservation{sts: stsWith(3, 3, nil)}, metav1.ConditionFalse, streamsv1alpha1.ReasonStable},
	} {
		c := progressingCondition(tc.o)
		if c.Status != tc.status || c.Reason != tc.reason || c.Message == "" {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.name, c.Status, c.Reason, c.Message, tc.status, tc.reason)
		}
	}
}

func TestDegradedCondition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		o      clusterObservation
		status metav1.ConditionStatus
		reason string
	}{
		{"fine", clusterObservation{}, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected},
		{"invalid spec", clusterObservation{specErr: errors.New("bad")}, metav1.ConditionTrue, streamsv1alpha1.ReasonInvalidSpec},
		{"apply failed", clusterObservation{applyErr: errors.New("forbidden")}, metav1.ConditionTrue, streamsv1alpha1.ReasonApplyFailed},
		{"blocked", clusterObservation{plan: scalePlan{blocked: "no drain"}}, metav1.ConditionTrue, streamsv1alpha1.ReasonScaleDownBlocked},
		{"storage", clusterObservation{storageChange: "size"}, metav1.ConditionTrue, streamsv1alpha1.ReasonStorageImmutable},
	} {
		c := degradedCondition(tc.o)
		if c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: %s/%s, want %s/%s", tc.name, c.Status, c.Reason, tc.status, tc.reason)
		}
	}
}

func TestClusterStatusKeepsTransitionTimes(t *testing.T) {
	t.Parallel()
	c := testCluster()
	o := clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("demo-1", 3)}
	o.brokers[0].status.SlotsHeld = ptr.To[int32](30)
	o.brokers[2].status.SlotsHeld = ptr.To[int32](34)
	st := clusterStatus(c, o)
	if st.ObservedGeneration != 4 || st.Endpoint != "http://demo.ns.svc:4437" || st.MetadataLeader != "demo-1" || st.ReadyReplicas != 3 {
		t.Errorf("status %+v", st)
	}
	if len(st.SlotsHeld) != 2 || st.SlotsHeld[0].Broker != "demo-0" || st.SlotsHeld[1].Slots != 34 {
		t.Errorf("slots %+v", st.SlotsHeld)
	}
	for _, cond := range st.Conditions {
		if cond.ObservedGeneration != 4 {
			t.Errorf("condition %s observedGeneration %d", cond.Type, cond.ObservedGeneration)
		}
	}
	// Same observation an hour later: nothing changes, not even a time.
	c.Status = st
	for i := range c.Status.Conditions {
		c.Status.Conditions[i].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	}
	again := clusterStatus(c, o)
	if !equality.Semantic.DeepEqual(c.Status, again) {
		t.Errorf("an unchanged observation changed the status:\n%+v\n%+v", c.Status, again)
	}
}

func TestMetadataLeaderMajority(t *testing.T) {
	t.Parallel()
	b := brokersWithLeader("demo-0", 3)
	b[1].status.Leader = "demo-2"
	b[2].status.Leader = "demo-2"
	if got := metadataLeader(b); got != "demo-2" {
		t.Errorf("leader = %s, want the one most brokers name", got)
	}
}

func TestPolicyDiffAndConflicts(t *testing.T) {
	t.Parallel()
	if d := policyDiff(stream.PolicyValue{MaxRecordBytes: 1 << 20, Partitions: 1}, stream.PolicyValue{}); len(d) != 0 {
		t.Errorf("normalized equal policies differ: %v", d)
	}
	d := policyDiff(stream.PolicyValue{RetainFor: time.Hour, Partitions: 2}, stream.PolicyValue{RetainFor: 2 * time.Hour, Partitions: 4})
	if len(d) != 2 || !strings.HasPrefix(d[0], "partitions 2→4") || !strings.HasPrefix(d[1], "retainFor 1h0m0s→2h0m0s") {
		t.Errorf("diff %v", d)
	}
	want := client.StreamConfig{ContentType: "application/json", Policy: stream.PolicyValue{Partitions: 2}}
	ok := client.StreamInfo{ContentType: "application/json", PartitionCount: 2}
	if why := conflictWith("s", want, ok); why != "" {
		t.Errorf("no conflict expected: %s", why)
	}
	for name, info := range map[string]client.StreamInfo{
		"content type": {ContentType: "text/plain", PartitionCount: 2},
		"partitions":   {ContentType: "application/json", PartitionCount: 3},
		"ttl":          {ContentType: "application/json", PartitionCount: 2, TTL: time.Hour},
		"expiresAt":    {ContentType: "application/json", PartitionCount: 2, ExpiresAt: time.Unix(1e9, 0)},
	} {
		if why := conflictWith("s", want, info); why == "" {
			t.Errorf("%s: no conflict found", name)
		}
	}
	// Growing partitions is an update, not a conflict.
	if why := conflictWith("s", client.StreamConfig{ContentType: "application/json", Policy: stream.PolicyValue{Partitions: 8}}, ok); why != "" {
		t.Errorf("growth refused: %s", why)
	}
}

func TestAdminEndpoint(t *testing.T) {
	t.Parallel()
	c := testCluster()
	s := &streamsv1alpha1.Stream{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
	if got := adminEndpoint(s, c); got != "http://demo.ns.svc:4437" {
		t.Errorf("default = %s, want the client Service", got)
	}
	c.Annotations = map[string]string{AnnotationAdminURL: "http://127.0.0.1:1"}
	if got := adminEndpoint(s, c); got != "http://127.0.0.1:1" {
		t.Errorf("cluster override = %s", got)
	}
	s.Annotations = map[string]string{AnnotationAdminURL: "http://127.0.0.1:2"}
	if got := adminEndpoint(s, c); got != "http://127.0.0.1:2" {
		t.Errorf("stream override = %s", got)
	}
}

func TestApplyBrokerInfo(t *testing.T) {
	t.Parallel()
	last := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var st streamsv1alpha1.StreamStatus
	applyBrokerInfo(&st, &client.StreamInfo{TTL: time.Hour, LastAccess: last, Closed: true,
		Partitions: []wire.PartitionInfo{{Partition: 0, ID: 7, Epoch: 2, Owner: "b-0", Start: 3, End: 9}}})
	if len(st.Partitions) != 1 || st.Partitions[0] != (streamsv1alpha1.PartitionStatus{Partition: 0, InternalID: 7, Epoch: 2, Owner: "b-0", Start: 3, End: 9}) {
		t.Errorf("partitions %+v", st.Partitions)
	}
	if !st.Closed || st.ExpiresAt == nil || !st.ExpiresAt.Time.Equal(last.Add(time.Hour)) {
		t.Errorf("closed %v expiresAt %v", st.Closed, st.ExpiresAt)
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := jitter(10 * time.Minute); d < 10*time.Minute || d > 12*time.Minute {
			t.Fatalf("jitter(10m) = %s", d)
		}
	}
}

func TestClaimTemplateChange(t *testing.T) {
	t.Parallel()
	c := testCluster()
	a := resources.StatefulSet(c, resources.StatefulSetParams{Replicas: 3})
	if msg := claimTemplateChange(a, a); msg != "" {
		t.Errorf("same template: %s", msg)
	}
	c.Spec.Storage.StorageClassName = ptr.To("fast")
	b := resources.StatefulSet(c, resources.StatefulSetParams{Replicas: 3})
	if msg := claimTemplateChange(a, b); !strings.Contains(msg, "storage class") {
		t.Errorf("class change: %q", msg)
	}
	kept := keepClaimTemplates(a)
	kq, aq := kept[0].Spec.Resources.Requests[corev1.ResourceStorage], a.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	if kq.Cmp(aq) != 0 || kept[0].Kind != "PersistentVolumeClaim" {
		t.Errorf("kept template differs")
	}
}

func TestExpired(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s := &streamsv1alpha1.Stream{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 2}}
	s.Status.ObservedGeneration = 2
	if why := expired(s, now); why != "" {
		t.Errorf("no lifetime: %s", why)
	}
	s.Spec.ExpiresAt = &metav1.Time{Time: now.Add(-time.Minute)}
	if why := expired(s, now); !strings.Contains(why, "expiresAt") {
		t.Errorf("past expiresAt: %q", why)
	}
	s.Spec.ExpiresAt = &metav1.Time{Time: now.Add(time.Minute)}
	if why := expired(s, now); why != "" {
		t.Errorf("future expiresAt: %s (deleted by someone: recreate)", why)
	}
	s.Spec.ExpiresAt = nil
	s.Spec.TTL = ptr.To[streamsv1alpha1.Duration]("1h")
	s.Status.ExpiresAt = &metav1.Time{Time: now.Add(-time.Second)}
	if why := expired(s, now); !strings.Contains(why, "ttl") {
		t.Errorf("ttl run out: %q", why)
	}
	s.Generation = 3 // the spec changed since: a new stream is asked for
	if why := expired(s, now); why != "" {
		t.Errorf("changed spec: %s", why)
	}
}

func TestEventNotesFitTheEventsAPI(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 800) // 1600 bytes
	got := truncate(long, maxNote)
	if len(got) > 1024 || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("truncate: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if truncate("short", maxNote) != "short" {
		t.Errorf("a short note was changed")
	}
}
