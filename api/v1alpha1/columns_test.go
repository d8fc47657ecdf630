package v1alpha1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// printerColumns reads the generated CRD of plural and returns its printer
// columns by name (a unit test: no apiserver).
func printerColumns(t *testing.T, plural string) []apiextensionsv1.CustomResourceColumnDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "streams.picomq.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].AdditionalPrinterColumns
}

// kubectl get prints NAME (metadata.name) first on its own: a column of
// that name prints a second NAME header.
func TestPrinterColumnsHaveDistinctHeaders(t *testing.T) {
	t.Parallel()
	for _, plural := range []string{"streamclusters", "streams", "streamaccesses"} {
		seen := map[string]bool{"NAME": true}
		for _, c := range printerColumns(t, plural) {
			h := strings.ToUpper(c.Name)
			if seen[h] {
				t.Errorf("%s: two %s columns", plural, h)
			}
			seen[h] = true
		}
	}
}

// A held scale-down shows spec.replicas below the brokers that run: the
// columns say which number is which.
func TestStreamClusterColumnsTellDesiredFromRunning(t *testing.T) {
	t.Parallel()
	paths := map[string]string{}
	for _, c := range printerColumns(t, "streamclusters") {
		paths[c.Name] = c.JSONPath
	}
	for name, path := range map[string]string{
		"Desired":       ".spec.replicas",
		"Brokers":       ".status.replicas",
		"Ready Brokers": ".status.readyReplicas",
	} {
		if paths[name] != path {
			t.Errorf("column %q = %q, want %s (columns %v)", name, paths[name], path, paths)
		}
	}
}

// -o wide shows who leads the metadata log and how many objects lack
// copies: what a person looks at first in a failover.
func TestStreamClusterWideColumnsShowTheCluster(t *testing.T) {
	t.Parallel()
	cols := map[string]apiextensionsv1.CustomResourceColumnDefinition{}
	for _, c := range printerColumns(t, "streamclusters") {
		cols[c.Name] = c
	}
	for name, path := range map[string]string{
		"Leader":           ".status.metadataLeader",
		"Under-Replicated": ".status.underReplicated",
	} {
		if c := cols[name]; c.JSONPath != path || c.Priority != 1 {
			t.Errorf("column %q = %q priority %d, want %s in -o wide", name, c.JSONPath, c.Priority, path)
		}
	}
}

// kubectl get streamaccess: the cluster, the scopes, the prefixes, Ready.
func TestStreamAccessColumns(t *testing.T) {
	t.Parallel()
	paths := map[string]string{}
	for _, c := range printerColumns(t, "streamaccesses") {
		paths[c.Name] = c.JSONPath
	}
	for name, path := range map[string]string{
		"Cluster":  ".spec.clusterRef.name",
		"Scopes":   ".spec.scopes",
		"Prefixes": ".spec.prefixes",
		"Ready":    `.status.conditions[?(@.type=="Ready")].status`,
	} {
		if paths[name] != path {
			t.Errorf("column %q = %q, want %s (columns %v)", name, paths[name], path, paths)
		}
	}
}
