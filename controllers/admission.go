package controllers

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// A Stream may name a StreamCluster in another namespace
// (spec.clusterRef.namespace); the cluster keeps it only if its
// spec.allowedNamespaces admits the Stream's namespace. See doc.go for what
// happens to a Stream whose namespace stops being admitted.

// clusterKey is the StreamCluster a Stream names.
func clusterKey(s *streamsv1alpha1.Stream) client.ObjectKey {
	return client.ObjectKey{Namespace: s.ClusterNamespace(), Name: s.Spec.ClusterRef.Name}
}

// clusterRefIndexValue is the clusterRefIndex key of the cluster
// namespace/name.
func clusterRefIndexValue(namespace, name string) string { return namespace + "/" + name }

// crossNamespace is true when s names a cluster outside its own namespace.
func crossNamespace(s *streamsv1alpha1.Stream) bool { return s.ClusterNamespace() != s.Namespace }

// clusterRefString names s's cluster in messages: its name, with its
// namespace when that is not the Stream's.
func clusterRefString(s *streamsv1alpha1.Stream) string {
	if crossNamespace(s) {
		return clusterKey(s).String()
	}
	return s.Spec.ClusterRef.Name
}

// admission says why c does not keep s ("" when it does): s's namespace is
// not one c's allowedNamespaces admits. The namespace's labels are read
// (from the cache, metadata only) only when the rule is a selector.
func (r *StreamReconciler) admission(ctx context.Context, s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster) (string, error) {
	return admissionOf(ctx, r.Client, "Streams", s.Namespace, c)
}

// admissionOf says why c does not admit objects of kind (plural, for the
// message) from namespace ns ("" when it does), as admission does for a
// Stream; a StreamAccess is admitted by the same rule.
func admissionOf(ctx context.Context, cl client.Reader, kind, ns string, c *streamsv1alpha1.StreamCluster) (string, error) {
	rule := &c.Spec.AllowedNamespaces
	var nsLabels map[string]string
	if ns != c.Namespace && rule.EffectiveFrom() == streamsv1alpha1.NamespacesFromSelector {
		var err error
		if nsLabels, err = namespaceLabels(ctx, cl, ns); err != nil {
			return "", err
		}
	}
	ok, err := rule.Admits(c.Namespace, ns, nsLabels)
	switch {
	case ok:
		return "", nil
	case err != nil:
		return fmt.Sprintf("StreamCluster %s/%s admits no other namespace: %v", c.Namespace, c.Name, err), nil
	}
	return fmt.Sprintf("StreamCluster %s/%s does not admit %s from namespace %s (spec.allowedNamespaces %s)",
		c.Namespace, c.Name, kind, ns, rule), nil
}

// namespaceLabels reads a namespace's labels; a namespace gone has none.
func namespaceLabels(ctx context.Context, cl client.Reader, name string) (map[string]string, error) {
	ns := namespaceMetadata()
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return ns.Labels, nil
}

// namespaceMetadata is a Namespace as the manager caches it: its metadata
// only, which holds the labels a selector reads.
func namespaceMetadata() *metav1.PartialObjectMetadata {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns
}

// outsideCache is the manager cache's refusal to read a namespace it does
// not watch (the operator's --namespaces): a cluster there is one the
// operator cannot see, which waiting does not change. controller-runtime
// gives it no type of its own; TestStreamClusterInAnUnwatchedNamespace pins
// the words.
func outsideCache(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unknown namespace for the cache")
}

// streamsOfNamespace maps a namespace to the Streams in it that name a
// cluster elsewhere: the only ones its labels can admit or refuse. Through
// an index over every watched namespace, so that a namespace the operator
// does not watch maps to nothing rather than to an error.
func (r *StreamReconciler) streamsOfNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	var list streamsv1alpha1.StreamList
	if err := r.Client.List(ctx, &list, client.MatchingFields{crossNamespaceIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the Streams of a namespace", "namespace", o.GetName())
		return nil
	}
	return requestsOf(list.Items)
}

// requestsOf is a reconcile request per Stream.
func requestsOf(streams []streamsv1alpha1.Stream) []ctrl.Request {
	reqs := make([]ctrl.Request, 0, len(streams))
	for i := range streams {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&streams[i])})
	}
	return reqs
}

// namespaceLabelsChanged passes a Namespace's label changes only: a new
// namespace holds no Stream yet, a deleted one's Streams are deleted with
// it, and the manager's first list of every namespace (creations) would
// otherwise enqueue every Stream a second time at start.
type namespaceLabelsChanged struct{ predicate.Funcs }

func (namespaceLabelsChanged) Create(crevent.CreateEvent) bool   { return false }
func (namespaceLabelsChanged) Delete(crevent.DeleteEvent) bool   { return false }
func (namespaceLabelsChanged) Generic(crevent.GenericEvent) bool { return false }
func (namespaceLabelsChanged) Update(e crevent.UpdateEvent) bool {
	return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
}

// admittedBefore says whether a Stream whose cluster is gone had been kept
// by it: the operator applied a generation of it to the brokers, and did
// not find its namespace refused since. Only such a Stream, when it names
// a cluster in another namespace, records its broker stream for deletion
// when the cluster returns (orphans.go): any namespace can name a cluster
// that is gone, and none of them but the admitted ones may delete what is
// on its claims.
func admittedBefore(s *streamsv1alpha1.Stream) bool {
	ready := meta.FindStatusCondition(s.Status.Conditions, streamsv1alpha1.ConditionReady)
	return s.Status.ObservedGeneration > 0 && (ready == nil || ready.Reason != streamsv1alpha1.ReasonNamespaceNotAllowed)
}
