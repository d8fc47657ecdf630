package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// One broker stream, one Stream. Streams of several namespaces may name
// one cluster, and a name on the broker defaults to metadata.name, which
// is unique in a namespace only: "orders" in shop and "orders" in billing
// are the same broker stream. Two Streams managing it would set back each
// other's policy at every resync, and deleting either would delete the
// other's data. So one Stream keeps it — the one that already applied its
// spec to it, else the oldest (created first; then by namespace and name)
// — and the others are Ready False, reason Conflict, ask nothing of the
// brokers, and delete nothing when deleted.
// Only the Streams that could manage it count: a detached Stream
// (managed: "false") or one whose namespace the cluster does not admit
// keeps nothing, so that no namespace can hold a name against those the
// cluster admits. When the keeper goes, the next in line takes the stream
// over as it finds it.

// brokerNameIndex indexes Streams by their cluster's namespace/name and
// their stream's name on its brokers.
const brokerNameIndex = "spec.clusterRef.streamName"

// brokerNameIndexValue is the brokerNameIndex key of s: no stream or
// Kubernetes name holds ':', so the key is unambiguous.
func brokerNameIndexValue(s *streamsv1alpha1.Stream) string {
	key := clusterKey(s)
	return clusterRefIndexValue(key.Namespace, key.Name) + ":" + s.StreamName()
}

// keeper is the Stream that keeps s's broker stream on c: s itself, or an
// older one; nil when none may (s is detached or not admitted).
func (r *StreamReconciler) keeper(ctx context.Context, s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster) (*streamsv1alpha1.Stream, error) {
	var list streamsv1alpha1.StreamList
	if err := r.Client.List(ctx, &list, client.MatchingFields{brokerNameIndex: brokerNameIndexValue(s)}); err != nil {
		return nil, err
	}
	var candidates []*streamsv1alpha1.Stream
	for i := range list.Items {
		p := &list.Items[i]
		if p.UID == s.UID {
			p = s // the copy this reconcile holds, however fresh the cache
		}
		if !managed(p) {
			continue
		}
		denied, err := r.admission(ctx, p, c)
		if err != nil {
			return nil, err
		}
		if denied == "" {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	return slices.MinFunc(candidates, olderStream), nil
}

// olderStream orders the candidates to keep a broker stream: one that
// applied its spec to it first (the keeper so far: a Stream created in the
// same second, or of a namespace admitted later, does not take it over),
// then by creation, namespace and name, so that every reconcile picks the
// same keeper.
func olderStream(a, b *streamsv1alpha1.Stream) int {
	if ka, kb := a.Status.ObservedGeneration > 0, b.Status.ObservedGeneration > 0; ka != kb {
		if ka {
			return -1
		}
		return 1
	}
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// keptByAnother says s is not the Stream that keeps its broker stream.
func keptByAnother(s, k *streamsv1alpha1.Stream) bool { return k != nil && k.UID != s.UID }

// nameTaken: another Stream keeps the broker stream s names.
func nameTaken(s, k *streamsv1alpha1.Stream) string {
	return fmt.Sprintf("stream %s on cluster %s is kept by Stream %s/%s: two Streams on one broker stream would undo each other's changes and delete each other's data; give this one another spec.name, or delete it",
		s.StreamName(), clusterRefString(s), k.Namespace, k.Name)
}

// streamsOfBrokerName maps a Stream deleted or detached to the others that
// name its broker stream: the next in line may keep it now.
func (r *StreamReconciler) streamsOfBrokerName(ctx context.Context, o client.Object) []ctrl.Request {
	s, ok := o.(*streamsv1alpha1.Stream)
	if !ok {
		return nil
	}
	var list streamsv1alpha1.StreamList
	if err := r.Client.List(ctx, &list, client.MatchingFields{brokerNameIndex: brokerNameIndexValue(s)}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the Streams of a broker stream", "stream", s.StreamName())
		return nil
	}
	others := slices.DeleteFunc(list.Items, func(p streamsv1alpha1.Stream) bool { return p.UID == s.UID })
	return requestsOf(others)
}

// keeperMayChange passes what can hand a broker stream to another
// Stream: a Stream removed, or detached (or attached again) with the
// managed annotation.
type keeperMayChange struct{ predicate.Funcs }

func (keeperMayChange) Create(crevent.CreateEvent) bool   { return false }
func (keeperMayChange) Delete(crevent.DeleteEvent) bool   { return true }
func (keeperMayChange) Generic(crevent.GenericEvent) bool { return false }
func (keeperMayChange) Update(e crevent.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*streamsv1alpha1.Stream)
	n, ok2 := e.ObjectNew.(*streamsv1alpha1.Stream)
	return ok1 && ok2 && managed(o) != managed(n)
}
