package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
)

// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=get;list;watch;create;update;patch;delete

// reconcilePrometheusRule applies the cluster's PrometheusRule (PicoMQ's
// broker alerts scoped to its brokers) when spec.monitoring.prometheusRule
// asks for it and the prometheus-operator's CRD is installed, and removes
// it when it no longer does: as reconcileServiceMonitor does the
// ServiceMonitor. A missing CRD is reported once per spec generation, not
// an error.
func (r *StreamClusterReconciler) reconcilePrometheusRule(ctx context.Context, c *streamsv1alpha1.StreamCluster, o *clusterObservation) error {
	return r.reconcileOptionalChild(ctx, c, o, optionalChild{
		kind: "PrometheusRule", field: "spec.monitoring.prometheusRule", want: c.Spec.Monitoring.PrometheusRule,
		gvk: resources.PrometheusRuleGVK, name: resources.PrometheusRuleName(c),
		build: func() (*unstructured.Unstructured, error) { return resources.PrometheusRule(c) },
	})
}
