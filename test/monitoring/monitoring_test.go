// Package monitoring tests what operators of a PicoMQ cluster watch it
// with: the alert rules (config/prometheus/rules, checked and unit-tested
// by a real promtool, hack/prometheus.sh), their runbooks
// (docs/runbooks.md), the PrometheusRule that carries the same rules, the
// Grafana dashboards (config/grafana/dashboards), and that every metric a
// rule or a dashboard names is one the broker or the operator exports.
package monitoring

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/test/clusterharness"
)

func TestMain(m *testing.M) {
	flag.Parse()
	clusterharness.Main(m)
}

// root is the repository's top folder.
const root = "../.."

var (
	rulesFile     = filepath.Join(root, "config/prometheus/rules/picomq.rules.yaml")
	rulesTestFile = filepath.Join(root, "config/prometheus/rules/picomq.rules.test.yaml")
	ruleCRFile    = filepath.Join(root, "config/prometheus/prometheusrule.yaml")
	runbooksFile  = filepath.Join(root, "docs/runbooks.md")
	dashboardsDir = filepath.Join(root, "config/grafana/dashboards")
)

var promTools struct {
	once sync.Once
	dir  string
	err  error
}

// prometheusDir returns the folder of prometheus and promtool
// (hack/prometheus.sh: built once per machine). It skips under -short, and
// when they cannot be had, unless CI=true, where it fails.
func prometheusDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped under -short: needs prometheus and promtool (hack/prometheus.sh builds them); go test without -short runs it")
	}
	promTools.once.Do(func() {
		cmd := exec.Command(filepath.Join(root, "hack/prometheus.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		promTools.dir, promTools.err = strings.TrimSpace(string(out)), err
	})
	if promTools.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("hack/prometheus.sh could not provide prometheus and promtool: %v", promTools.err)
		}
		t.Skipf("hack/prometheus.sh could not provide prometheus and promtool: %v", promTools.err)
	}
	return promTools.dir
}

func promtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(prometheusDir(t), "promtool"), args...)
	out, err := cmd.CombinedOutput()
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("promtool %s: %v", strings.Join(args, " "), err)
	}
}

// TestAlertRulesPromtool runs promtool check rules and promtool test rules
// (every alert firing on its failure and silent without).
func TestAlertRulesPromtool(t *testing.T) {
	promtool(t, "check", "rules", rulesFile)
	promtool(t, "test", "rules", rulesTestFile)
}

// TestOperatorPrometheusRulePromtool: the PrometheusRule the operator
// renders for a StreamCluster (spec.monitoring.prometheusRule: the broker
// alerts with every selector scoped to the cluster) is a rule file
// promtool accepts.
func TestOperatorPrometheusRulePromtool(t *testing.T) {
	c := &streamsv1alpha1.StreamCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "shop", UID: "u"}}
	pr, err := resources.PrometheusRule(c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(pr.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "demo.rules.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", f)
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, rulesFile, &f)
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alert", rulesFile)
	}
	return out
}

// TestEveryAlertHasARunbookAndTests: a severity, a summary, a runbook_url
// whose anchor is a heading of docs/runbooks.md, and unit tests where it
// fires and where it does not.
func TestEveryAlertHasARunbookAndTests(t *testing.T) {
	md, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(line, "#") {
			h := strings.TrimSpace(strings.TrimLeft(line, "#"))
			anchors[githubAnchor(h)] = true
		}
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, rulesTestFile, &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	const base = "https://github.com/picomq/picomq/blob/main/docs/runbooks.md#"
	for _, r := range alertRules(t) {
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: no summary or description", r.Alert)
		}
		u := r.Annotations["runbook_url"]
		if !strings.HasPrefix(u, base) || !anchors[strings.TrimPrefix(u, base)] {
			t.Errorf("%s: runbook_url %q is not a heading of docs/runbooks.md", r.Alert, u)
		}
		if !fires[r.Alert] || !silent[r.Alert] {
			t.Errorf("%s: %s needs a test where it fires and one where it does not", r.Alert, rulesTestFile)
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestPrometheusRuleMatchesRulesFile: the PrometheusRule the kustomization
// applies carries exactly the rule file's groups. PICOMQ_UPDATE=1 rewrites
// it from the rule file.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	var src, cr map[string]any
	readYAML(t, rulesFile, &src)
	if os.Getenv("PICOMQ_UPDATE") == "1" {
		writePrometheusRule(t, src["groups"])
	}
	readYAML(t, ruleCRFile, &cr)
	spec, _ := cr["spec"].(map[string]any)
	if cr["kind"] != "PrometheusRule" || spec == nil {
		t.Fatalf("%s is not a PrometheusRule with a spec", ruleCRFile)
	}
	if !reflect.DeepEqual(spec["groups"], src["groups"]) {
		t.Fatalf("%s's groups differ from %s: run PICOMQ_UPDATE=1 go test -run TestPrometheusRuleMatchesRulesFile ./test/monitoring", ruleCRFile, rulesFile)
	}
}

func writePrometheusRule(t *testing.T, groups any) {
	t.Helper()
	body, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("# Generated from rules/picomq.rules.yaml (PICOMQ_UPDATE=1 go test -run\n")
	b.WriteString("# TestPrometheusRuleMatchesRulesFile ./test/monitoring): edit that file.\n")
	b.WriteString("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: picomq\n  namespace: system\n  labels:\n    app.kubernetes.io/name: picomq\nspec:\n")
	for _, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		b.WriteString("  " + line + "\n")
	}
	if err := os.WriteFile(ruleCRFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func dashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no dashboard in %s", dashboardsDir)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

func walkPanels(ps []panel, f func(panel)) {
	for _, p := range ps {
		f(p)
		walkPanels(p.Panels, f)
	}
}

// TestDashboardsParse: each dashboard is JSON with a title and a uid, has
// a ConfigMap in config/grafana's kustomization, and every panel that is
// not a row has a query.
func TestDashboardsParse(t *testing.T) {
	var k struct {
		ConfigMapGenerator []struct {
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	readYAML(t, filepath.Join(dashboardsDir, "..", "kustomization.yaml"), &k)
	inKustomization := map[string]bool{}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			inKustomization[filepath.Base(f)] = true
		}
	}
	uids := map[string]string{}
	for name, d := range dashboards(t) {
		if !inKustomization[name] {
			t.Errorf("%s has no ConfigMap in config/grafana/kustomization.yaml", name)
		}
		if d.Title == "" || d.UID == "" {
			t.Errorf("%s: no title or uid", name)
		}
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s share the uid %q", name, other, d.UID)
		}
		uids[d.UID] = name
		n := 0
		walkPanels(d.Panels, func(p panel) {
			if p.Type == "row" || p.Type == "text" {
				return
			}
			n++
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", name, p.Title)
			}
			for _, q := range p.Targets {
				if strings.TrimSpace(q.Expr) == "" {
					t.Errorf("%s: panel %q has an empty query", name, p.Title)
				}
			}
		})
		t.Logf("%s: %q, %d panels", name, d.Title, n)
	}
}

// metricName matches the metric names the rules and dashboards may use:
// the broker's, controller-runtime's and the client library's process
// and Go metrics. (Label names never start so; `up` is Prometheus's own.)
var metricName = regexp.MustCompile(`\b(picomq_[a-z0-9_]+|controller_runtime_[a-z0-9_]+|workqueue_[a-z0-9_]+|process_[a-z0-9_]+|go_[a-z0-9_]+)\b`)

// usedMetrics maps each metric name a rule's expression or a dashboard's
// query names to where.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(where, expr string) {
		for _, m := range metricName.FindAllString(expr, -1) {
			used[m] = append(used[m], where)
		}
	}
	for _, r := range alertRules(t) {
		add("alert "+r.Alert, r.Expr)
	}
	for name, d := range dashboards(t) {
		walkPanels(d.Panels, func(p panel) {
			for _, q := range p.Targets {
				add(fmt.Sprintf("%s panel %q", name, p.Title), q.Expr)
			}
		})
	}
	return used
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
