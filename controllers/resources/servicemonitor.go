package resources

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// ServiceMonitorGVK is the prometheus-operator's ServiceMonitor. The
// operator does not link the prometheus-operator's types: it builds the
// object unstructured, and only when the CRD is installed.
var ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

// ServiceMonitor makes Prometheus scrape every broker's /metrics through
// the headless Service (not-ready brokers included: their metrics say why),
// over HTTPS when spec.tls is set, and with the operator's metrics token
// when spec.auth.metrics is Token.
func ServiceMonitor(c *streamsv1alpha1.StreamCluster) *unstructured.Unstructured {
	sel := map[string]any{}
	for k, v := range SelectorLabels(c) {
		sel[k] = v
	}
	sel[LabelServiceRole] = ServiceRolePeers
	labels := map[string]any{}
	for k, v := range Labels(c) {
		labels[k] = v
	}
	endpoint := map[string]any{
		"port":   ClientPortName,
		"path":   "/metrics",
		"scheme": Scheme(c),
	}
	if c.Spec.TLS != nil {
		// Prometheus dials the pods' addresses: it verifies the brokers'
		// certificate against the Secret's CA under the client Service's
		// name, which every broker's certificate covers.
		endpoint["tlsConfig"] = map[string]any{
			"ca":         map[string]any{"secret": map[string]any{"name": c.Spec.TLS.SecretName, "key": CAKey}},
			"serverName": ClientServiceName(c) + "." + c.Namespace + ".svc",
		}
	}
	if MetricsTokenProjected(c) {
		endpoint["bearerTokenSecret"] = map[string]any{"name": OperatorTokenSecretName(c), "key": MetricsBearerKey}
	}
	owner := OwnerReference(c)
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":      ServiceMonitorName(c),
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
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": sel},
			"namespaceSelector": map[string]any{"matchNames": []any{c.Namespace}},
			"endpoints":         []any{endpoint},
		},
	}}
	u.SetGroupVersionKind(ServiceMonitorGVK)
	return u
}
