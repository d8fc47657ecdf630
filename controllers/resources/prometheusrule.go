package resources

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/config/prometheus/rules"
)

// PrometheusRuleGVK is the prometheus-operator's PrometheusRule, built
// unstructured and only when its CRD is installed, as the ServiceMonitor.
var PrometheusRuleGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}

// PrometheusRuleName is the name of a cluster's PrometheusRule.
func PrometheusRuleName(c *streamsv1alpha1.StreamCluster) string { return c.Name }

// scopedSelector matches a metric selector of the broker rules: a
// picomq_* metric, or up and process_start_time_seconds (a broker's
// target's), with its label matchers if any.
var scopedSelector = regexp.MustCompile(`\b(picomq_[a-zA-Z0-9_]+|up|process_start_time_seconds)\b(\{[^}]*\})?`)

// ScopeExpr adds namespace and job matchers to every metric selector of a
// broker rule's expression, so that a cluster's PrometheusRule looks at
// its own brokers only: the targets of its ServiceMonitor, whose job is
// the peers Service's name.
func ScopeExpr(expr, namespace, job string) string {
	matchers := "namespace=" + strconv.Quote(namespace) + ",job=" + strconv.Quote(job)
	var b strings.Builder
	last := 0
	for _, m := range scopedSelector.FindAllStringSubmatchIndex(expr, -1) {
		end := m[1]
		if m[4] < 0 && end < len(expr) && expr[end] == '(' {
			continue // a function of that name, not a metric
		}
		b.WriteString(expr[last:m[0]])
		b.WriteString(expr[m[2]:m[3]])
		b.WriteString("{" + matchers)
		if m[4] >= 0 {
			if inner := strings.TrimSpace(expr[m[4]+1 : m[5]-1]); inner != "" {
				b.WriteString("," + inner)
			}
		}
		b.WriteString("}")
		last = end
	}
	b.WriteString(expr[last:])
	return b.String()
}

// PrometheusRule renders PicoMQ's broker alerts (config/prometheus/rules,
// group picomq.brokers) for one cluster: every expression scoped to the
// cluster's namespace and the job its ServiceMonitor gives its brokers
// (the headless Service's name), every alert labelled with the cluster's
// name. The operator's own alerts are not in it (the operator is not a
// cluster's): config/prometheus/prometheusrule.yaml has them.
func PrometheusRule(c *streamsv1alpha1.StreamCluster) (*unstructured.Unstructured, error) {
	var file struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := yaml.Unmarshal(rules.YAML, &file); err != nil {
		return nil, fmt.Errorf("the embedded alert rules: %w", err)
	}
	job := HeadlessServiceName(c)
	var groups []any
	for _, g := range file.Groups {
		if g["name"] != rules.BrokerGroup {
			continue
		}
		rs, _ := g["rules"].([]any)
		for _, r := range rs {
			rule, ok := r.(map[string]any)
			if !ok {
				continue
			}
			if e, ok := rule["expr"].(string); ok {
				rule["expr"] = ScopeExpr(e, c.Namespace, job)
			}
			labels, _ := rule["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
			}
			labels["streamcluster"] = c.Name
			rule["labels"] = labels
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("the embedded alert rules have no group %s", rules.BrokerGroup)
	}
	labels := map[string]any{}
	for k, v := range Labels(c) {
		labels[k] = v
	}
	owner := OwnerReference(c)
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":      PrometheusRuleName(c),
			"namespace": c.Namespace,
			"labels":    labels,
			"ownerReferences": []any{map[string]any{
				"apiVersion":         owner.APIVersion,
				"kind":               owner.Kind,
				"name":               owner.Name,
				"uid":                string(owner.UID),
				"controller":         true,
				"blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{"groups": groups},
	}}
	u.SetGroupVersionKind(PrometheusRuleGVK)
	return u, nil
}
