package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	want := c.Spec.Monitoring.PrometheusRule
	if !want && !o.firstLook {
		return nil // deletion is checked once per generation
	}
	gvk := resources.PrometheusRuleGVK
	if _, err := r.RESTMapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		if meta.IsNoMatchError(err) {
			if want && o.firstLook {
				o.deferred = append(o.deferred, func() {
					event(r.Recorder, c, eventWarning, "PrometheusRuleUnavailable", "Apply",
						"spec.monitoring.prometheusRule is true but the PrometheusRule CRD (monitoring.coreos.com/v1) is not installed: no PrometheusRule created")
				})
			}
			return nil
		}
		return err
	}
	if want {
		pr, err := resources.PrometheusRule(c)
		if err != nil {
			return err
		}
		outcome, err := applier{c: r.Client, reader: r.APIReader}.apply(ctx, pr)
		if err != nil {
			return err
		}
		r.childEvent(c, pr, outcome)
		return nil
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(gvk)
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.PrometheusRuleName(c)}, existing)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(existing, c) {
		return nil
	}
	if err := r.Client.Delete(ctx, existing); client.IgnoreNotFound(err) != nil {
		return err
	}
	eventAbout(r.Recorder, c, existing, eventNormal, "Deleted", "Apply", "deleted PrometheusRule %s (spec.monitoring.prometheusRule is false)", existing.GetName())
	return nil
}
