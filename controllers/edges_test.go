package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/internal/testwait"
)

// The HTTP BrokerAdmin against a real broker: node status answers with the
// metadata leader, and drain, which the single-node broker does not
// implement yet, is ErrNotSupported — so a scale-down is held, never
// executed.
func TestHTTPBrokerAdminAgainstARealBroker(t *testing.T) {
	needsEnvtest(t)
	b := shared(t)
	a := brokeradmin.NewHTTP()
	target := brokeradmin.Broker{Namespace: "ns", Cluster: "demo", Pod: "broker-0", URL: b.URL}
	st, err := a.Status(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != "broker-0" || st.Leader == "" || !st.Ready {
		t.Errorf("status %+v: want node broker-0 with a metadata leader", st)
	}
	if _, err := a.Drain(context.Background(), target); !brokeradmin.IsNotSupported(err) {
		t.Errorf("drain = %v, want ErrNotSupported until the broker implements it", err)
	}
	if err := a.CancelDrain(context.Background(), target); !brokeradmin.IsNotSupported(err) {
		t.Errorf("cancel drain = %v", err)
	}
}

// Events reach the API as events.k8s.io/v1 Events from the operator.
func TestEventsAreWrittenToTheAPI(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	testwait.NoError(t, 20*time.Second, "", func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "demo" && e.Regarding.Kind == "StreamCluster" && e.Reason == "Created" && e.ReportingController == EventSource {
				return nil
			}
		}
		return fmt.Errorf("no Created event from %s among %d events", EventSource, len(list.Items))
	})
}

// Every action on a child is an Event of its own in the API: the events
// API folds events of the same type, reason, action and objects into one
// (a series keeping the first note), which hid "created Role" behind
// "created ServiceAccount (x2)" and "updated StatefulSet" behind "updated
// ConfigMap". Read back from the apiserver, not from the recorder.
func TestEveryChildActionIsItsOwnEvent(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	notes := func(reason string) (map[string]bool, error) {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Kind == "StreamCluster" && e.Regarding.Name == "demo" && e.Reason == reason {
				out[e.Note] = true
			}
		}
		return out, nil
	}
	want := func(reason string, all ...string) func() error {
		return func() error {
			got, err := notes(reason)
			if err != nil {
				return err
			}
			for _, n := range all {
				if !got[n] {
					return fmt.Errorf("no %s Event %q among %v", reason, n, got)
				}
			}
			return nil
		}
	}
	testwait.NoError(t, 20*time.Second, "", want("Created",
		"created ServiceAccount demo-broker", "created Role demo-broker", "created RoleBinding demo-broker",
		"created ConfigMap demo-config", "created Service demo-headless", "created Service demo",
		"created PodDisruptionBudget demo", "created StatefulSet demo"))
	waitObserved(t, ns, "demo")

	// A broker configuration change updates the ConfigMap and the
	// StatefulSet in one reconcile.
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Broker.FlushLinger = ptr.To[streamsv1alpha1.Duration]("5ms")
	})
	testwait.NoError(t, 20*time.Second, "", want("Updated", "updated ConfigMap demo-config", "updated StatefulSet demo"))
}

// The applier: creates, leaves an object it would not change alone (no
// request, no new resourceVersion), updates what differs, keeps the fields
// of other managers, and refuses to write over a newer version than the
// one a decision was based on.
func TestApplierAgainstTheAPIServer(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	ctx := context.Background()
	a := applier{c: k8s, reader: k8s}
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x", Labels: map[string]string{"mine": "yes"}},
			Data:       map[string]string{"k": v},
		}
	}
	if out, err := a.apply(ctx, cm("1")); err != nil || out != applyCreated {
		t.Fatalf("create: %v %v", out, err)
	}
	var cur corev1.ConfigMap
	if err := get(t, ns, "x", &cur); err != nil {
		t.Fatal(err)
	}
	rv := cur.ResourceVersion
	if out, err := a.apply(ctx, cm("1")); err != nil || out != applyUnchanged {
		t.Fatalf("same object: %v %v", out, err)
	}
	cur.Annotations = map[string]string{"theirs": "yes"}
	if err := k8s.Update(ctx, &cur, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	if out, err := a.apply(ctx, cm("2")); err != nil || out != applyUpdated {
		t.Fatalf("update: %v %v", out, err)
	}
	if err := get(t, ns, "x", &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Data["k"] != "2" || cur.Annotations["theirs"] != "yes" {
		t.Errorf("after apply: data %v annotations %v", cur.Data, cur.Annotations)
	}
	if _, err := a.applyIfUnchanged(ctx, cm("3"), rv); !apierrors.IsConflict(err) {
		t.Errorf("apply based on a stale version: %v, want a Conflict", err)
	}
	if err := get(t, ns, "x", &cur); err != nil || cur.Data["k"] != "2" {
		t.Errorf("a refused apply wrote: %v %v", cur.Data, err)
	}
	if out, err := a.applyIfUnchanged(ctx, cm("3"), cur.ResourceVersion); err != nil || out != applyUpdated {
		t.Errorf("apply based on the current version: %v %v", out, err)
	}
}

// Every child of a cluster, applied again as built, makes no request: the
// apiserver's defaults (a claim template's volumeMode and status, a
// Service's clusterIP, a container's terminationMessagePath...) and the
// fields it drops (a claim template's kind) do not count as changes.
func TestApplierSteadyStateSendsNothing(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	ctx := context.Background()
	c := newCluster(t, ns, "demo", nil)
	direct, err := client.NewWithWatch(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	counted, applies := countApplies(t, direct)
	a := applier{c: counted, reader: k8s}
	children := func() []client.Object {
		cm, err := resources.ConfigMap(c)
		if err != nil {
			t.Fatal(err)
		}
		return []client.Object{
			resources.ServiceAccount(c), resources.Role(c), resources.RoleBinding(c), cm,
			resources.HeadlessService(c), resources.ClientService(c), resources.PodDisruptionBudget(c),
			resources.StatefulSet(c, resources.StatefulSetParams{Replicas: 3, ConfigHash: resources.ConfigHash(cm)}),
		}
	}
	for _, child := range children() {
		if out, err := a.apply(ctx, child); err != nil || out != applyCreated {
			t.Fatalf("creating %T %s: %v %v", child, child.GetName(), out, err)
		}
	}
	for _, child := range children() {
		before := applies.Load()
		if out, err := a.apply(ctx, child); err != nil || out != applyUnchanged {
			t.Errorf("%T %s applied again: %v %v", child, child.GetName(), out, err)
		}
		if n := applies.Load() - before; n != 0 {
			t.Errorf("%T %s applied again as built: %d requests, want none", child, child.GetName(), n)
		}
	}
}
