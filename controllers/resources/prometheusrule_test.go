package resources

import (
	"reflect"
	"strings"
	"testing"
)

func TestScopeExpr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`picomq_storage_failed == 1`, `picomq_storage_failed{namespace="ns",job="demo-headless"} == 1`},
		{`max by (namespace, job) (picomq_raft_has_leader) == 0`,
			`max by (namespace, job) (picomq_raft_has_leader{namespace="ns",job="demo-headless"}) == 0`},
		{`picomq_raft_state{state="Leader"}`, `picomq_raft_state{namespace="ns",job="demo-headless",state="Leader"}`},
		{`picomq_raft_state{}`, `picomq_raft_state{namespace="ns",job="demo-headless"}`},
		{`up == 0 and on (namespace, job, instance) max_over_time(picomq_raft_has_leader[1h])`,
			`up{namespace="ns",job="demo-headless"} == 0 and on (namespace, job, instance) max_over_time(picomq_raft_has_leader{namespace="ns",job="demo-headless"}[1h])`},
		{`changes(process_start_time_seconds[15m]) >= 2`, `changes(process_start_time_seconds{namespace="ns",job="demo-headless"}[15m]) >= 2`},
		{`max_over_time((sum by (namespace, job) (picomq_slots_held))[6h:1m])`,
			`max_over_time((sum by (namespace, job) (picomq_slots_held{namespace="ns",job="demo-headless"}))[6h:1m])`},
		{`sum by (controller) (rate(controller_runtime_reconcile_errors_total[5m]))`,
			`sum by (controller) (rate(controller_runtime_reconcile_errors_total[5m]))`},
	} {
		if got := ScopeExpr(tc.in, "ns", "demo-headless"); got != tc.want {
			t.Errorf("ScopeExpr(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

func TestPrometheusRule(t *testing.T) {
	c := cluster()
	pr, err := PrometheusRule(c)
	if err != nil {
		t.Fatal(err)
	}
	if pr.GroupVersionKind() != PrometheusRuleGVK || pr.GetName() != PrometheusRuleName(c) || pr.GetNamespace() != c.Namespace {
		t.Fatalf("%v %s/%s", pr.GroupVersionKind(), pr.GetNamespace(), pr.GetName())
	}
	if refs := pr.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != c.Name || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references %v", refs)
	}
	groups := pr.Object["spec"].(map[string]any)["groups"].([]any)
	if len(groups) != 1 {
		t.Fatalf("%d groups, want the brokers' alone", len(groups))
	}
	n := 0
	for _, r := range groups[0].(map[string]any)["rules"].([]any) {
		rule := r.(map[string]any)
		n++
		expr := rule["expr"].(string)
		if !strings.Contains(expr, `namespace="`+c.Namespace+`",job="`+HeadlessServiceName(c)+`"`) {
			t.Errorf("%s: not scoped: %s", rule["alert"], expr)
		}
		if strings.Contains(expr, "controller_runtime") {
			t.Errorf("%s: an operator alert in a cluster's rule", rule["alert"])
		}
		if rule["labels"].(map[string]any)["streamcluster"] != c.Name {
			t.Errorf("%s: labels %v", rule["alert"], rule["labels"])
		}
	}
	if n < 10 {
		t.Errorf("%d alerts", n)
	}
	// Rendering again gives the same (the embedded file is not changed).
	again, _ := PrometheusRule(c)
	if !reflect.DeepEqual(again.Object, pr.Object) {
		t.Errorf("a second rendering differs from the first")
	}
}
