package controllers

// Tiered storage: the StreamCluster's Degraded reasons and
// status.tieredStorage from the brokers' GET /v1/admin/tier (unit, and
// through a manager against envtest with the fake BrokerAdmin), and the
// Stream's sizes and TieringNotConfigured.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/internal/testwait"
)

func tieredSpec() *streamsv1alpha1.TieredStorageSpec {
	return &streamsv1alpha1.TieredStorageSpec{
		Endpoint: "https://s3.example.com:9000", Bucket: "picomq-prod",
		CredentialsSecret: streamsv1alpha1.TierCredentials{Name: "s3-creds"},
	}
}

// createTierSecret creates the credentials Secret tieredSpec names.
func createTierSecret(t *testing.T, ns string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-creds"},
		Data: map[string][]byte{"accessKeyId": []byte("id"), "secretAccessKey": []byte("secret")}}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func tierOK(pending int, tiered int64) *wire.TierStatus {
	return &wire.TierStatus{Enabled: true, Reachable: true, UploadsPending: pending, TieredBytes: tiered}
}

func tierFailing(code, msg string) *wire.TierStatus {
	return &wire.TierStatus{Enabled: true, Reachable: false, LastError: &wire.TierError{Code: code, Message: msg}, UploadsPending: 7, TieredBytes: 100}
}

func TestTierStatusFromTheBrokers(t *testing.T) {
	t.Parallel()
	c := testCluster()
	o := clusterObservation{desired: 3, sts: stsWith(3, 3, nil), brokers: brokersWithLeader("demo-1", 3)}
	if st := clusterStatus(c, o); st.TieredStorage != nil {
		t.Errorf("status.tieredStorage %+v without spec.tieredStorage", st.TieredStorage)
	}
	c.Spec.TieredStorage = tieredSpec()
	// No broker reports (older brokers): nothing said, nothing Degraded.
	st := clusterStatus(c, o)
	if st.TieredStorage != nil || condition(st.Conditions, streamsv1alpha1.ConditionDegraded).Reason != streamsv1alpha1.ReasonAsExpected {
		t.Errorf("no report: tieredStorage %+v, Degraded %+v", st.TieredStorage, condition(st.Conditions, streamsv1alpha1.ConditionDegraded))
	}

	o.brokers[0].tier, o.brokers[1].tier, o.brokers[2].tier = tierOK(2, 4096), tierOK(3, 4000), tierOK(0, 4096)
	st = clusterStatus(c, o)
	want := &streamsv1alpha1.TieredStorageStatus{Reachable: true, TieredBytes: 4096, UploadsPending: 5}
	if ts := st.TieredStorage; ts == nil || *ts != *want {
		t.Errorf("tieredStorage %+v, want %+v", ts, want)
	}
	if d := condition(st.Conditions, streamsv1alpha1.ConditionDegraded); d.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v with every broker reaching the bucket", d)
	}

	for _, tc := range []struct {
		code, reason string
	}{
		{brokeradmin.CodeTierUnreachable, streamsv1alpha1.ReasonTieredStorageUnreachable},
		{brokeradmin.CodeTierRefused, streamsv1alpha1.ReasonTieredStorageRefused},
		{"TIER_CORRUPT", streamsv1alpha1.ReasonTieredStorageUnreachable},
	} {
		o.brokers[1].tier = tierFailing(tc.code, "dial tcp: lookup s3.example.com: no such host")
		st = clusterStatus(c, o)
		d := condition(st.Conditions, streamsv1alpha1.ConditionDegraded)
		if d.Status != metav1.ConditionTrue || d.Reason != tc.reason ||
			!containsAll(d.Message, "demo-1", "bucket picomq-prod at https://s3.example.com:9000", tc.code, "no such host") {
			t.Errorf("%s: Degraded %s/%s (%s), want True/%s naming the broker, the bucket and the error", tc.code, d.Status, d.Reason, d.Message, tc.reason)
		}
		if tc.code == brokeradmin.CodeTierRefused && !strings.Contains(d.Message, "Secret s3-creds") {
			t.Errorf("refused: message %q does not point at the credentials Secret", d.Message)
		}
		ts := st.TieredStorage
		if ts == nil || ts.Reachable || ts.LastError == nil || ts.LastError.Broker != "demo-1" || ts.LastError.Code != tc.code {
			t.Errorf("%s: tieredStorage %+v", tc.code, ts)
		}
	}
	// A long S3 answer is clipped in status.
	o.brokers[1].tier = tierFailing(brokeradmin.CodeTierRefused, strings.Repeat("x", 5000))
	if ts := clusterStatus(c, o).TieredStorage; len(ts.LastError.Message) > maxTierMessage+8 {
		t.Errorf("lastError.message of %d bytes", len(ts.LastError.Message))
	}
	// A broker configured without tiering (enabled false) is not counted.
	o.brokers[1].tier = &wire.TierStatus{Enabled: false}
	if ts := clusterStatus(c, o).TieredStorage; ts == nil || !ts.Reachable {
		t.Errorf("tieredStorage %+v", ts)
	}
	// Something more pressing wins Degraded.
	o.brokers[1].tier = tierFailing(brokeradmin.CodeTierUnreachable, "timeout")
	o.failing = []string{"demo-2: container broker CrashLoopBackOff"}
	if d := condition(clusterStatus(c, o).Conditions, streamsv1alpha1.ConditionDegraded); d.Reason != streamsv1alpha1.ReasonBrokersFailing {
		t.Errorf("Degraded %s, want BrokersFailing before the object storage", d.Reason)
	}
}

func TestHumanBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0", 1023: "1023", 1024: "1Ki", 1536: "1.5Ki", 10 * 1024: "10Ki", 1<<20 - 1: "1023Ki",
		1 << 20: "1Mi", 1288490188: "1.1Gi", 5 << 40: "5Ti", 1 << 62: "4Ei",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestStreamStatusSizes(t *testing.T) {
	t.Parallel()
	var st streamsv1alpha1.StreamStatus
	applyBrokerInfo(&st, &client.StreamInfo{Partitions: []wire.PartitionInfo{
		{Partition: 0, Epoch: 1, Open: true, LocalBytes: 1 << 30, TieredBytes: 3 << 30},
		{Partition: 1, Epoch: -1, LocalBytes: 512 << 20, TieredBytes: 0},
	}})
	if st.LocalBytes != 1<<30+512<<20 || st.TieredBytes != 3<<30 || st.LocalSize != "1.5Gi" || st.TieredSize != "3Gi" {
		t.Errorf("status local %d (%s) tiered %d (%s)", st.LocalBytes, st.LocalSize, st.TieredBytes, st.TieredSize)
	}
	if p := st.Partitions[0]; p.LocalBytes != 1<<30 || p.TieredBytes != 3<<30 {
		t.Errorf("partition 0 %+v", p)
	}
	if p := st.Partitions[1]; p.LocalBytes != 512<<20 || p.State != streamsv1alpha1.PartitionNotOpened {
		t.Errorf("partition 1 %+v", p)
	}
}

// TestPolicyDiffTiering: the three fields are part of the drift
// comparison, and an equal policy is no diff.
func TestPolicyDiffTiering(t *testing.T) {
	t.Parallel()
	have := stream.PolicyValue{Partitions: 1}
	want := stream.PolicyValue{Partitions: 1, Tiering: stream.TieringDisabled, LocalRetainFor: time.Minute, LocalRetainBytes: 10}
	d := policyDiff(have, want)
	if got := strings.Join(d, "; "); !containsAll(got, "tiering (cluster's)→Disabled", "localRetainFor 0s→1m0s", "localRetainBytes 0→10") {
		t.Errorf("diff %q", got)
	}
	if d := policyDiff(want, want); len(d) != 0 {
		t.Errorf("diff of a policy with itself: %v", d)
	}
	if appliedPolicy(have) == appliedPolicy(want) {
		t.Error("status.appliedPolicy does not tell the tiering fields apart")
	}
}

func TestTieringNotConfiguredSyncsNothing(t *testing.T) {
	t.Parallel()
	s := &streamsv1alpha1.Stream{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "ns"}}
	s.Spec.ClusterRef.Name = "demo"
	s.Spec.Tiering = streamsv1alpha1.TieringEnabled
	c := testCluster()
	// No StreamAdmins at all: a sync that called the brokers would panic.
	r := &StreamReconciler{}
	out := r.sync(t.Context(), s, c)
	if out.ready.Status != metav1.ConditionFalse || out.ready.Reason != streamsv1alpha1.ReasonTieringNotConfigured ||
		!containsAll(out.ready.Message, "StreamCluster demo has no spec.tieredStorage", "stream orders") {
		t.Errorf("Ready %+v", out.ready)
	}
	if out.retry != nil || out.applied != "" || out.info != nil {
		t.Errorf("outcome %+v: nothing applied, nothing retried", out)
	}
}

// TestStreamClusterTieredStorageDegraded runs the controller: a cluster
// with tieredStorage whose brokers report the bucket unreachable, then
// refusing, then reachable: Degraded follows with its reason, status
// follows the brokers' numbers, one Warning per reason and a Normal event
// once reachable again.
func TestStreamClusterTieredStorageDegraded(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{NotReadyPollInterval: 100 * time.Millisecond, DrainPollInterval: 100 * time.Millisecond, TierPollInterval: 200 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.leader = "demo-0"
		f.tier["demo-0"] = *tierOK(1, 2048)
		f.tier["demo-1"] = *tierOK(0, 2048)
	})
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Replicas = 2
		c.Spec.TieredStorage = tieredSpec()
	})
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 2)
	var c *streamsv1alpha1.StreamCluster
	// No credentials Secret yet: the pods could not start.
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonTieredStorageSecretNotFound)
	})
	// Created: the Secret wakes the cluster, which is then healthy.
	createTierSecret(t, ns)
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected)
	})
	// A healthy cluster that loses its bucket: no Kubernetes event says
	// so, the tier poll finds it.
	h.admin.set(func(f *fakeAdmin) {
		f.tier["demo-1"] = *tierFailing(brokeradmin.CodeTierUnreachable, "dial tcp 10.0.0.9:9000: connect: connection refused")
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		c = getCluster(t, ns, "demo")
		return wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonTieredStorageUnreachable)
	})
	if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionDegraded).Message; !containsAll(msg, "broker demo-1", "TIER_UNREACHABLE", "connection refused") {
		t.Errorf("Degraded message %q", msg)
	}
	want := streamsv1alpha1.TieredStorageStatus{Reachable: false, TieredBytes: 2048, UploadsPending: 8,
		LastError: &streamsv1alpha1.TieredStorageError{Broker: "demo-1", Code: "TIER_UNREACHABLE", Message: "dial tcp 10.0.0.9:9000: connect: connection refused"}}
	if ts := c.Status.TieredStorage; ts == nil || ts.Reachable || ts.TieredBytes != want.TieredBytes || ts.UploadsPending != want.UploadsPending || *ts.LastError != *want.LastError {
		t.Errorf("status.tieredStorage %+v, want %+v", ts, want)
	}
	// Ready is about serving, which the brokers still do.
	if err := wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady); err != nil {
		t.Error(err)
	}
	h.expectEvents("demo", streamsv1alpha1.ReasonTieredStorageUnreachable, "Warning", 1)

	// Refused: bad credentials. Found without any change to the cluster
	// (the operator looks again soon while the storage is Degraded).
	h.admin.set(func(f *fakeAdmin) {
		f.tier["demo-1"] = *tierFailing(brokeradmin.CodeTierRefused, "AccessDenied: Access Denied.")
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonTieredStorageRefused)
	})
	h.expectEvents("demo", streamsv1alpha1.ReasonTieredStorageRefused, "Warning", 1)

	// Reachable again: cleared, with a Normal event.
	h.admin.set(func(f *fakeAdmin) { f.tier["demo-1"] = *tierOK(0, 4096) })
	testwait.NoError(t, 10*time.Second, "", func() error {
		c = getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected); err != nil {
			return err
		}
		if ts := c.Status.TieredStorage; ts == nil || !ts.Reachable || ts.LastError != nil || ts.TieredBytes != 4096 {
			return fmt.Errorf("status.tieredStorage %+v", ts)
		}
		return nil
	})
	h.expectEvents("demo", "TieredStorageReachable", "Normal", 1)
	if n := h.admin.called("Tier demo-0"); n == 0 {
		t.Error("the operator never asked demo-0 for its tier status")
	}
}

// TestStreamClusterWithoutTieringAsksNoTierStatus: a cluster without
// spec.tieredStorage costs its brokers no tier call.
func TestStreamClusterWithoutTieringAsksNoTierStatus(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0" })
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 1 })
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 1)
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})
	if n := h.admin.called("Tier demo-0"); n != 0 {
		t.Errorf("%d tier calls", n)
	}
	if c := getCluster(t, ns, "demo"); c.Status.TieredStorage != nil {
		t.Errorf("status.tieredStorage %+v", c.Status.TieredStorage)
	}
}

// TestStreamTieringNotConfigured runs the Stream controller against the
// real broker: tiering Enabled on a cluster without tieredStorage is
// refused in Ready and nothing is created on the broker; once the cluster
// has tieredStorage, the stream is created with the policy's tiering
// fields (at once: the cluster's change wakes its Streams, no resync
// needed), and the Stream's sizes come from the broker's answer.
func TestStreamTieringNotConfigured(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{ResyncPeriod: time.Hour})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "tiered", b.URL, func(s *streamsv1alpha1.Stream) {
		s.Spec.Tiering = streamsv1alpha1.TieringEnabled
		s.Spec.LocalRetainFor = ptr.To[streamsv1alpha1.Duration]("10m")
		s.Spec.LocalRetainBytes = 1 << 20
	})
	s := waitReady(t, ns, "tiered", metav1.ConditionFalse, streamsv1alpha1.ReasonTieringNotConfigured)
	if msg := condition(s.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "StreamCluster demo has no spec.tieredStorage") {
		t.Errorf("Ready message %q", msg)
	}
	bc := brokerClient(t, b.URL)
	if _, err := bc.GetStream(t.Context(), ns+"/tiered"); !brokeradmin.IsNotFound(err) {
		t.Fatalf("the broker has the stream (or failed): %v", err)
	}

	createTierSecret(t, ns)
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.TieredStorage = tieredSpec() })
	s = waitReady(t, ns, "tiered", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	info, err := bc.GetStream(t.Context(), ns+"/tiered")
	if err != nil {
		t.Fatal(err)
	}
	if p := info.Policy; p.Tiering != stream.TieringEnabled || p.LocalRetainFor != 10*time.Minute || p.LocalRetainBytes != 1<<20 {
		t.Errorf("broker policy %+v, want tiering Enabled, localRetainFor 10m, localRetainBytes 1Mi", p)
	}
	if !containsAll(s.Status.AppliedPolicy, `"tiering":"Enabled"`, `"localRetainFor":"10m0s"`) {
		t.Errorf("appliedPolicy %s", s.Status.AppliedPolicy)
	}
	if s.Status.LocalSize == "" || s.Status.TieredSize == "" {
		t.Errorf("sizes %q/%q: the columns print nothing", s.Status.LocalSize, s.Status.TieredSize)
	}

	// Disabled is applied as a change, not as drift.
	updateStream(t, ns, "tiered", func(s *streamsv1alpha1.Stream) { s.Spec.Tiering = streamsv1alpha1.TieringDisabled })
	waitReady(t, ns, "tiered", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	testwait.NoError(t, 10*time.Second, "", func() error {
		info, err := bc.GetStream(t.Context(), ns+"/tiered")
		if err != nil {
			return err
		}
		if info.Policy.Tiering != stream.TieringDisabled {
			return fmt.Errorf("broker tiering %q", info.Policy.Tiering)
		}
		return nil
	})
}
