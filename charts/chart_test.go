package charts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const chart = "picomq"

// The values matrix: each case's values file and what it must render.
var cases = []struct {
	name   string
	values string
	check  func(t *testing.T, objs map[string]*unstructured.Unstructured)
}{
	{"defaults", "", func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		kinds := kindsOf(objs)
		want := []string{"ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"}
		if !slices.Equal(kinds, want) {
			t.Errorf("kinds %v, want %v", kinds, want)
		}
		args := managerArgs(t, objs)
		if !slices.Contains(args, "--leader-elect") || slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "--namespaces") || strings.HasPrefix(a, "--manage-crds")
		}) {
			t.Errorf("default args %v", args)
		}
	}},
	{"namespaces", "watchNamespaces: [team-a, team-b]\nlogLevel: debug\n", func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		args := managerArgs(t, objs)
		for _, want := range []string{"--namespaces=team-a,team-b", "--zap-log-level=debug"} {
			if !slices.Contains(args, want) {
				t.Errorf("args %v lack %s", args, want)
			}
		}
	}},
	{"sample-cluster", "sampleCluster:\n  enabled: true\n  name: events\n", func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		sc := objs["StreamCluster/picomq-system/events"]
		if sc == nil {
			t.Fatalf("no StreamCluster events in %v", keys(objs))
		}
		if sc.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("the sample cluster is not kept by helm uninstall: %v", sc.GetAnnotations())
		}
		if n, _, _ := unstructured.NestedFieldNoCopy(sc.Object, "spec", "replicas"); fmt.Sprint(n) != "3" {
			t.Errorf("replicas %v", n)
		}
	}},
	{"service-monitor", "metrics:\n  serviceMonitor:\n    enabled: true\n    interval: 30s\n    labels: {release: prom}\n", func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		sm := objs["ServiceMonitor/picomq-system/picomq-controller-manager-metrics"]
		svc := objs["Service/picomq-system/picomq-controller-manager-metrics"]
		if sm == nil || svc == nil {
			t.Fatalf("no ServiceMonitor or Service in %v", keys(objs))
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		for k, v := range sel {
			if svc.GetLabels()[k] != v {
				t.Errorf("the ServiceMonitor selects %s=%s; the Service has %v", k, v, svc.GetLabels())
			}
		}
		if sm.GetLabels()["release"] != "prom" {
			t.Errorf("ServiceMonitor labels %v", sm.GetLabels())
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "30s" {
			t.Errorf("endpoints %v", eps)
		}
	}},
	{"monitoring", "prometheusRule:\n  enabled: true\n  labels: {release: prom}\ndashboards:\n  enabled: true\n  namespace: monitoring\n", func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		pr := objs["PrometheusRule/picomq-system/picomq"]
		if pr == nil {
			t.Fatalf("no PrometheusRule in %v", keys(objs))
		}
		if pr.GetLabels()["release"] != "prom" {
			t.Errorf("PrometheusRule labels %v", pr.GetLabels())
		}
		// The same groups as the rules file promtool tests.
		raw, err := os.ReadFile(filepath.Join("..", "config", "prometheus", "rules", "picomq.rules.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var file map[string]any
		if err := utilyaml.Unmarshal(raw, &file); err != nil {
			t.Fatal(err)
		}
		groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
		if len(groups) == 0 || !reflect.DeepEqual(any(groups), file["groups"]) {
			t.Errorf("the PrometheusRule's groups differ from the rules file's")
		}
		dashboards, _ := filepath.Glob(filepath.Join("..", "config", "grafana", "dashboards", "*.json"))
		if len(dashboards) == 0 {
			t.Fatal("no dashboard in config/grafana/dashboards")
		}
		for _, d := range dashboards {
			base := filepath.Base(d)
			cm := objs["ConfigMap/monitoring/picomq-dashboard-"+strings.TrimPrefix(strings.TrimSuffix(base, ".json"), "picomq-")]
			if cm == nil {
				t.Fatalf("no ConfigMap for %s in %v", base, keys(objs))
			}
			if cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("%s: labels %v", cm.GetName(), cm.GetLabels())
			}
			data, _, _ := unstructured.NestedString(cm.Object, "data", base)
			want, _ := os.ReadFile(d)
			if !json.Valid([]byte(data)) || strings.TrimSpace(data) != strings.TrimSpace(string(want)) {
				t.Errorf("%s: its %s is not the dashboard's JSON", cm.GetName(), base)
			}
		}
	}},
	{"custom", `image: {repository: reg.example/picomq, tag: "1.2.3", pullPolicy: Always}
brokerImage: reg.example/broker:9
resources: {requests: {cpu: 1, memory: 1Gi}, limits: {memory: 2Gi}}
tolerations: [{key: dedicated, operator: Equal, value: streams, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [ops]}]}]}}}
nodeSelector: {kubernetes.io/os: linux}
leaderElection: {enabled: false}
manageCRDs: false
replicaCount: 1
`, func(t *testing.T, objs map[string]*unstructured.Unstructured) {
		d := objs["Deployment/picomq-system/picomq-controller-manager"]
		c := container(t, d)
		if c["image"] != "reg.example/picomq:1.2.3" || c["imagePullPolicy"] != "Always" {
			t.Errorf("image %v %v", c["image"], c["imagePullPolicy"])
		}
		if env := c["env"].([]any)[0].(map[string]any); env["value"] != "reg.example/broker:9" {
			t.Errorf("broker image %v", env)
		}
		if mem, _, _ := unstructured.NestedString(c, "resources", "limits", "memory"); mem != "2Gi" {
			t.Errorf("resources %v", c["resources"])
		}
		spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
		if tol := spec["tolerations"].([]any); len(tol) != 1 || tol[0].(map[string]any)["value"] != "streams" {
			t.Errorf("tolerations %v", spec["tolerations"])
		}
		if _, ok, _ := unstructured.NestedMap(spec, "affinity", "nodeAffinity"); !ok {
			t.Errorf("affinity %v", spec["affinity"])
		}
		if spec["nodeSelector"].(map[string]any)["kubernetes.io/os"] != "linux" {
			t.Errorf("nodeSelector %v", spec["nodeSelector"])
		}
		args := managerArgs(t, objs)
		if slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--manage-crds=false") {
			t.Errorf("args %v", args)
		}
		if objs["Role/picomq-system/picomq-leader-election-role"] != nil {
			t.Error("a leader election Role without leader election")
		}
		rules, _, _ := unstructured.NestedSlice(objs["ClusterRole//picomq-manager-role"].Object, "rules")
		for _, r := range rules {
			if _, named := r.(map[string]any)["resourceNames"]; named {
				t.Errorf("manageCRDs false, yet the ClusterRole may write CRDs: %v", r)
			}
		}
	}},
}

// helm is the helm binary: $PICOMQ_HELM, else hack/helm.sh's (built once
// per machine). It skips under -short, and when helm cannot be had unless
// CI is set.
func helm(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("helm: skipped under -short (it builds helm once per machine)")
	}
	helmOnce.Do(func() {
		if p := os.Getenv("PICOMQ_HELM"); p != "" {
			helmPath = p
			return
		}
		var out, errb bytes.Buffer
		cmd := exec.Command(filepath.Join("..", "hack", "helm.sh"))
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			helmErr = errors.New("hack/helm.sh: " + err.Error() + ": " + errb.String())
			return
		}
		helmPath = strings.TrimSpace(out.String())
	})
	if helmErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(helmErr)
		}
		t.Skip(helmErr)
	}
	return helmPath
}

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func valuesFile(t *testing.T, values string) []string {
	t.Helper()
	if values == "" {
		return nil
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"-f", f}
}

func TestLintAndTemplate(t *testing.T) {
	h := helm(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vf := valuesFile(t, c.values)
			run(t, h, append([]string{"lint", "--strict", chart}, vf...)...)
			out := run(t, h, append([]string{"template", "picomq", chart, "--namespace", "picomq-system"}, vf...)...)
			objs := decode(t, out)
			for k, o := range objs {
				// Dashboards may go to the namespace Grafana's sidecar
				// watches (dashboards.namespace); nothing else leaves.
				if ns := o.GetNamespace(); ns != "" && ns != "picomq-system" && o.GetLabels()["app.kubernetes.io/component"] != "dashboards" {
					t.Errorf("%s outside the release's namespace", k)
				}
			}
			c.check(t, objs)
		})
	}
}

// TestCopiesAreCurrent: the chart's crds/, files/manager-role.yaml, its
// alert rules and dashboards are what `make manifests` copies from
// config/.
func TestCopiesAreCurrent(t *testing.T) {
	bases, _ := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "*.yaml"))
	copies, _ := filepath.Glob(filepath.Join(chart, "crds", "*.yaml"))
	if len(bases) == 0 || len(bases) != len(copies) {
		t.Errorf("config/crd/bases has %d CRDs, the chart's crds/ %d: run make manifests", len(bases), len(copies))
	}
	pairs := [][2]string{
		{filepath.Join("..", "config", "rbac", "role.yaml"), filepath.Join(chart, "files", "manager-role.yaml")},
		{filepath.Join("..", "config", "prometheus", "rules", "picomq.rules.yaml"), filepath.Join(chart, "files", "picomq.rules.yaml")},
	}
	dashboards, _ := filepath.Glob(filepath.Join("..", "config", "grafana", "dashboards", "*.json"))
	copied, _ := filepath.Glob(filepath.Join(chart, "files", "dashboards", "*.json"))
	if len(dashboards) != len(copied) {
		t.Errorf("config/grafana/dashboards has %d dashboards, the chart's files/dashboards %d: run make manifests", len(dashboards), len(copied))
	}
	for _, d := range dashboards {
		pairs = append(pairs, [2]string{d, filepath.Join(chart, "files", "dashboards", filepath.Base(d))})
	}
	for _, b := range bases {
		pairs = append(pairs, [2]string{b, filepath.Join(chart, "crds", filepath.Base(b))})
	}
	for _, p := range pairs {
		a, err1 := os.ReadFile(p[0])
		b, err2 := os.ReadFile(p[1])
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s (%v, %v): run make manifests", p[1], p[0], err1, err2)
		}
	}
}

// TestChartMatchesKustomize: the chart with its default values (release
// picomq in picomq-system) renders the objects config/default does, but
// for the Namespace (helm install --create-namespace makes it), Helm's own
// labels and the instance label on selectors, and the image's tag.
func TestChartMatchesKustomize(t *testing.T) {
	h := helm(t)
	fromChart := decode(t, run(t, h, "template", "picomq", chart, "--namespace", "picomq-system", "--include-crds"))
	kust := exec.Command("go", "tool", "-modfile="+filepath.Join("..", "hack", "tools", "go.mod"), "kustomize", "build", filepath.Join("..", "config", "default"))
	var kout, kerr bytes.Buffer
	kust.Stdout, kust.Stderr = &kout, &kerr
	if err := kust.Run(); err != nil {
		t.Fatalf("kustomize build config/default: %v\n%s", err, kerr.String())
	}
	fromKustomize := decode(t, kout.String())

	for k := range fromKustomize {
		if fromChart[k] == nil && !strings.HasPrefix(k, "Namespace/") {
			t.Errorf("config/default has %s; the chart does not", k)
		}
	}
	for k := range fromChart {
		if fromKustomize[k] == nil {
			t.Errorf("the chart has %s; config/default does not", k)
		}
	}
	for k, want := range fromKustomize {
		got := fromChart[k]
		if got == nil {
			continue
		}
		if want.GetKind() == "CustomResourceDefinition" {
			// The chart's crds/ are config/crd/bases as generated;
			// config/default labels them part-of.
			want = want.DeepCopy()
			want.SetLabels(nil)
		}
		helmLabels := []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/name"}
		for lk, lv := range want.GetLabels() {
			if got.GetLabels()[lk] != lv {
				t.Errorf("%s: label %s=%q in config/default, %q in the chart", k, lk, lv, got.GetLabels()[lk])
			}
		}
		for lk := range got.GetLabels() {
			if _, ok := want.GetLabels()[lk]; !ok && !slices.Contains(helmLabels, lk) {
				t.Errorf("%s: the chart's label %s is not config/default's", k, lk)
			}
		}
		w, g := normalise(want), normalise(got)
		if !reflect.DeepEqual(w, g) {
			t.Errorf("%s differs:\nconfig/default: %s\nchart:          %s", k, js(w), js(g))
		}
	}
}

// normalise keeps what makes an object work (no metadata but its key),
// without the instance label Helm's selectors add and the image's tag.
func normalise(o *unstructured.Unstructured) map[string]any {
	u := o.DeepCopy()
	delete(u.Object, "metadata")
	var strip func(v any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			delete(x, "app.kubernetes.io/instance")
			for k, e := range x {
				if k == "image" || k == "value" {
					if s, ok := e.(string); ok && strings.HasPrefix(s, "ghcr.io/picomq/picomq:") {
						x[k] = "ghcr.io/picomq/picomq:TAG"
					}
				}
				strip(e)
			}
		case []any:
			for _, e := range x {
				strip(e)
			}
		}
	}
	strip(u.Object)
	// A template's metadata: labels only (compared after the strip).
	return u.Object
}

func decode(t *testing.T, manifests string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		k := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		if objs[k] != nil {
			t.Errorf("%s twice", k)
		}
		objs[k] = u
	}
	return objs
}

func kindsOf(objs map[string]*unstructured.Unstructured) []string {
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	sort.Strings(kinds)
	return slices.Compact(kinds)
}

func keys(objs map[string]*unstructured.Unstructured) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func container(t *testing.T, d *unstructured.Unstructured) map[string]any {
	t.Helper()
	if d == nil {
		t.Fatal("no Deployment")
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("containers %v", cs)
	}
	return cs[0].(map[string]any)
}

func managerArgs(t *testing.T, objs map[string]*unstructured.Unstructured) []string {
	t.Helper()
	var args []string
	for _, a := range container(t, objs["Deployment/picomq-system/picomq-controller-manager"])["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

func js(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}
