package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	brokerclient "github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/internal/testwait"
)

// Streams in the application's namespace (issue 31): the StreamCluster in
// one namespace ("home", picomq-system in a real cluster), its Streams in
// others, a manager watching all of them.

// startManagerOver runs one manager watching every namespace given.
func startManagerOver(t *testing.T, opts Options, namespaces ...string) *harness {
	t.Helper()
	return startManagerIn(t, namespaces, restCfg, opts, logf.Log.WithName(namespaces[0]))
}

// inCluster points a Stream at StreamCluster demo of namespace home.
func inCluster(home string) func(*streamsv1alpha1.Stream) {
	return func(s *streamsv1alpha1.Stream) { s.Spec.ClusterRef.Namespace = home }
}

// admitting sets a cluster's allowedNamespaces.
func admitting(from streamsv1alpha1.NamespacesFrom, selector *metav1.LabelSelector) func(*streamsv1alpha1.StreamCluster) {
	return func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.AllowedNamespaces = streamsv1alpha1.AllowedNamespaces{From: from, Selector: selector}
	}
}

// teamSelector selects the namespaces labelled team=<team>.
func teamSelector(team string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}
}

// labelNamespace sets (value != "") or removes a label of namespace ns.
func labelNamespace(t *testing.T, ns, key, value string) {
	t.Helper()
	testwait.NoError(t, 10*time.Second, "", func() error {
		var n corev1.Namespace
		if err := get(t, "", ns, &n); err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if value == "" {
			delete(n.Labels, key)
		} else {
			n.Labels[key] = value
		}
		return k8s.Update(context.Background(), &n)
	})
}

// onBroker says whether the broker at url holds stream name.
func onBroker(t *testing.T, url, name string) bool {
	t.Helper()
	_, err := brokerClient(t, url).GetStream(context.Background(), name)
	switch {
	case err == nil:
		return true
	case brokeradmin.IsNotFound(err):
		return false
	}
	t.Fatalf("GetStream %s: %v", name, err)
	return false
}

// waitGone waits until the Stream is deleted (its finalizer dropped).
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	testwait.NoError(t, 10*time.Second, "", func() error {
		if err := get(t, ns, name, &streamsv1alpha1.Stream{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Stream %s/%s still there (%v)", ns, name, err)
		}
		return nil
	})
}

// readyMessage is the Ready condition's message.
func readyMessage(s *streamsv1alpha1.Stream) string {
	return condition(s.Status.Conditions, streamsv1alpha1.ConditionReady).Message
}

// Same (the default) keeps the cluster's namespace only: a Stream of
// another is refused in status and nothing reaches the broker; All admits
// it; Selector admits it by its namespace's labels.
func TestStreamInAnotherNamespaceAdmittedBySameAllAndSelector(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	home, app := newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", nil)

	// Same: the cluster's own namespace only.
	newStream(t, home, "beside", b.URL, nil)
	newStream(t, app, "orders", b.URL, inCluster(home))
	waitReady(t, home, "beside", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	s := waitReady(t, app, "orders", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	if msg := readyMessage(s); !containsAll(msg, home+"/demo", "namespace "+app, "from: Same") {
		t.Errorf("NamespaceNotAllowed message = %q: it must name the cluster, the namespace and the rule", msg)
	}
	if onBroker(t, b.URL, app+"/orders") {
		t.Fatalf("a Stream of a namespace the cluster does not admit created its stream")
	}
	h.expectEvents("orders", streamsv1alpha1.ReasonNamespaceNotAllowed, eventWarning, 1)

	// All: admitted, created on the broker.
	updateCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromAll, nil))
	s = waitReady(t, app, "orders", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if !onBroker(t, b.URL, app+"/orders") {
		t.Fatalf("admitted and Ready, but the stream is not on the broker")
	}
	if !controllerutil.ContainsFinalizer(s, StreamFinalizer) || len(s.Status.Partitions) != 1 {
		t.Errorf("finalizers %v, partitions %+v", s.Finalizers, s.Status.Partitions)
	}
	if len(s.OwnerReferences) != 0 {
		t.Errorf("a Stream got owner references %v: none may cross namespaces", s.OwnerReferences)
	}

	// Selector: admitted by its namespace's labels.
	labelNamespace(t, app, "team", "shop")
	updateCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromSelector, teamSelector("shop")))
	newStream(t, app, "payments", b.URL, inCluster(home))
	waitReady(t, app, "payments", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if !onBroker(t, b.URL, app+"/payments") {
		t.Fatalf("admitted by its labels and Ready, but the stream is not on the broker")
	}
	// The cluster's own namespace stays admitted whatever the selector.
	newStream(t, home, "still-beside", b.URL, nil)
	waitReady(t, home, "still-beside", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
}

// A namespace's labels move its Streams in and out of the cluster's
// selector. Out, a Stream is refused in status and its broker stream is
// left as it is — never deleted, never changed — until it is in again.
func TestStreamNamespaceLabelMovesItInAndOut(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	home, app := newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromSelector, teamSelector("shop")))
	newStream(t, app, "orders", b.URL, func(s *streamsv1alpha1.Stream) {
		inCluster(home)(s)
		s.Spec.Partitions = 2
	})
	s := waitReady(t, app, "orders", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	if msg := readyMessage(s); !containsAll(msg, home+"/demo", "from: Selector (team=shop)") {
		t.Errorf("NamespaceNotAllowed message = %q: it must name the cluster and its selector", msg)
	}
	if onBroker(t, b.URL, app+"/orders") {
		t.Fatalf("created on the broker before the namespace was admitted")
	}

	// In: the label change alone reconciles it (no resync in 15s).
	labelNamespace(t, app, "team", "shop")
	waitReady(t, app, "orders", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	bc := brokerClient(t, b.URL)
	if info, err := bc.GetStream(context.Background(), app+"/orders"); err != nil || info.PartitionCount != 2 {
		t.Fatalf("broker stream = %+v, %v", info, err)
	}

	// Out: refused, and the stream stays on the broker as it was, even
	// through a spec change.
	labelNamespace(t, app, "team", "")
	waitReady(t, app, "orders", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	updateStream(t, app, "orders", func(s *streamsv1alpha1.Stream) { s.Spec.Partitions = 3 })
	waitReady(t, app, "orders", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	consistently(t, time.Second, func() error {
		info, err := bc.GetStream(context.Background(), app+"/orders")
		if err != nil {
			return fmt.Errorf("the stream of a Stream no longer admitted was deleted: %v", err)
		}
		if info.PartitionCount != 2 {
			return fmt.Errorf("the stream of a Stream no longer admitted was changed: %d partitions", info.PartitionCount)
		}
		return nil
	})

	// In again: taken up where it was, the change applied.
	labelNamespace(t, app, "team", "shop")
	s = waitReady(t, app, "orders", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if info, err := bc.GetStream(context.Background(), app+"/orders"); err != nil || info.PartitionCount != 3 {
		t.Fatalf("admitted again: broker stream = %+v, %v, want 3 partitions", info, err)
	}
	if len(s.Status.Partitions) != 3 {
		t.Errorf("status partitions %d, want 3", len(s.Status.Partitions))
	}
	h.expectEvents("orders", streamsv1alpha1.ReasonNamespaceNotAllowed, eventWarning, 2)
	h.expectEvents("orders", "Recreated", "", 0)
}

// The finalizer of a Stream whose cluster is in another namespace honours
// deletionPolicy; a Stream no longer admitted deletes nothing.
func TestStreamDeletionAcrossNamespaces(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	home, app := newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromAll, nil))
	newStream(t, app, "gone", b.URL, inCluster(home))
	newStream(t, app, "kept", b.URL, func(s *streamsv1alpha1.Stream) {
		inCluster(home)(s)
		s.Spec.DeletionPolicy = streamsv1alpha1.DeletionPolicyRetain
	})
	newStream(t, app, "refused", b.URL, inCluster(home))
	for _, name := range []string{"gone", "kept", "refused"} {
		waitReady(t, app, name, metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	}

	for _, name := range []string{"gone", "kept"} {
		if err := k8s.Delete(context.Background(), getStream(t, app, name)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, app, name)
	}
	if onBroker(t, b.URL, app+"/gone") {
		t.Errorf("deletionPolicy Delete across namespaces: the broker stream is still there")
	}
	if !onBroker(t, b.URL, app+"/kept") {
		t.Errorf("deletionPolicy Retain across namespaces: the broker stream was deleted")
	}

	// The cluster stops admitting the namespace: deleting the Stream
	// (deletionPolicy Delete) leaves its stream on the broker.
	updateCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromSame, nil))
	waitReady(t, app, "refused", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	if err := k8s.Delete(context.Background(), getStream(t, app, "refused")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, app, "refused")
	if !onBroker(t, b.URL, app+"/refused") {
		t.Errorf("a Stream the cluster no longer admits deleted its broker stream")
	}
	// One Warning for the refusal in status, one for the deletion.
	h.expectEvents("refused", streamsv1alpha1.ReasonNamespaceNotAllowed, eventWarning, 2)
}

// Deleting the StreamCluster while Streams of other namespaces name it
// does what it does beside it: they are released at once and their broker
// streams recorded, in the cluster's namespace, for deletion when the
// cluster returns — but only those the cluster had kept: a namespace never
// admitted records nothing.
func TestStreamClusterDeletedWithStreamsInOtherNamespaces(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	home, app, other := newNamespace(t), newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, home, app, other)
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0" })
	labelNamespace(t, app, "team", "shop")
	atBroker := func(c *streamsv1alpha1.StreamCluster) {
		c.Annotations = map[string]string{AnnotationAdminURL: b.URL}
		c.Spec.Replicas = 1
		admitting(streamsv1alpha1.NamespacesFromSelector, teamSelector("shop"))(c)
	}
	newCluster(t, home, "demo", atBroker)
	newStream(t, app, "orphan", b.URL, inCluster(home))
	newStream(t, app, "adopted", b.URL, inCluster(home))
	waitReady(t, app, "orphan", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	waitReady(t, app, "adopted", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	// A namespace never admitted names a stream another team could hold.
	bc := brokerClient(t, b.URL)
	if _, _, err := bc.CreateStream(context.Background(), other+"/squat", brokerclient.StreamConfig{ContentType: streamsv1alpha1.DefaultContentType}); err != nil {
		t.Fatal(err)
	}
	newStream(t, other, "squat", b.URL, inCluster(home))
	waitReady(t, other, "squat", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)

	if err := k8s.Delete(context.Background(), getCluster(t, home, "demo")); err != nil {
		t.Fatal(err)
	}
	for _, key := range [][2]string{{app, "orphan"}, {app, "adopted"}, {other, "squat"}} {
		waitReady(t, key[0], key[1], metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)
		if err := k8s.Delete(context.Background(), getStream(t, key[0], key[1])); err != nil {
			t.Fatal(err)
		}
		waitGone(t, key[0], key[1])
	}
	var record corev1.ConfigMap
	if err := get(t, home, "demo-deleted-streams", &record); err != nil {
		t.Fatalf("the stream was not recorded in the cluster's namespace: %v", err)
	}
	if got := deletedStreams(&record); len(got) != 2 || got[0] != app+"/adopted" || got[1] != app+"/orphan" {
		t.Errorf("recorded %v, want only %s's adopted and orphan", got, app)
	}
	if len(record.OwnerReferences) != 0 {
		t.Errorf("the record has owner references %v", record.OwnerReferences)
	}
	h.expectEvents("orphan", "ClusterGone", eventWarning, 1)
	// One is named again, from its namespace, before the cluster returns.
	newStream(t, app, "adopted", b.URL, inCluster(home))
	waitReady(t, app, "adopted", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)

	newCluster(t, home, "demo", atBroker)
	waitSTS(t, home, "demo", nil)
	setSTSStatus(t, home, "demo", 1)
	testwait.NoError(t, 15*time.Second, "", func() error {
		if onBroker(t, b.URL, app+"/orphan") {
			return fmt.Errorf("%s/orphan still on the broker", app)
		}
		if err := get(t, home, "demo-deleted-streams", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the record is still there (%v)", err)
		}
		return nil
	})
	if !onBroker(t, b.URL, other+"/squat") {
		t.Errorf("a Stream of a namespace never admitted had its broker stream deleted")
	}
	if !onBroker(t, b.URL, app+"/adopted") {
		t.Errorf("a stream a Stream of another namespace names again was deleted")
	}
	waitReady(t, app, "adopted", metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
}

// A cluster in a namespace the operator does not watch (--namespaces) is
// one it cannot see: the Stream says so, and deleting it is not blocked.
func TestStreamClusterInAnUnwatchedNamespace(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	home, app := newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, app)
	newCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromAll, nil))
	newStream(t, app, "lost", b.URL, inCluster(home))
	s := waitReady(t, app, "lost", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)
	if msg := readyMessage(s); !containsAll(msg, "does not watch namespace "+home, "--namespaces") {
		t.Errorf("ClusterNotFound message = %q: it must say the operator does not watch the namespace", msg)
	}
	if onBroker(t, b.URL, app+"/lost") {
		t.Errorf("created on a cluster the operator cannot see")
	}
	if err := k8s.Delete(context.Background(), getStream(t, app, "lost")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, app, "lost")
	h.expectEvents("lost", "ClusterNotWatched", eventWarning, 1)
}

// metadata.name is unique in a namespace only: Streams "orders" of two
// namespaces name one broker stream. The first keeps it; the second is a
// Conflict that asks nothing of the broker and deletes nothing; once the
// first is deleted, the second takes it over.
func TestStreamOneBrokerStreamOneStream(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	home, shop, billing := newNamespace(t), newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, home, shop, billing)
	newCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromAll, nil))
	name := "orders-" + home // the default broker name: unique to this test
	defaultName := func(retainBytes int64) func(*streamsv1alpha1.Stream) {
		return func(s *streamsv1alpha1.Stream) {
			inCluster(home)(s)
			s.Spec.Name = ""
			s.Spec.RetainBytes = retainBytes
		}
	}
	newStream(t, shop, name, b.URL, defaultName(1<<30))
	waitReady(t, shop, name, metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	newStream(t, billing, name, b.URL, defaultName(1<<20))
	s := waitReady(t, billing, name, metav1.ConditionFalse, streamsv1alpha1.ReasonConflict)
	if msg := readyMessage(s); !containsAll(msg, "kept by Stream "+shop+"/"+name) {
		t.Errorf("Conflict message = %q: it must name the Stream that keeps the broker stream", msg)
	}
	bc := brokerClient(t, b.URL)
	consistently(t, time.Second, func() error {
		info, err := bc.GetStream(context.Background(), name)
		if err != nil || info.Policy.RetainBytes != 1<<30 {
			return fmt.Errorf("the second Stream reached the broker stream: %+v, %v", info.Policy, err)
		}
		return nil
	})

	// Deleting the second (deletionPolicy Delete) deletes nothing.
	if err := k8s.Delete(context.Background(), getStream(t, billing, name)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, billing, name)
	if !onBroker(t, b.URL, name) {
		t.Fatalf("deleting a Stream that did not keep the broker stream deleted it")
	}
	h.expectEvents(name, "Retained", eventNormal, 1)

	// Deleting the first deletes it, and a second waiting takes it over.
	newStream(t, billing, name, b.URL, defaultName(1<<20))
	waitReady(t, billing, name, metav1.ConditionFalse, streamsv1alpha1.ReasonConflict)
	if err := k8s.Delete(context.Background(), getStream(t, shop, name)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, shop, name)
	waitReady(t, billing, name, metav1.ConditionTrue, streamsv1alpha1.ReasonCreated)
	if info, err := bc.GetStream(context.Background(), name); err != nil || info.Policy.RetainBytes != 1<<20 {
		t.Errorf("taken over: broker stream %+v, %v, want the second Stream's policy", info.Policy, err)
	}
}
