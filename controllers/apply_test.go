package controllers

// Tests of the applier that need no apiserver: the apply body, the "already
// holds it" check, and the apply itself against controller-runtime's fake
// client (which implements server-side apply with client-go's schemas).
// TestApplierAgainstTheAPIServer (edges_test.go) runs the same against a
// real apiserver.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/picomq/picomq/controllers/resources"
)

func TestApplyBody(t *testing.T) {
	t.Parallel()
	c := testCluster()
	cm, _ := resources.ConfigMap(c)
	sts := resources.StatefulSet(c, resources.StatefulSetParams{Replicas: 3, ConfigHash: resources.ConfigHash(cm)})
	sts.ResourceVersion = "12"
	sts.UID = "u"
	sts.Generation = 3
	body, err := applyBody(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: body}
	if _, ok := body["status"]; ok {
		t.Errorf("status sent in an apply")
	}
	if u.GetResourceVersion() != "" || u.GetUID() != "" || u.GetGeneration() != 0 || u.GetAPIVersion() != "apps/v1" || u.GetKind() != "StatefulSet" {
		t.Errorf("meta: rv %q uid %q generation %d %s %s", u.GetResourceVersion(), u.GetUID(), u.GetGeneration(), u.GetAPIVersion(), u.GetKind())
	}
	if replicas, _, _ := unstructured.NestedInt64(body, "spec", "replicas"); replicas != 3 {
		t.Errorf("spec.replicas = %d, want 3 (an int64, as the unstructured converter has it)", replicas)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case nil:
			t.Errorf("null at %s", path)
		case map[string]any:
			for k, e := range x {
				if strings.Contains(path, "volumeClaimTemplates") && (k == "status" || k == "kind" || k == "apiVersion") {
					t.Errorf("claim template %s sent at %s", k, path)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	walk("", body)
	if sts.ResourceVersion != "12" || sts.Spec.VolumeClaimTemplates[0].Kind != "PersistentVolumeClaim" {
		t.Errorf("applyBody changed the object it was given")
	}
}

// stored is obj as an apiserver would give it back: what a builder set,
// plus defaults, server-filled metadata and another manager's additions.
func storedService(c *corev1.Service) *corev1.Service {
	s := c.DeepCopy()
	s.ResourceVersion, s.UID, s.CreationTimestamp = "7", "uid", metav1.Now()
	s.Labels["added-by"] = "someone-else"
	s.Spec.ClusterIP = "10.0.0.7"
	s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = 30000 + int32(i)
	}
	return s
}

func TestHolds(t *testing.T) {
	t.Parallel()
	c := testCluster()
	svcGVK := corev1.SchemeGroupVersion.WithKind("Service")
	body := func(o client.Object) map[string]any {
		t.Helper()
		m, err := applyBody(o, o.GetObjectKind().GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := resources.ClientService(c)
	for _, tc := range []struct {
		name   string
		stored func() client.Object
		held   bool
	}{
		{"defaults and other managers' fields", func() client.Object { return storedService(want) }, true},
		{"a label of ours changed", func() client.Object {
			s := storedService(want)
			s.Labels[resources.LabelManagedBy] = "someone"
			return s
		}, false},
		{"a label of ours removed", func() client.Object {
			s := storedService(want)
			delete(s.Labels, resources.LabelManagedBy)
			return s
		}, false},
		{"a port of ours changed", func() client.Object {
			s := storedService(want)
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(1)
			return s
		}, false},
		{"another port added (ports merge by key)", func() client.Object {
			s := storedService(want)
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "x", Port: 1, Protocol: corev1.ProtocolTCP})
			return s
		}, true},
		{"the selector extended (an atomic map: replaced whole)", func() client.Object {
			s := storedService(want)
			s.Spec.Selector = map[string]string{"extra": "1"}
			for k, v := range want.Spec.Selector {
				s.Spec.Selector[k] = v
			}
			return s
		}, false},
	} {
		if got := holds(scheme, svcGVK, tc.stored(), body(want)); got != tc.held {
			t.Errorf("%s: holds = %v, want %v", tc.name, got, tc.held)
		}
	}

	// A StatefulSet as the apiserver keeps it: claim templates (an atomic
	// list) without kind and apiVersion, with volumeMode and status phase
	// set, defaults everywhere else.
	cm, _ := resources.ConfigMap(c)
	sts := resources.StatefulSet(c, resources.StatefulSetParams{Replicas: 3, ConfigHash: resources.ConfigHash(cm)})
	stored := sts.DeepCopy()
	stored.ResourceVersion, stored.Generation = "9", 2
	stored.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	stored.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
	stored.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	for i := range stored.Spec.VolumeClaimTemplates {
		v := &stored.Spec.VolumeClaimTemplates[i]
		v.APIVersion, v.Kind = "", ""
		v.Status.Phase = corev1.ClaimPending
	}
	stored.Status = appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, ObservedGeneration: 2}
	stsGVK := appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	if !holds(scheme, stsGVK, stored, body(sts)) {
		t.Errorf("a stored StatefulSet with defaults does not hold what was applied")
	}
	stored.Spec.Template.Spec.Containers[0].Image = "other"
	if holds(scheme, stsGVK, stored, body(sts)) {
		t.Errorf("another image holds the built one")
	}

	// A kind client-go does not know: the schema is deduced (maps merged,
	// lists atomic).
	sm := resources.ServiceMonitor(c)
	smStored := sm.DeepCopy()
	smStored.SetResourceVersion("3")
	smStored.SetAnnotations(map[string]string{"theirs": "yes"})
	_ = unstructured.SetNestedField(smStored.Object, "30s", "spec", "scrapeTimeout")
	if !holds(scheme, resources.ServiceMonitorGVK, smStored, body(sm)) {
		t.Errorf("a ServiceMonitor with another manager's fields does not hold ours")
	}
	_ = unstructured.SetNestedSlice(smStored.Object, []any{map[string]any{"port": "other"}}, "spec", "endpoints")
	if holds(scheme, resources.ServiceMonitorGVK, smStored, body(sm)) {
		t.Errorf("other endpoints hold ours")
	}
}

// countApplies wraps c to count the applies sent through it.
func countApplies(t *testing.T, c client.WithWatch) (client.Client, *atomic.Int32) {
	t.Helper()
	var applies atomic.Int32
	return interceptor.NewClient(c, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			applies.Add(1)
			return c.Apply(ctx, obj, opts...)
		},
	}), &applies
}

// countingClient is a fake client that counts the applies it is sent.
func countingClient(t *testing.T, objs ...client.Object) (client.Client, *atomic.Int32) {
	t.Helper()
	// The fake client's RESTMapper knows no kind unless told.
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.AddSpecific(corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		corev1.SchemeGroupVersion.WithResource("configmaps"), corev1.SchemeGroupVersion.WithResource("configmap"), meta.RESTScopeNamespace)
	return countApplies(t, fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(objs...).Build())
}

func TestApplier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, applies := countingClient(t)
	a := applier{c: k, reader: k}
	cm := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Labels: map[string]string{"mine": "yes"}},
			Data:       map[string]string{"k": v},
		}
	}
	if out, err := a.apply(ctx, cm("1")); err != nil || out != applyCreated {
		t.Fatalf("create: %v %v", out, err)
	}
	var cur corev1.ConfigMap
	if err := k.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, &cur); err != nil {
		t.Fatal(err)
	}
	rv := cur.ResourceVersion

	// The same object: no request at all, and the object given is the
	// current one.
	before := applies.Load()
	same := cm("1")
	if out, err := a.apply(ctx, same); err != nil || out != applyUnchanged {
		t.Fatalf("same object: %v %v", out, err)
	}
	if n := applies.Load() - before; n != 0 {
		t.Errorf("%d apply requests for an object that holds every field already", n)
	}
	if same.ResourceVersion != rv {
		t.Errorf("unchanged apply: object at resourceVersion %q, want the current %q", same.ResourceVersion, rv)
	}

	// Another manager's field does not count; a change of ours does.
	cur.Annotations = map[string]string{"theirs": "yes"}
	if err := k.Update(ctx, &cur, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	if out, err := a.apply(ctx, cm("1")); err != nil || out != applyUnchanged {
		t.Fatalf("after another manager's update: %v %v", out, err)
	}
	changed := cm("2")
	if out, err := a.apply(ctx, changed); err != nil || out != applyUpdated {
		t.Fatalf("update: %v %v", out, err)
	}
	if changed.Data["k"] != "2" || changed.Annotations["theirs"] != "yes" || changed.ResourceVersion == cur.ResourceVersion {
		t.Errorf("the object given is not the server's answer: %+v", changed.ObjectMeta)
	}

	// A decision based on a stale version is refused, locally, as a
	// Conflict naming the resource; nothing is sent.
	before = applies.Load()
	_, err := a.applyIfUnchanged(ctx, cm("3"), rv)
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply based on a stale version: %v, want a Conflict", err)
	}
	if se, ok := err.(apierrors.APIStatus); !ok || se.Status().Details.Kind != "configmaps" {
		t.Errorf("conflict details %+v, want resource configmaps", err)
	}
	if n := applies.Load() - before; n != 0 {
		t.Errorf("a refused apply sent %d requests", n)
	}
	if _, err := a.applyIfUnchanged(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "missing"}}, "1"); !apierrors.IsConflict(err) {
		t.Errorf("apply based on a version of an object that is gone: %v, want a Conflict", err)
	}
	if err := k.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, &cur); err != nil || cur.Data["k"] != "2" {
		t.Fatalf("a refused apply wrote: %v %v", cur.Data, err)
	}
	if out, err := a.applyIfUnchanged(ctx, cm("3"), cur.ResourceVersion); err != nil || out != applyUpdated {
		t.Errorf("apply based on the current version: %v %v", out, err)
	}
}
