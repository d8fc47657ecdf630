package controllers

// Unit tests of the controllers' pure parts: status functions, the
// Stream's conflict and diff rules. The applier's and the status patch's
// tests, against controller-runtime's fake client, are in apply_test.go and
// status_test.go.

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr/funcr"
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
		// An unreachable broker is no evidence of a leader: not Ready True.
		{"all ready, nobody answers", clusterObservation{desired: 3, sts: stsWith(3, 3, nil),
			brokers: []brokerObservation{{pod: "demo-0", err: errors.New("dns")}}}, metav1.ConditionUnknown, streamsv1alpha1.ReasonBrokerUnreachable},
		{"all ready, answers without leader", clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("", 3)}, metav1.ConditionFalse, streamsv1alpha1.ReasonNoMetadataLeader},
		{"held scale-down, extra broker not ready", clusterObservation{desired: 2, sts: stsWith(3, 2, nil)}, metav1.ConditionFalse, streamsv1alpha1.ReasonBrokersNotReady},
		{"held scale-down, all ready", clusterObservation{desired: 2, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("demo-0", 3)}, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady},
	} {
		c := readyCondition(tc.o)
		if c.Status != tc.status || c.Reason != tc.reason || c.Type != streamsv1alpha1.ConditionReady || c.Message == "" {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.name, c.Status, c.Reason, c.Message, tc.status, tc.reason)
		}
	}
}

// The case: one broker, its pod ready, its name not resolving
// from the operator. Ready is not True, and says which broker could not be
// reached and why.
func TestReadyWhenNoBrokerAnswers(t *testing.T) {
	t.Parallel()
	dns := client.BrokerUnreachable.Wrap(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "demo-0.demo-headless.ns.svc", IsNotFound: true}},
		"endpoint", "http://demo-0.demo-headless.ns.svc:4437")
	c := readyCondition(clusterObservation{desired: 1, sts: stsWith(1, 1, nil), brokers: []brokerObservation{{pod: "demo-0", err: dns}}})
	if c.Status == metav1.ConditionTrue || c.Reason != streamsv1alpha1.ReasonBrokerUnreachable {
		t.Fatalf("Ready = %s/%s (%s), want Unknown/%s", c.Status, c.Reason, c.Message, streamsv1alpha1.ReasonBrokerUnreachable)
	}
	if !containsAll(c.Message, "1 of 1 broker ready", "broker demo-0 could not be reached", "lookup demo-0.demo-headless.ns.svc: no such host") {
		t.Errorf("message %q does not say which broker and why", c.Message)
	}
}

// A held scale-down reads as one: not "3 of 1 brokers ready".
func TestReadyWordsAScaleDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		plan scalePlan
		want string
	}{
		{scalePlan{blocked: "no drain"}, "scale-down to 1 held: 3 brokers running, 3 ready"},
		{scalePlan{draining: "demo-2 draining"}, "scale-down to 1 waiting for drains: 3 brokers running, 3 ready"},
		{scalePlan{}, "scale-down to 1 under way: 3 brokers running, 3 ready"},
	} {
		c := readyCondition(clusterObservation{desired: 1, sts: stsWith(3, 3, nil), plan: tc.plan, brokers: brokersWithLeader("demo-0", 3)})
		if !strings.HasPrefix(c.Message, tc.want) || strings.Contains(c.Message, "of 1 brokers") {
			t.Errorf("%+v: %q, want it to start %q", tc.plan, c.Message, tc.want)
		}
	}
	if c := readyCondition(clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("demo-0", 3)}); c.Message != "3 of 3 brokers ready; metadata leader demo-0" {
		t.Errorf("steady: %q", c.Message)
	}
}

// crashLooping is a broker pod whose container keeps exiting.
func crashLooping(name string, restarts int32, message string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:                 "broker",
			RestartCount:         restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 64, Reason: "Error", Message: message}},
		}},
	}}
}

// A crash-looping broker makes the cluster Degraded, naming the pod, its
// waiting reason, its restart count and its last termination message.
func TestDegradedNamesFailingPods(t *testing.T) {
	t.Parallel()
	starting := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "demo-1"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "broker", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}}
	pulling := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "demo-2"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "broker", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"x:1\""}}}}}}
	unschedulable := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "demo-3"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient memory."}}}}
	pods := []corev1.Pod{crashLooping("demo-0", 5, "broker: usage: --long-poll-timeout 0s: must be positive\n"), starting, pulling, unschedulable}

	failing := failingPods(pods)
	if len(failing) != 3 {
		t.Fatalf("failing = %q, want demo-0, demo-2 and demo-3 (demo-1 is only starting)", failing)
	}
	c := degradedCondition(clusterObservation{pods: len(pods), failing: failing})
	if c.Status != metav1.ConditionTrue || c.Reason != streamsv1alpha1.ReasonBrokersFailing {
		t.Fatalf("Degraded = %s/%s", c.Status, c.Reason)
	}
	for _, want := range []string{
		"3 of 4 broker pods failing",
		"demo-0: container broker CrashLoopBackOff, restarted 5 times, last exit code 64: broker: usage: --long-poll-timeout 0s: must be positive",
		`demo-2: container broker ImagePullBackOff (Back-off pulling image "x:1")`,
		"demo-3 cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory.",
	} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Degraded message %q lacks %q", c.Message, want)
		}
	}
	if strings.Contains(c.Message, "back-off 5m0s") {
		t.Errorf("the crash loop's back-off note is noise: %q", c.Message)
	}
	// A termination message that is a log tail keeps its end, where the
	// error is.
	long := strings.Repeat("x", 1000) + " the end"
	if got := podFailure(ptr.To(crashLooping("demo-0", 1, long))); !strings.HasSuffix(got, "the end") || len(got) > 500 || !strings.Contains(got, "restarted once") {
		t.Errorf("long termination message: %q", got)
	}
	// Recovered: running, not failing.
	ok := crashLooping("demo-0", 5, "old")
	ok.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	if why := podFailure(&ok); why != "" {
		t.Errorf("a running broker is failing: %q", why)
	}
}

// A broker that stays unreachable is logged once per change of why, not
// at every reconcile.
func TestUnreachableBrokersLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	var l reachLog
	refused := brokerObservation{pod: "demo-0", err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	dns := brokerObservation{pod: "demo-0", err: &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "demo-0.x"}}}
	fine := brokerObservation{pod: "demo-0"}
	for _, obs := range []brokerObservation{refused, refused, refused, dns, dns, fine, fine, refused} {
		l.observe(log, "ns", "demo", []brokerObservation{obs})
	}
	if len(lines) != 4 || !strings.Contains(lines[0], "connection refused") || !strings.Contains(lines[1], "no such host") ||
		!strings.Contains(lines[2], "again") || !strings.Contains(lines[3], "connection refused") {
		t.Errorf("logged %d lines, want 4 (refused, dns, answers again, refused):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	l.forget("ns", "demo")
	l.observe(log, "ns", "demo", []brokerObservation{fine})
	if len(lines) != 4 {
		t.Errorf("a forgotten cluster's first answer was logged as a recovery")
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
		// Once the pods are rolled, the brokers still even the slots and
		// copy objects again by themselves: Progressing says so.
		{"rebalancing", readyObservation(counts(0, "demo-0~inc0", 40), counts(1, "demo-0~inc0", 24), counts(2, "demo-0~inc0", 0)),
			metav1.ConditionTrue, streamsv1alpha1.ReasonRebalancing},
		{"repairing", readyObservation(underReplicatedBy(counts(0, "demo-0~inc0", 22), 53), counts(1, "demo-0~inc0", 21), counts(2, "demo-0~inc0", 21)),
			metav1.ConditionTrue, streamsv1alpha1.ReasonRepairing},
		{"balanced and replicated", readyObservation(underReplicatedBy(counts(0, "demo-0~inc0", 22), 0), counts(1, "demo-0~inc0", 21), counts(2, "demo-0~inc0", 21)),
			metav1.ConditionFalse, streamsv1alpha1.ReasonStable},
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
		{"failing pods", clusterObservation{pods: 1, failing: []string{"demo-0: CrashLoopBackOff"}}, metav1.ConditionTrue, streamsv1alpha1.ReasonBrokersFailing},
	} {
		c := degradedCondition(tc.o)
		if c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: %s/%s, want %s/%s", tc.name, c.Status, c.Reason, tc.status, tc.reason)
		}
	}
}

// TestDegradedFailsafe: a broker that reports serving on failsafe rounds
// makes the cluster Degraded with reason Failsafe, naming it; one that
// stopped reporting it does not.
func TestDegradedFailsafe(t *testing.T) {
	t.Parallel()
	o := clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("demo-1", 3)}
	if c := degradedCondition(o); c.Reason != streamsv1alpha1.ReasonAsExpected {
		t.Fatalf("no failsafe: %s/%s", c.Status, c.Reason)
	}
	o.brokers[2].status.FailsafeSince = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	o.brokers[2].status.FailsafeRounds = 42
	c := degradedCondition(o)
	if c.Status != metav1.ConditionTrue || c.Reason != streamsv1alpha1.ReasonFailsafe {
		t.Fatalf("failsafe: %s/%s, want True/%s", c.Status, c.Reason, streamsv1alpha1.ReasonFailsafe)
	}
	if !strings.Contains(c.Message, "demo-2 (since 2026-12-05T10:00:00Z, 42 rounds)") {
		t.Errorf("message does not name the broker, its start and rounds: %s", c.Message)
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

// Drift is a broker policy other than the one last applied; a broker
// policy that is the one last applied, and differs from the spec, is the
// user's change — even after failed reconciles moved nothing.
func TestAppliedPolicyTellsDriftFromChange(t *testing.T) {
	t.Parallel()
	applied := appliedPolicy(stream.PolicyValue{Partitions: 10})
	if applied != appliedPolicy(stream.PolicyValue{Partitions: 10, MaxRecordBytes: 1 << 20}) {
		t.Errorf("normalized equal policies record differently")
	}
	if applied == appliedPolicy(stream.PolicyValue{Partitions: 12}) {
		t.Errorf("different policies record the same")
	}
	if !strings.Contains(applied, `"partitions":10`) {
		t.Errorf("applied policy %s", applied)
	}
}

// Event notes are English: "1 partition", "2 partitions".
func TestCreatedEventCountsPartitions(t *testing.T) {
	t.Parallel()
	rec := &captureRecorder{}
	r := &StreamReconciler{Recorder: rec}
	s := testStream()
	s.Spec.Name = "app/events"
	r.actionEvents(s, syncOutcome{created: true, info: &client.StreamInfo{PartitionCount: 1}})
	r.actionEvents(s, syncOutcome{created: true, info: &client.StreamInfo{PartitionCount: 8}})
	got := rec.find("s", "Created")
	if len(got) != 2 || got[0].Note != "created stream app/events with 1 partition" || got[1].Note != "created stream app/events with 8 partitions" {
		t.Errorf("notes %+v", got)
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
		Partitions: []wire.PartitionInfo{
			{Partition: 0, ID: 7, Epoch: 2, Owner: "b-0", Open: true, Start: 3, End: 9},
			{Partition: 1, ID: 8, Epoch: 1, Owner: "b-0", Start: 4, End: 4},
			// Never opened: the broker says epoch -1 and no owner.
			{Partition: 2, ID: 9, Epoch: -1},
		}})
	want := []streamsv1alpha1.PartitionStatus{
		{Partition: 0, InternalID: 7, State: streamsv1alpha1.PartitionOpen, Epoch: ptr.To[int64](2), Owner: "b-0", Start: 3, End: 9},
		{Partition: 1, InternalID: 8, State: streamsv1alpha1.PartitionClosed, Epoch: ptr.To[int64](1), Owner: "b-0", Start: 4, End: 4},
		{Partition: 2, InternalID: 9, State: streamsv1alpha1.PartitionNotOpened},
	}
	if !equality.Semantic.DeepEqual(st.Partitions, want) {
		t.Errorf("partitions %+v, want %+v", st.Partitions, want)
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
