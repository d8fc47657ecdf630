package crdapply

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

func TestLoadIsTheGeneratedCRDs(t *testing.T) {
	crds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if len(crds) != len(files) || len(crds) == 0 {
		t.Fatalf("%d embedded CRDs, %d files in config/crd/bases", len(crds), len(files))
	}
	want := []string{"streamaccesses.streams.picomq.io", "streamclusters.streams.picomq.io", "streams.streams.picomq.io"}
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}

// TestRoleNamesEveryCRD: the ClusterRole `make manifests` writes lets the
// operator create and patch exactly the CRDs it embeds (the kubebuilder
// marker in crdapply.go lists them by hand).
func TestRoleNamesEveryCRD(t *testing.T) {
	rule := crdRule(t)
	if !slices.Equal(rule.ResourceNames, Names()) {
		t.Errorf("config/rbac/role.yaml's CRD rule names %v; the binary embeds %v: update the marker in crdapply.go", rule.ResourceNames, Names())
	}
	for _, verb := range []string{"get", "create", "patch"} {
		if !slices.Contains(rule.Verbs, verb) {
			t.Errorf("the CRD rule lacks %q: %v", verb, rule.Verbs)
		}
	}
}

// crdRule is config/rbac/role.yaml's rule on customresourcedefinitions
// with resourceNames.
func crdRule(t *testing.T) rbacv1.PolicyRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &role); err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "customresourcedefinitions") && len(r.ResourceNames) > 0 {
			return r
		}
	}
	t.Fatal("config/rbac/role.yaml has no rule on customresourcedefinitions with resourceNames: run make manifests")
	return rbacv1.PolicyRule{}
}

// TestApplyUpgradesAnOlderCRD: a StreamCluster CRD as an older release
// installed it (no spec.paused, applied by helm) prunes the field; after
// Apply, run as a user holding only the ClusterRole's CRD rule, the field
// is served, the CRDs the older release lacked exist, and no other CRD can
// be touched.
func TestApplyUpgradesAnOlderCRD(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest: skipped under -short")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("KUBEBUILDER_ASSETS is not set: make test sets it (hack/envtest-assets.sh)")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = apiextensionsv1.AddToScheme(scheme)
	_ = rbacv1.AddToScheme(scheme)
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	crds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var clusters *unstructured.Unstructured
	for _, c := range crds {
		if c.GetName() == "streamclusters.streams.picomq.io" {
			clusters = c.DeepCopy()
		}
	}
	versions, _, _ := unstructured.NestedSlice(clusters.Object, "spec", "versions")
	v0 := versions[0].(map[string]any)
	unstructured.RemoveNestedField(v0, "schema", "openAPIV3Schema", "properties", "spec", "properties", "paused")
	if err := unstructured.SetNestedSlice(clusters.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, clusters, client.FieldOwner("helm")); err != nil {
		t.Fatal(err)
	}
	if err := waitEstablished(ctx, admin, clusters.GetName()); err != nil {
		t.Fatal(err)
	}
	crs, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if paused(t, ctx, crs, "before") {
		t.Fatal("the older CRD served spec.paused: the test's CRD is not older")
	}

	// A user with only the ClusterRole's CRD rule, as the operator runs.
	rule := crdRule(t)
	role := &rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{rule}}
	role.Name = "picomq-crds"
	binding := &rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "operator"}},
	}
	binding.Name = role.Name
	if err := admin.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	opCfg := rest.CopyConfig(cfg)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: "operator"}
	operator, err := client.New(opCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC caches may lag the binding by a moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = Apply(ctx, operator, crds, time.Minute)
		if err == nil || !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("apply as the operator: %v", err)
	}
	for _, name := range Names() {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			t.Fatalf("%s after Apply: %v", name, err)
		}
		owned := false
		for _, mf := range got.ManagedFields {
			owned = owned || (mf.Manager == FieldManager && mf.Operation == "Apply")
		}
		if !owned {
			t.Errorf("%s: no Apply entry of %s in managedFields", name, FieldManager)
		}
	}
	if !paused(t, ctx, crs, "after") {
		t.Error("spec.paused is not served after Apply")
	}
	// Again: idempotent (a second replica, a restart).
	if err := Apply(ctx, operator, crds, time.Minute); err != nil {
		t.Errorf("second apply: %v", err)
	}

	// Someone else's CRD is out of reach.
	other := crds[0].DeepCopy()
	other.SetName("widgets.example.com")
	_ = unstructured.SetNestedField(other.Object, "example.com", "spec", "group")
	_ = unstructured.SetNestedField(other.Object, "widgets", "spec", "names", "plural")
	_ = unstructured.SetNestedField(other.Object, "widget", "spec", "names", "singular")
	_ = unstructured.SetNestedField(other.Object, "Widget", "spec", "names", "kind")
	_ = unstructured.SetNestedField(other.Object, "WidgetList", "spec", "names", "listKind")
	unstructured.RemoveNestedField(other.Object, "spec", "names", "shortNames")
	unstructured.RemoveNestedField(other.Object, "spec", "names", "categories")
	if err := Apply(ctx, operator, []*unstructured.Unstructured{other}, time.Second); !apierrors.IsForbidden(err) {
		t.Errorf("applying another CRD as the operator: %v, want Forbidden", err)
	}
}

// paused creates a StreamCluster with spec.paused and says whether the API
// server kept the field.
func paused(t *testing.T, ctx context.Context, c client.Client, name string) bool {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("streams.picomq.io/v1alpha1")
	u.SetKind("StreamCluster")
	u.SetNamespace("default")
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, true, "spec", "paused")
	var err error
	for range 50 { // the new schema takes a moment to be served
		if err = c.Create(ctx, u); err == nil || !apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create StreamCluster %s: %v", name, err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatal(err)
	}
	v, found, _ := unstructured.NestedBool(got.Object, "spec", "paused")
	return found && v
}

func waitEstablished(ctx context.Context, c client.Client, name string) error {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	u.SetName(name)
	return Apply(ctx, &getOnly{c}, []*unstructured.Unstructured{u}, time.Minute)
}

// getOnly turns Apply into a wait: its applies do nothing.
type getOnly struct{ client.Client }

func (getOnly) Apply(context.Context, runtime.ApplyConfiguration, ...client.ApplyOption) error {
	return nil
}
