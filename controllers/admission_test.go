package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// Unit tests (-short) of which Streams a cluster keeps: the admission of
// a namespace, and the one Stream that keeps a broker stream, against the
// fake client.

// reconcilerOver is a StreamReconciler reading objs, with the indexes the
// manager has.
func reconcilerOver(objs ...client.Object) *StreamReconciler {
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&streamsv1alpha1.Stream{}, brokerNameIndex, func(o client.Object) []string {
			return []string{brokerNameIndexValue(o.(*streamsv1alpha1.Stream))}
		}).Build()
	return &StreamReconciler{Client: cl}
}

func namespaceLabelled(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func clusterAdmitting(ns string, rule streamsv1alpha1.AllowedNamespaces) *streamsv1alpha1.StreamCluster {
	return &streamsv1alpha1.StreamCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
		Spec: streamsv1alpha1.StreamClusterSpec{AllowedNamespaces: rule}}
}

// streamOf is a Stream of ns naming cluster home/demo and broker stream
// name, created at second created.
func streamOf(ns, name, home, brokerName string, created int) *streamsv1alpha1.Stream {
	return &streamsv1alpha1.Stream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
			CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000+int64(created), 0))},
		Spec: streamsv1alpha1.StreamSpec{ClusterRef: streamsv1alpha1.ClusterReference{Name: "demo", Namespace: home}, Name: brokerName},
	}
}

func TestAdmissionNamesTheClusterAndTheRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := reconcilerOver(namespaceLabelled("shop", map[string]string{"team": "shop"}), namespaceLabelled("billing", nil))
	sel := streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}}
	cases := []struct {
		name    string
		rule    streamsv1alpha1.AllowedNamespaces
		ns      string
		admit   bool
		message []string
	}{
		{"beside the cluster", streamsv1alpha1.AllowedNamespaces{}, "picomq-system", true, nil},
		{"Same", streamsv1alpha1.AllowedNamespaces{}, "shop", false, []string{"picomq-system/demo", "namespace shop", "from: Same"}},
		{"All", streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromAll}, "billing", true, nil},
		{"selected", sel, "shop", true, nil},
		{"not selected", sel, "billing", false, []string{"picomq-system/demo", "namespace billing", "from: Selector (team=shop)"}},
		{"namespace gone", sel, "gone", false, []string{"namespace gone"}},
		{"selector that does not parse", streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}},
			"shop", false, []string{"picomq-system/demo admits no other namespace", "allowedNamespaces.selector"}},
	}
	for _, c := range cases {
		s := streamOf(c.ns, "orders", "picomq-system", "", 0)
		denied, err := r.admission(ctx, s, clusterAdmitting("picomq-system", c.rule))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (denied == "") != c.admit {
			t.Errorf("%s: denied %q, want admitted %v", c.name, denied, c.admit)
		}
		if !containsAll(denied, c.message...) {
			t.Errorf("%s: message %q, want it to name %q", c.name, denied, c.message)
		}
	}
}

// One Stream keeps a broker stream: the one that applied its spec to it,
// else the oldest; a detached Stream or one of a namespace not admitted
// keeps nothing, so no namespace holds a name against the admitted ones.
func TestKeeperOfABrokerStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const home = "picomq-system"
	c := clusterAdmitting(home, streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "yes"}}})
	yes := map[string]string{"tenant": "yes"}
	keeperOf := func(s *streamsv1alpha1.Stream, objs ...client.Object) string {
		t.Helper()
		objs = append(objs, namespaceLabelled("shop", yes), namespaceLabelled("billing", yes), namespaceLabelled("outsider", nil))
		k, err := reconcilerOver(objs...).keeper(ctx, s, c)
		if err != nil {
			t.Fatal(err)
		}
		if k == nil {
			return ""
		}
		return k.Namespace + "/" + k.Name
	}

	// metadata.name is unique in a namespace only: orders in shop and
	// orders in billing are one broker stream, "orders".
	shop, billing := streamOf("shop", "orders", home, "", 1), streamOf("billing", "orders", home, "", 2)
	if got := keeperOf(billing, shop, billing); got != "shop/orders" {
		t.Errorf("keeper %q, want the oldest, shop/orders", got)
	}
	if got := keeperOf(shop, shop, billing); got != "shop/orders" || keptByAnother(shop, shop) {
		t.Errorf("keeper %q, want shop/orders itself", got)
	}
	// Another name is another broker stream.
	other := streamOf("billing", "orders", home, "billing/orders", 2)
	if got := keeperOf(other, shop, other); got != "billing/orders" {
		t.Errorf("keeper %q, want billing/orders: its spec.name is its own", got)
	}
	// The one that applied its spec keeps it, older or not.
	applied := billing.DeepCopy()
	applied.Status.ObservedGeneration = 1
	if got := keeperOf(shop, shop, applied); got != "billing/orders" {
		t.Errorf("keeper %q, want billing/orders, which kept it first", got)
	}
	// Created in the same second: by namespace, then name.
	tie := streamOf("billing", "orders", home, "", 1)
	if got := keeperOf(tie, shop, tie); got != "billing/orders" {
		t.Errorf("keeper %q, want billing/orders (b before s)", got)
	}
	// Neither a namespace not admitted nor a detached Stream holds it.
	outsider := streamOf("outsider", "orders", home, "", 0)
	if got := keeperOf(billing, outsider, billing); got != "billing/orders" {
		t.Errorf("keeper %q: a namespace not admitted holds the name", got)
	}
	detached := shop.DeepCopy()
	detached.Annotations = map[string]string{AnnotationManaged: "false"}
	if got := keeperOf(billing, detached, billing); got != "billing/orders" {
		t.Errorf("keeper %q: a detached Stream holds the name", got)
	}
	if got := keeperOf(outsider, outsider); got != "" {
		t.Errorf("keeper %q of a Stream not admitted, want none", got)
	}
}
