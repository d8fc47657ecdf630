package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
)

// applyChildren builds every child of c and applies them, dependencies
// first (identity and configuration before the pods that use them). It
// returns the applied StatefulSet. A spec that cannot be built sets
// o.specErr and applies nothing.
func (r *StreamClusterReconciler) applyChildren(ctx context.Context, c *streamsv1alpha1.StreamCluster, o *clusterObservation) (*appsv1.StatefulSet, error) {
	cm, err := resources.ConfigMap(c)
	if err != nil {
		o.specErr = err
		return nil, nil
	}
	sts := resources.StatefulSet(c, resources.StatefulSetParams{
		Replicas:     o.plan.replicas,
		ConfigHash:   resources.ConfigHash(cm),
		DefaultImage: r.Options.BrokerImage,
	})
	if o.sts != nil {
		// A StatefulSet's claim template cannot change: keep the one it has
		// and say so, rather than have every apply refused.
		if msg := claimTemplateChange(o.sts, sts); msg != "" {
			o.storageChange = msg
			sts.Spec.VolumeClaimTemplates = keepClaimTemplates(o.sts)
		}
	}

	a := applier{c: r.Client, reader: r.Client}
	if c.Spec.Auth != nil {
		// The operator's token, before the pods that mount it.
		token, created, err := ensureOperatorToken(ctx, r.Client, r.APIReader, c)
		if err != nil {
			return nil, err
		}
		if created {
			event(r.Recorder, c, eventNormal, "OperatorTokenCreated", "Apply",
				"wrote the operator's admin token to Secret %s (mounted in the brokers' token directory)", resources.OperatorTokenSecretName(c))
		}
		o.creds.Token = token
	}
	children := []client.Object{
		resources.ServiceAccount(c),
		resources.Role(c),
		resources.RoleBinding(c),
		cm,
	}
	// The recorded cluster id, once status has one: its own ConfigMap, out
	// of the config hash, so that recording it rolls no broker.
	idm := resources.ClusterIDConfigMap(c)
	if idm != nil {
		children = append(children, idm)
	}
	children = append(children,
		resources.HeadlessService(c),
		resources.ClientService(c),
		resources.PodDisruptionBudget(c),
	)
	if np := resources.NetworkPolicy(c, r.Options.OperatorNamespace); np != nil {
		children = append(children, np)
	}
	children = append(children, sts)
	for _, child := range children {
		var oldHash, basedOn string
		if child == sts && o.sts != nil {
			oldHash = o.sts.Spec.Template.Annotations[resources.ConfigHashAnnotation]
			// The replica count was decided from this version: never lower
			// it on the strength of a stale read (a broker added meanwhile
			// would be removed without a drain).
			basedOn = o.sts.ResourceVersion
		}
		outcome, err := a.applyIfUnchanged(ctx, child, basedOn)
		if err != nil {
			return nil, err
		}
		r.childEvent(c, child, outcome)
		if child == sts && outcome == applyUpdated && oldHash != "" && oldHash != sts.Spec.Template.Annotations[resources.ConfigHashAnnotation] {
			eventAbout(r.Recorder, c, sts, eventNormal, "ConfigChanged", "RollBrokers",
				"broker configuration changed (ConfigMap %s): rolling the brokers", cm.Name)
		}
	}
	if idm != nil {
		o.renderedClusterID = idm.Data[resources.EnvClusterID]
	}
	if err := r.removeNetworkPolicy(ctx, c, o); err != nil {
		return sts, err
	}
	if err := r.reconcileServiceMonitor(ctx, c, o); err != nil {
		return sts, err
	}
	if err := r.reconcilePrometheusRule(ctx, c, o); err != nil {
		return sts, err
	}
	return sts, nil
}

// childEvent records what an apply did to a child, as an event about the
// cluster related to the child: one Event per child and action, never
// folded with another child's (see eventAbout).
func (r *StreamClusterReconciler) childEvent(c *streamsv1alpha1.StreamCluster, child client.Object, outcome applyOutcome) {
	kind := child.GetObjectKind().GroupVersionKind().Kind
	switch outcome {
	case applyCreated:
		eventAbout(r.Recorder, c, child, eventNormal, "Created", "Apply", "created %s %s", kind, child.GetName())
	case applyUpdated:
		eventAbout(r.Recorder, c, child, eventNormal, "Updated", "Apply", "updated %s %s", kind, child.GetName())
	}
}

// claimTemplateChange says how the built claim template differs from the
// StatefulSet's in what the user controls (size, class, access modes), or
// "" when it does not.
func claimTemplateChange(existing, built *appsv1.StatefulSet) string {
	if len(existing.Spec.VolumeClaimTemplates) == 0 || len(built.Spec.VolumeClaimTemplates) == 0 {
		return ""
	}
	have, want := existing.Spec.VolumeClaimTemplates[0].Spec, built.Spec.VolumeClaimTemplates[0].Spec
	hs, ws := have.Resources.Requests[corev1.ResourceStorage], want.Resources.Requests[corev1.ResourceStorage]
	switch {
	case hs.Cmp(ws) != 0:
		return fmt.Sprintf("storage size %s cannot change to %s: a StatefulSet's claim template is immutable; expand the PersistentVolumeClaims themselves if their StorageClass allows it", hs.String(), ws.String())
	case want.StorageClassName != nil && (have.StorageClassName == nil || *have.StorageClassName != *want.StorageClassName):
		return fmt.Sprintf("storage class cannot change to %q: a StatefulSet's claim template is immutable", *want.StorageClassName)
	case !equality.Semantic.DeepEqual(have.AccessModes, want.AccessModes):
		return fmt.Sprintf("access modes cannot change to %v: a StatefulSet's claim template is immutable", want.AccessModes)
	}
	return ""
}

// keepClaimTemplates copies a StatefulSet's claim templates for an apply.
func keepClaimTemplates(sts *appsv1.StatefulSet) []corev1.PersistentVolumeClaim {
	out := make([]corev1.PersistentVolumeClaim, len(sts.Spec.VolumeClaimTemplates))
	for i := range sts.Spec.VolumeClaimTemplates {
		sts.Spec.VolumeClaimTemplates[i].DeepCopyInto(&out[i])
		out[i].Status = corev1.PersistentVolumeClaimStatus{}
		out[i].APIVersion, out[i].Kind = "v1", "PersistentVolumeClaim"
	}
	return out
}

// reconcileServiceMonitor applies the ServiceMonitor when monitoring asks
// for one and the prometheus-operator's CRD is installed, and removes it
// when monitoring no longer asks for it. A missing CRD is reported once per
// spec generation, not an error.
func (r *StreamClusterReconciler) reconcileServiceMonitor(ctx context.Context, c *streamsv1alpha1.StreamCluster, o *clusterObservation) error {
	return r.reconcileOptionalChild(ctx, c, o, optionalChild{
		kind: "ServiceMonitor", field: "spec.monitoring.serviceMonitor", want: c.Spec.Monitoring.ServiceMonitor,
		gvk: resources.ServiceMonitorGVK, name: resources.ServiceMonitorName(c),
		build: func() (*unstructured.Unstructured, error) { return resources.ServiceMonitor(c), nil },
	})
}

// optionalChild is a child of another operator's kind (the
// prometheus-operator's) that a spec field turns on and off.
type optionalChild struct {
	kind, field string // "ServiceMonitor", "spec.monitoring.serviceMonitor"
	want        bool   // the field's value
	gvk         schema.GroupVersionKind
	name        string
	build       func() (*unstructured.Unstructured, error)
}

// reconcileOptionalChild applies ch when its field asks for it and its CRD
// is installed, and deletes the one the cluster controls when the field no
// longer asks (looked at once per generation). A missing CRD is reported
// once per spec generation, not an error.
func (r *StreamClusterReconciler) reconcileOptionalChild(ctx context.Context, c *streamsv1alpha1.StreamCluster, o *clusterObservation, ch optionalChild) error {
	if !ch.want && !o.firstLook {
		return nil // deletion is checked once per generation
	}
	if _, err := r.RESTMapper.RESTMapping(ch.gvk.GroupKind(), ch.gvk.Version); err != nil {
		if meta.IsNoMatchError(err) {
			if ch.want && o.firstLook {
				o.deferred = append(o.deferred, func() {
					event(r.Recorder, c, eventWarning, ch.kind+"Unavailable", "Apply",
						"%s is true but the %s CRD (%s) is not installed: no %s created", ch.field, ch.kind, ch.gvk.GroupVersion(), ch.kind)
				})
			}
			return nil
		}
		return err
	}
	if ch.want {
		obj, err := ch.build()
		if err != nil {
			return err
		}
		outcome, err := applier{c: r.Client, reader: r.APIReader}.apply(ctx, obj)
		if err != nil {
			return err
		}
		r.childEvent(c, obj, outcome)
		return nil
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(ch.gvk)
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ch.name}, existing)
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
	eventAbout(r.Recorder, c, existing, eventNormal, "Deleted", "Apply", "deleted %s %s (%s is false)", ch.kind, existing.GetName(), ch.field)
	return nil
}

// removeNetworkPolicy deletes the NetworkPolicy the operator made once
// spec.networkPolicy no longer enables one (looked at once per
// generation).
func (r *StreamClusterReconciler) removeNetworkPolicy(ctx context.Context, c *streamsv1alpha1.StreamCluster, o *clusterObservation) error {
	if !o.firstLook || (c.Spec.NetworkPolicy != nil && c.Spec.NetworkPolicy.Enabled) {
		return nil
	}
	np := &networkingv1.NetworkPolicy{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: resources.NetworkPolicyName(c)}, np)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(np, c) {
		return nil
	}
	if err := r.Client.Delete(ctx, np); client.IgnoreNotFound(err) != nil {
		return err
	}
	eventAbout(r.Recorder, c, np, eventNormal, "Deleted", "Apply", "deleted NetworkPolicy %s (spec.networkPolicy is not enabled)", np.Name)
	return nil
}
