package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Helm chart (charts/picomq, issue 32) on the stack: installed as a
// second operator in namespace picomq-helm watching helm-apps only (the
// stack's own operator, deployed from config/default, is scaled to zero
// meanwhile, so that one operator reconciles each cluster), upgraded to a
// release whose operator's CRD has a new field, and uninstalled.

const (
	helmRelease = "picomq-helm"
	helmNS      = "picomq-helm"
	helmAppsNS  = "helm-apps"
	helmCluster = "charted"
	// helmNewField is the StreamCluster spec field the upgraded operator's
	// CRD gains.
	helmNewField = "helmE2ENote"
)

// helmBin is $PICOMQ_HELM (make test sets it), else hack/helm.sh's
// binary (built once per machine); the test fails without one under CI.
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PICOMQ_HELM"); p != "" {
		return p
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(filepath.Join(env.opts.Checkout, "hack", "helm.sh"))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("hack/helm.sh: %v\n%s", err, errb.String())
		}
		t.Skipf("no helm: hack/helm.sh: %v", err)
	}
	return strings.TrimSpace(out.String())
}

func mustHelm(t *testing.T, h string, args ...string) string {
	t.Helper()
	cmd := exec.Command(h, append(args, "--kubeconfig", env.state.Kubeconfig)...)
	cmd.Dir = env.opts.Checkout
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestHelmInstallUpgradeUninstall: helm install runs the operator, which
// makes a StreamCluster Ready; helm upgrade to an operator whose CRD has a
// new field serves that field (Helm itself never upgrades CRDs: the
// operator applies its own at start); helm uninstall leaves the CRDs, the
// StreamCluster and its volumes.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	h := helmBin(t)
	start := time.Now()
	step := func(what string) { t.Logf("%s (%s)", what, time.Since(start).Round(100*time.Millisecond)) }

	// One operator at a time: the stack's comes back at the end, and
	// applies the CRDs of this checkout again as it starts.
	mustKubectl(t, "", "-n", "picomq-system", "scale", "deployment/picomq-controller-manager", "--replicas=0")
	t.Cleanup(func() {
		_, _ = kubectl(t, "", "-n", "picomq-system", "scale", "deployment/picomq-controller-manager", "--replicas=1")
		if out, err := kubectl(t, "", "-n", "picomq-system", "wait", "--for=condition=Available", "--timeout=3m", "deployment/picomq-controller-manager"); err != nil {
			t.Errorf("the stack's operator did not come back: %v\n%s", err, out)
		}
		_, _ = kubectl(t, "", "delete", "namespace", helmAppsNS, helmNS, "--wait=false")
	})
	for deadline := time.Now().Add(2 * time.Minute); ; {
		pods, err := env.k.CoreV1().Pods("picomq-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stack's operator pod is still there (%v)", err)
		}
		time.Sleep(time.Second)
	}

	chart := filepath.Join(env.opts.Checkout, "charts", "picomq")
	set := []string{"--namespace", helmNS, "--set", "watchNamespaces={" + helmAppsNS + "}", "--set", "logLevel=debug"}
	mustHelm(t, h, append([]string{"install", helmRelease, chart, "--create-namespace"}, set...)...)
	t.Cleanup(func() {
		// When the test stopped before its uninstall.
		cmd := exec.Command(h, "uninstall", helmRelease, "--namespace", helmNS, "--ignore-not-found", "--kubeconfig", env.state.Kubeconfig)
		_ = cmd.Run()
	})
	deploy := "deployment/" + helmRelease + "-controller-manager"
	mustKubectl(t, "", "-n", helmNS, "wait", "--for=condition=Available", "--timeout=3m", deploy)
	step("helm install: operator available")

	mustKubectl(t, `apiVersion: v1
kind: Namespace
metadata: {name: `+helmAppsNS+`}
---
apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata: {name: `+helmCluster+`, namespace: `+helmAppsNS+`}
spec:
  replicas: 1
  storage: {size: 1Gi}
`, "apply", "-f", "-")
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=5m", "-n", helmAppsNS, "streamcluster/"+helmCluster)
	step("StreamCluster Ready under the chart's operator")

	// The next release: its operator (the image's tag maps to a binary of
	// the stack's image folder, /manager-next: this checkout built with a
	// StreamCluster CRD that has spec.helmE2ENote) and its chart's crds/
	// (which helm upgrade ignores).
	crdFile := filepath.Join("config", "crd", "bases", "streams.picomq.io_streamclusters.yaml")
	raw, err := os.ReadFile(filepath.Join(env.opts.Checkout, crdFile))
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "              paused:\n"
	if !bytes.Contains(raw, []byte(anchor)) {
		t.Fatalf("%s: no spec.paused to add a field beside", crdFile)
	}
	next := bytes.Replace(raw, []byte(anchor), []byte("              "+helmNewField+":\n                description: A field the next release adds (e2e).\n                type: string\n"+anchor), 1)
	tmp := t.TempDir()
	nextCRD := filepath.Join(tmp, "streamclusters.yaml")
	if err := os.WriteFile(nextCRD, next, 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(env.opts.Checkout, crdFile): nextCRD}})
	if err := os.WriteFile(filepath.Join(tmp, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	nextBin := filepath.Join(env.opts.StateDir, "bin", "manager-next")
	build := exec.Command("go", "build", "-overlay", filepath.Join(tmp, "overlay.json"), "-o", nextBin, "./cmd/manager")
	build.Dir = env.opts.Checkout
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the next operator: %v\n%s", err, out)
	}
	t.Cleanup(func() { os.Remove(nextBin) })
	nextChart := filepath.Join(tmp, "picomq")
	if out, err := exec.Command("cp", "-r", chart, nextChart).CombinedOutput(); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(nextChart, "crds", filepath.Base(crdFile)), next, 0o644); err != nil {
		t.Fatal(err)
	}
	rewrite(t, filepath.Join(nextChart, "Chart.yaml"), "version: 0.1.0", "version: 0.1.1")
	rewrite(t, filepath.Join(nextChart, "templates", "deployment.yaml"), `command: ["/manager"]`, `command: ["/manager-next"]`)
	step("next release built")

	if got := mustKubectl(t, "", "get", "crd", "streamclusters.streams.picomq.io", "-o",
		"jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties."+helmNewField+".type}"); got != "" {
		t.Fatalf("spec.%s is served before the upgrade (%q): the test proves nothing", helmNewField, got)
	}
	mustHelm(t, h, append([]string{"upgrade", helmRelease, nextChart}, set...)...)
	mustKubectl(t, "", "-n", helmNS, "rollout", "status", deploy, "--timeout=3m")
	step("helm upgrade: operator rolled")
	var schema string
	for deadline := time.Now().Add(time.Minute); ; {
		schema = mustKubectl(t, "", "get", "crd", "streamclusters.streams.picomq.io", "-o",
			"jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties."+helmNewField+".type}")
		if schema == "string" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if schema != "string" {
		t.Fatalf("after helm upgrade the CRD has no spec.%s (type %q)", helmNewField, schema)
	}
	mustKubectl(t, "", "-n", helmAppsNS, "patch", "streamcluster", helmCluster, "--type=merge", "-p", `{"spec":{"`+helmNewField+`":"kept"}}`)
	if got := mustKubectl(t, "", "-n", helmAppsNS, "get", "streamcluster", helmCluster, "-o", "jsonpath={.spec."+helmNewField+"}"); got != "kept" {
		t.Fatalf("spec.%s read back as %q: not served", helmNewField, got)
	}
	managers := mustKubectl(t, "", "get", "crd", "streamclusters.streams.picomq.io", "-o", "jsonpath={.metadata.managedFields[*].manager}")
	if !strings.Contains(managers, "picomq-operator") {
		t.Errorf("the CRD's field managers %q lack picomq-operator", managers)
	}
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=3m", "-n", helmAppsNS, "streamcluster/"+helmCluster)
	step("new field served; cluster Ready under the upgraded operator")

	mustHelm(t, h, "uninstall", helmRelease, "--namespace", helmNS, "--wait", "--timeout=3m")
	if out, err := kubectl(t, "", "-n", helmNS, "get", deploy); err == nil {
		t.Errorf("the operator outlived helm uninstall:\n%s", out)
	}
	for _, crd := range []string{"streamclusters", "streams", "streamaccesses"} {
		mustKubectl(t, "", "get", "crd", crd+".streams.picomq.io")
	}
	mustKubectl(t, "", "-n", helmAppsNS, "get", "streamcluster", helmCluster)
	pvc := mustKubectl(t, "", "-n", helmAppsNS, "get", "pvc", "data-"+helmCluster+"-0", "-o", "jsonpath={.status.phase}")
	if pvc != "Bound" {
		t.Errorf("the broker's PVC is %q after helm uninstall, want Bound", pvc)
	}
	step("helm uninstall: CRDs, StreamCluster and PVC kept")
}

func rewrite(t *testing.T, path, old, new string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(raw, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
