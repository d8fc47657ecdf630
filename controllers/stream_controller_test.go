package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/internal/testwait"
)

// The Stream tests run against a real broker (cmd/broker, built by
// TestMain) on loopback; the Streams reach it through the admin-url
// annotation. Each test names its streams under its namespace.

// newStream creates a Stream on cluster "demo" whose broker stream is
// <ns>/<name>, pointed at url.
func newStream(t *testing.T, ns, name, url string, mutate func(*streamsv1alpha1.Stream)) *streamsv1alpha1.Stream {
	t.Helper()
	s := &streamsv1alpha1.Stream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{AnnotationAdminURL: url}},
		Spec: streamsv1alpha1.StreamSpec{
			ClusterRef: streamsv1alpha1.ClusterReference{Name: "demo"},
			Name:       ns + "/" + name,
		},
	}
	if mutate != nil {
		mutate(s)
	}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func getStream(t *testing.T, ns, name string) *streamsv1alpha1.Stream {
	t.Helper()
	var s streamsv1alpha1.Stream
	if err := get(t, ns, name, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func updateStream(t *testing.T, ns, name string, mutate func(*streamsv1alpha1.Stream)) {
	t.Helper()
	testwait.NoError(t, 10*time.Second, "", func() error {
		var s streamsv1alpha1.Stream
		if err := get(t, ns, name, &s); err != nil {
			return err
		}
		mutate(&s)
		return k8s.Update(context.Background(), &s)
	})
}

// waitReady waits for the Stream's Ready condition to have status and
// reason at its current generation; Ready True also needs status to say
// the generation is applied (status.observedGeneration moves only then).
func waitReady(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) *streamsv1alpha1.Stream {
	t.Helper()
	var s streamsv1alpha1.Stream
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, ns, name, &s); err != nil {
			return err
		}
		c := condition(s.Status.Conditions, streamsv1alpha1.ConditionReady)
		applied := status != metav1.ConditionTrue || s.Status.ObservedGeneration == s.Generation
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != s.Generation || !applied {
			return fmt.Errorf("Ready = %s/%s (%s) at generation %d (applied %d) of %d, want %s/%s",
				c.Status, c.Reason, c.Message, c.ObservedGeneration, s.Status.ObservedGeneration, s.Generation, status, reason)
		}
		return nil
	})
	return &s
}

func brokerClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestStreamCreateReportsPartitionsAndOffsets(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{ResyncPeriod: time.Second})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "orders", b.URL, func(s *streamsv1alpha1.Stream) {
		s.Spec.Partitions = 3
		s.Spec.ContentType = "application/json"
		s.Spec.RetainFor = ptr.To[streamsv1alpha1.Duration]("168h")
	})
	s := waitReady(t, ns, "orders", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if !controllerutil.ContainsFinalizer(s, StreamFinalizer) {
		t.Errorf("no finalizer: %v", s.Finalizers)
	}
	if len(s.Status.Partitions) != 3 {
		t.Fatalf("status partitions = %+v, want 3", s.Status.Partitions)
	}
	// Never used yet: NotOpened, no epoch, no owner (not "epoch: -1").
	for i, p := range s.Status.Partitions {
		if p.Partition != int32(i) || p.Start != 0 || p.End != 0 || p.InternalID == 0 ||
			p.State != streamsv1alpha1.PartitionNotOpened || p.Epoch != nil || p.Owner != "" {
			t.Errorf("partition %d = %+v, want NotOpened without epoch or owner", i, p)
		}
	}
	bc := brokerClient(t, b.URL)
	info, err := bc.GetStream(context.Background(), ns+"/orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.PartitionCount != 3 || info.ContentType != "application/json" || info.Policy.RetainFor != 168*time.Hour {
		t.Errorf("broker stream = %+v", info)
	}

	// Records appended: the next resync shows the offsets.
	st, err := bc.Stream(context.Background(), ns+"/orders")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := st.Append(context.Background(), []stream.RecordValue{{Key: []byte("k" + strconv.Itoa(i)), Payload: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		s := getStream(t, ns, "orders")
		var total int64
		for _, p := range s.Status.Partitions {
			total += p.End - p.Start
		}
		if total != 10 {
			return fmt.Errorf("status shows %d records: %+v", total, s.Status.Partitions)
		}
		// Appended to: opened, with an epoch and the owner.
		for _, p := range s.Status.Partitions {
			if p.End > 0 && (p.State == streamsv1alpha1.PartitionNotOpened || p.Epoch == nil || *p.Epoch < 0 || p.Owner == "") {
				return fmt.Errorf("partition %d holds records but reads %+v", p.Partition, p)
			}
		}
		return nil
	})
	h.expectEvents("orders", "Created", eventNormal, 1)
}

func TestStreamPolicyUpdatesReachTheBroker(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "logs", b.URL, func(s *streamsv1alpha1.Stream) {
		s.Spec.Partitions = 2
		s.Spec.RetainFor = ptr.To[streamsv1alpha1.Duration]("1h")
	})
	waitReady(t, ns, "logs", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	bc := brokerClient(t, b.URL)

	// Retention and limits.
	updateStream(t, ns, "logs", func(s *streamsv1alpha1.Stream) {
		s.Spec.RetainFor = ptr.To[streamsv1alpha1.Duration]("2h")
		s.Spec.RetainBytes = 1 << 20
		s.Spec.MaxRecordBytes = 4096
	})
	waitReady(t, ns, "logs", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	info, err := bc.GetStream(context.Background(), ns+"/logs")
	if err != nil {
		t.Fatal(err)
	}
	if p := info.Policy; p.RetainFor != 2*time.Hour || p.RetainBytes != 1<<20 || p.MaxRecordBytes != 4096 {
		t.Errorf("broker policy = %+v", p)
	}

	// Partitions grow.
	updateStream(t, ns, "logs", func(s *streamsv1alpha1.Stream) { s.Spec.Partitions = 5 })
	s := waitReady(t, ns, "logs", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if info, err = bc.GetStream(context.Background(), ns+"/logs"); err != nil || info.PartitionCount != 5 {
		t.Fatalf("broker partitions = %d (%v), want 5", info.PartitionCount, err)
	}
	if len(s.Status.Partitions) != 5 {
		t.Errorf("status partitions = %d, want 5", len(s.Status.Partitions))
	}
	h.expectEvents("logs", "Updated", eventNormal, 2)
}

func TestStreamDeletionPolicyDeleteAndRetain(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "gone", b.URL, nil) // deletionPolicy defaults to Delete
	newStream(t, ns, "kept", b.URL, func(s *streamsv1alpha1.Stream) { s.Spec.DeletionPolicy = streamsv1alpha1.DeletionPolicyRetain })
	waitReady(t, ns, "gone", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	waitReady(t, ns, "kept", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	for _, name := range []string{"gone", "kept"} {
		if err := k8s.Delete(context.Background(), getStream(t, ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"gone", "kept"} {
		testwait.NoError(t, 10*time.Second, "", func() error {
			if err := get(t, ns, name, &streamsv1alpha1.Stream{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Stream %s still there (%v)", name, err)
			}
			return nil
		})
	}
	bc := brokerClient(t, b.URL)
	if _, err := bc.GetStream(context.Background(), ns+"/gone"); !brokeradmin.IsNotFound(err) {
		t.Errorf("deletionPolicy Delete: broker stream still there (err %v)", err)
	}
	if _, err := bc.GetStream(context.Background(), ns+"/kept"); err != nil {
		t.Errorf("deletionPolicy Retain: broker stream gone: %v", err)
	}
}

func TestStreamFinalizerDroppedWhenTheClusterIsGone(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "orphan", b.URL, nil)
	waitReady(t, ns, "orphan", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)

	// The cluster goes (envtest has no garbage collector: only the
	// StreamCluster object goes).
	if err := k8s.Delete(context.Background(), getCluster(t, ns, "demo")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, "orphan", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)
	if err := k8s.Delete(context.Background(), getStream(t, ns, "orphan")); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		if err := get(t, ns, "orphan", &streamsv1alpha1.Stream{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	h.expectEvents("orphan", "ClusterGone", eventWarning, 1)
	// A Stream whose cluster never existed is deleted at once too.
	newStream(t, ns, "never", b.URL, func(s *streamsv1alpha1.Stream) { s.Spec.ClusterRef.Name = "ghost" })
	waitReady(t, ns, "never", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)
	if err := k8s.Delete(context.Background(), getStream(t, ns, "never")); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		if err := get(t, ns, "never", &streamsv1alpha1.Stream{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
}

// A Stream deleted while its cluster is gone is released at once, but its
// broker stream stays on the claims: it is recorded, and deleted from the
// brokers when a cluster of that name runs again on them — unless a
// Stream names it again by then.
func TestStreamDeletedWhileTheClusterIsGoneIsDeletedWhenItReturns(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0" })
	atBroker := func(c *streamsv1alpha1.StreamCluster) {
		c.Annotations = map[string]string{AnnotationAdminURL: b.URL}
		c.Spec.Replicas = 1
	}
	newCluster(t, ns, "demo", atBroker)
	newStream(t, ns, "orphan", b.URL, nil)
	newStream(t, ns, "adopted", b.URL, nil)
	waitReady(t, ns, "orphan", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	waitReady(t, ns, "adopted", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)

	if err := k8s.Delete(context.Background(), getCluster(t, ns, "demo")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orphan", "adopted"} {
		waitReady(t, ns, name, metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)
		if err := k8s.Delete(context.Background(), getStream(t, ns, name)); err != nil {
			t.Fatal(err)
		}
		testwait.NoError(t, 10*time.Second, "", func() error {
			if err := get(t, ns, name, &streamsv1alpha1.Stream{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Stream %s still there: %v", name, err)
			}
			return nil
		})
	}
	bc := brokerClient(t, b.URL)
	for _, name := range []string{"orphan", "adopted"} {
		if _, err := bc.GetStream(context.Background(), ns+"/"+name); err != nil {
			t.Fatalf("with its cluster gone nothing could delete %s: %v", name, err)
		}
	}
	h.expectEvents("orphan", "ClusterGone", eventWarning, 1)
	if e := h.events.find("orphan", "ClusterGone"); len(e) == 0 || !strings.Contains(e[0].Note, "demo-deleted-streams") {
		t.Errorf("ClusterGone does not say where the stream is recorded: %+v", e)
	}

	// One is adopted by a new Stream before the cluster returns.
	newStream(t, ns, "adopted", b.URL, nil)
	waitReady(t, ns, "adopted", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)

	newCluster(t, ns, "demo", atBroker)
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 1)
	testwait.NoError(t, 15*time.Second, "", func() error {
		if _, err := bc.GetStream(context.Background(), ns+"/orphan"); !brokeradmin.IsNotFound(err) {
			return fmt.Errorf("orphan still on the broker (%v)", err)
		}
		if err := get(t, ns, "demo-deleted-streams", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the record is still there (%v)", err)
		}
		return nil
	})
	if _, err := bc.GetStream(context.Background(), ns+"/adopted"); err != nil {
		t.Errorf("the adopted stream was deleted: %v", err)
	}
	waitReady(t, ns, "adopted", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	h.expectEvents("demo", "StreamDeleted", eventNormal, 1)
}

func TestStreamBrokerUnreachableBacksOffWithoutHotLoop(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{ErrorBackoffBase: 200 * time.Millisecond, ErrorBackoffMax: 10 * time.Second})
	newCluster(t, ns, "demo", nil) // never Ready: no kubelet
	newStream(t, ns, "lost", closedURL(t), nil)
	waitReady(t, ns, "lost", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotReady)

	// Backoff 200ms, 400ms, 800ms, 1.6s, 3.2s...: about 5 attempts in 3.5s.
	start := h.counts.get("stream", ns, "lost")
	time.Sleep(3500 * time.Millisecond) // measures: how many reconciles in 3.5s
	n := h.counts.get("stream", ns, "lost") - start
	if n < 2 || n > 7 {
		t.Errorf("%d reconciles in 3.5s with the broker unreachable; want a few (exponential backoff), not 0 and not a hot loop", n)
	}
	h.expectEvents("lost", streamsv1alpha1.ReasonClusterNotReady, eventWarning, 1) // however many retries

	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0" })
	setSTSStatus(t, ns, "demo", 3)
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})
	// The cluster Ready but its brokers unreachable from the operator: the
	// reason says so (not a broker error, not a storage failure).
	s := waitReady(t, ns, "lost", metav1.ConditionFalse, streamsv1alpha1.ReasonBrokerUnreachable)
	if msg := condition(s.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "could not be reached", "connection refused") ||
		strings.Contains(msg, "STREAM_BACKEND_FAILED") || strings.Contains(msg, "storage") {
		t.Errorf("BrokerUnreachable message = %q", msg)
	}

	// The broker is found again: Ready.
	updateStream(t, ns, "lost", func(s *streamsv1alpha1.Stream) { s.Annotations[AnnotationAdminURL] = b.URL })
	waitReady(t, ns, "lost", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
}

func TestStreamDeletedOutOfBandIsRecreated(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{ResyncPeriod: 500 * time.Millisecond})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "phoenix", b.URL, func(s *streamsv1alpha1.Stream) { s.Spec.Partitions = 2 })
	waitReady(t, ns, "phoenix", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)

	bc := brokerClient(t, b.URL)
	if err := bc.DeleteStream(context.Background(), ns+"/phoenix"); err != nil {
		t.Fatal(err)
	}
	s := waitReady(t, ns, "phoenix", metav1.ConditionTrue, streamsv1alpha1.ReasonRecreated)
	if msg := condition(s.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "recreated", "offsets restarted at 0") {
		t.Errorf("Ready message = %q", msg)
	}
	if info, err := bc.GetStream(context.Background(), ns+"/phoenix"); err != nil || info.PartitionCount != 2 {
		t.Errorf("recreated stream = %+v, %v", info, err)
	}
	h.expectEvents("phoenix", "Recreated", eventWarning, 1)
}

func TestStreamPolicyDriftIsRepaired(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{ResyncPeriod: 500 * time.Millisecond})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "steady", b.URL, func(s *streamsv1alpha1.Stream) { s.Spec.RetainBytes = 1 << 30 })
	waitReady(t, ns, "steady", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)

	bc := brokerClient(t, b.URL)
	if _, err := bc.UpdatePolicy(context.Background(), ns+"/steady", stream.PolicyValue{RetainBytes: 1 << 20, CompactAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		info, err := bc.GetStream(context.Background(), ns+"/steady")
		if err != nil {
			return err
		}
		if info.Policy.RetainBytes != 1<<30 || info.Policy.CompactAfter != 0 {
			return fmt.Errorf("broker policy still %+v", info.Policy)
		}
		return nil
	})
	h.expectEvents("steady", "PolicyDriftRepaired", eventWarning, 1)
}

// A user's change that a failed reconcile could not apply is reported as
// the user's change once it is, not as drift on the broker: drift is
// decided against the policy last applied, and a failed reconcile moves
// neither it nor status.observedGeneration.
func TestStreamChangeAfterAFailedReconcileIsNotDrift(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "grows", b.URL, func(s *streamsv1alpha1.Stream) { s.Spec.Partitions = 10 })
	s := waitReady(t, ns, "grows", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	applied := s.Status.ObservedGeneration

	// The spec grows while the brokers cannot be reached: the reconcile
	// fails, and status says the new generation is not applied.
	updateStream(t, ns, "grows", func(s *streamsv1alpha1.Stream) {
		s.Spec.Partitions = 12
		s.Annotations[AnnotationAdminURL] = closedURL(t)
	})
	s = waitReady(t, ns, "grows", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotReady)
	if s.Status.ObservedGeneration != applied {
		t.Errorf("a failed reconcile moved observedGeneration %d→%d", applied, s.Status.ObservedGeneration)
	}

	// The brokers are back: the change is applied, as the user's.
	updateStream(t, ns, "grows", func(s *streamsv1alpha1.Stream) { s.Annotations[AnnotationAdminURL] = b.URL })
	s = waitReady(t, ns, "grows", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if len(s.Status.Partitions) != 12 {
		t.Errorf("partitions %d, want 12", len(s.Status.Partitions))
	}
	h.expectEvents("grows", "Updated", eventNormal, 1)
	h.expectEvents("grows", "PolicyDriftRepaired", "", 0)
}

func TestStreamManagedFalseDetaches(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "loose", b.URL, nil)
	waitReady(t, ns, "loose", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)

	updateStream(t, ns, "loose", func(s *streamsv1alpha1.Stream) { s.Annotations[AnnotationManaged] = "false" })
	testwait.NoError(t, 10*time.Second, "", func() error {
		s := getStream(t, ns, "loose")
		if controllerutil.ContainsFinalizer(s, StreamFinalizer) {
			return fmt.Errorf("finalizer still there")
		}
		if c := condition(s.Status.Conditions, streamsv1alpha1.ConditionReady); c.Reason != streamsv1alpha1.ReasonUnmanaged || c.Status != metav1.ConditionUnknown {
			return fmt.Errorf("Ready = %s/%s", c.Status, c.Reason)
		}
		return nil
	})
	// Detached: a spec change does not reach the broker, deleting the
	// resource leaves the stream.
	updateStream(t, ns, "loose", func(s *streamsv1alpha1.Stream) { s.Spec.RetainBytes = 12345 })
	if err := k8s.Delete(context.Background(), getStream(t, ns, "loose")); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		if err := get(t, ns, "loose", &streamsv1alpha1.Stream{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	info, err := brokerClient(t, b.URL).GetStream(context.Background(), ns+"/loose")
	if err != nil {
		t.Fatalf("the detached stream was deleted on the broker: %v", err)
	}
	if info.Policy.RetainBytes == 12345 {
		t.Errorf("a detached Stream's spec reached the broker")
	}
}

func TestStreamContentTypeConflictIsRefusedInStatus(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	bc := brokerClient(t, b.URL)
	if _, _, err := bc.CreateStream(context.Background(), ns+"/taken", client.StreamConfig{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	newStream(t, ns, "taken", b.URL, func(s *streamsv1alpha1.Stream) { s.Spec.ContentType = "application/json" })
	s := waitReady(t, ns, "taken", metav1.ConditionFalse, streamsv1alpha1.ReasonConflict)
	if msg := condition(s.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "text/plain", "application/json") {
		t.Errorf("Conflict message = %q", msg)
	}
	info, err := bc.GetStream(context.Background(), ns+"/taken")
	if err != nil || info.ContentType != "text/plain" {
		t.Errorf("the broker stream was changed: %+v %v", info, err)
	}
	// The cluster's first status may enqueue it once more: let that run.
	settle(t, 500*time.Millisecond, func() int { return h.counts.get("stream", ns, "taken") })
	before := h.counts.get("stream", ns, "taken")
	time.Sleep(1500 * time.Millisecond) // measures: no reconcile for 1.5s
	if n := h.counts.get("stream", ns, "taken") - before; n > 0 {
		t.Errorf("a Conflict was retried %d times in 1.5s: it cannot resolve itself", n)
	}
	h.expectEvents("taken", streamsv1alpha1.ReasonConflict, eventWarning, 1)
}

// An idle Stream is reconciled at most once per resync period (and at
// least about once: that is when drift is repaired).
func TestStreamIdleIsReconciledOncePerResyncPeriod(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	ns := newNamespace(t)
	const period = time.Second
	h := startManager(t, ns, Options{ResyncPeriod: period})
	newCluster(t, ns, "demo", nil)
	newStream(t, ns, "idle", b.URL, nil)
	waitReady(t, ns, "idle", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	// Let the creation's own reconciles run.
	settle(t, 300*time.Millisecond, func() int { return h.counts.get("stream", ns, "idle") })

	const window = 6 * time.Second
	start := h.counts.get("stream", ns, "idle")
	time.Sleep(window) // measures: how many reconciles in the window
	n := h.counts.get("stream", ns, "idle") - start
	// Jitter stretches each period by up to 20%: between window/(1.2 period)
	// and window/period reconciles, plus one for the window's edges.
	if maxN := int(window/period) + 1; n > maxN {
		t.Errorf("%d reconciles of an idle Stream in %s with a %s resync: more than %d", n, window, period, maxN)
	}
	if n < 3 {
		t.Errorf("%d reconciles in %s with a %s resync: the resync does not run", n, window, period)
	}
	t.Logf("%d reconciles in %s (resync %s)", n, window, period)
}
