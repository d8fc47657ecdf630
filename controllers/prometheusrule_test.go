package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/internal/testwait"
)

// TestStreamClusterPrometheusRuleOnlyWhenTheCRDExists: with
// spec.monitoring.prometheusRule and no PrometheusRule CRD the cluster is
// not Degraded and an event says so; once the CRD is installed the next
// generation applies the cluster's PrometheusRule (its broker alerts scoped
// to its namespace and peers Service), owned by the cluster; turned off, it
// is deleted.
func TestStreamClusterPrometheusRuleOnlyWhenTheCRDExists(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Monitoring.PrometheusRule = true })
	waitSTS(t, ns, "demo", nil)
	c := waitObserved(t, ns, "demo")
	if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected); err != nil {
		t.Errorf("a missing PrometheusRule CRD degraded the cluster: %v", err)
	}
	h.expectEvents("demo", "PrometheusRuleUnavailable", eventWarning, 1)

	installPrometheusRuleCRD(t)
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Service.Annotations = map[string]string{"n": "1"} })
	pr := &unstructured.Unstructured{}
	pr.SetGroupVersionKind(resources.PrometheusRuleGVK)
	testwait.NoError(t, 20*time.Second, "the PrometheusRule applied", func() error {
		if err := get(t, ns, "demo", pr); err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(pr); ref == nil || ref.Name != "demo" {
			return fmt.Errorf("owner %v", ref)
		}
		return nil
	})
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if len(groups) != 1 {
		t.Fatalf("groups %v", groups)
	}
	rules, _, _ := unstructured.NestedSlice(groups[0].(map[string]any), "rules")
	scope := `namespace="` + ns + `",job="demo-headless"`
	for _, r := range rules {
		rule := r.(map[string]any)
		if !strings.Contains(rule["expr"].(string), scope) {
			t.Errorf("%s not scoped to %s: %s", rule["alert"], scope, rule["expr"])
		}
	}
	if len(rules) == 0 {
		t.Error("no rule")
	}

	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Monitoring.PrometheusRule = false })
	testwait.NoError(t, 10*time.Second, "the PrometheusRule deleted", func() error {
		if err := get(t, ns, "demo", pr); !apierrors.IsNotFound(err) {
			return fmt.Errorf("PrometheusRule still there (%v)", err)
		}
		return nil
	})
}

// installPrometheusRuleCRD installs a minimal monitoring.coreos.com/v1
// PrometheusRule CRD and waits until it is served.
func installPrometheusRuleCRD(t *testing.T) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheusrules.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "prometheusrules", Singular: "prometheusrule", Kind: "PrometheusRule", ListKind: "PrometheusRuleList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
					},
				}},
			}},
		},
	}
	if _, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}, MaxTime: 20 * time.Second, PollInterval: 100 * time.Millisecond,
	}); err != nil {
		t.Fatal(err)
	}
}
