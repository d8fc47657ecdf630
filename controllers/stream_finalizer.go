package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

// finalize applies a deleted Stream's deletionPolicy on the broker, then
// drops the finalizer. It never blocks for good: a detached Stream, a
// Retain policy, a cluster that is gone (or going, with brokers that no
// longer answer) drop the finalizer without a broker call — the last two
// recording the stream for deletion when the cluster returns; so do a
// cluster that no longer admits the Stream's namespace and one in a
// namespace the operator does not watch, which leave the stream on the
// brokers. A broker that fails is retried with backoff, and the status
// says how to detach.
//
// The cluster may be in another namespace: it is found, admits the
// Stream, and records the stream to delete in its own namespace, as for a
// Stream beside it.
func (r *StreamReconciler) finalize(ctx context.Context, s *streamsv1alpha1.Stream) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, StreamFinalizer) {
		return ctrl.Result{}, nil
	}
	name := s.StreamName()
	drop := func(typ, reason, note string, args ...any) (ctrl.Result, error) {
		if err := r.dropFinalizer(ctx, s); err != nil {
			return requeueOnConflict(err)
		}
		event(r.Recorder, s, typ, reason, "Finalize", note, args...)
		return ctrl.Result{}, nil
	}
	switch {
	case !managed(s):
		return drop(eventNormal, "Detached", "annotation %s is \"false\": stream %s left on the broker", AnnotationManaged, name)
	case s.Spec.DeletionPolicy == streamsv1alpha1.DeletionPolicyRetain:
		return drop(eventNormal, "Retained", "deletionPolicy is Retain: stream %s left on cluster %s", name, s.Spec.ClusterRef.Name)
	}

	// The cluster gone (or going, its brokers silent): the broker stream
	// stays on the claims, which outlive the cluster, so it is recorded
	// (in the cluster's namespace) and deleted if the cluster runs again
	// (orphans.go).
	key := clusterKey(s)
	gone := func(why string) (ctrl.Result, error) {
		if crossNamespace(s) && !admittedBefore(s) {
			return drop(eventNormal, "ClusterGone",
				"%s and never kept this Stream (its namespace was not admitted, or the stream not yet created): stream %s is not recorded for deletion",
				why, name)
		}
		if err := r.recordDeletedStream(ctx, key.Namespace, key.Name, name); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Created by another Stream's finalizer since the cache
				// was read: add to it on the next try.
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return requeueOnConflict(err)
		}
		return drop(eventWarning, "ClusterGone",
			"%s: stream %s was not deleted from its brokers and stays on their claims; recorded in ConfigMap %s, it is deleted when a StreamCluster %s runs again (unless a Stream names it by then)",
			why, name, deletedStreamsName(key.Name), clusterRefString(s))
	}
	var c streamsv1alpha1.StreamCluster
	switch err := r.Client.Get(ctx, key, &c); {
	case apierrors.IsNotFound(err):
		return gone(fmt.Sprintf("StreamCluster %s is gone", clusterRefString(s)))
	case outsideCache(err):
		return drop(eventWarning, "ClusterNotWatched",
			"the operator does not watch namespace %s: stream %s was left on StreamCluster %s", key.Namespace, name, clusterRefString(s))
	case err != nil:
		return ctrl.Result{}, err
	}
	// A namespace the cluster does not admit deletes nothing on it: not a
	// stream another namespace keeps there, nor one this Stream kept
	// before the cluster's rule or the namespace's labels changed.
	switch denied, err := r.admission(ctx, s, &c); {
	case err != nil:
		return ctrl.Result{}, err
	case denied != "":
		return drop(eventWarning, streamsv1alpha1.ReasonNamespaceNotAllowed, "%s: stream %s was left on the brokers", denied, name)
	}
	// Nor does a Stream whose broker stream another one keeps.
	switch k, err := r.keeper(ctx, s, &c); {
	case err != nil:
		return ctrl.Result{}, err
	case keptByAnother(s, k):
		return drop(eventNormal, "Retained", "stream %s is kept by Stream %s/%s: left on cluster %s", name, k.Namespace, k.Name, clusterRefString(s))
	}
	endpoint := adminEndpoint(s, &c)
	admin, err := r.streamAdmin(ctx, endpoint, &c)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, r.Options.BrokerCallTimeout)
		err = admin.DeleteStream(cctx, name)
		cancel()
	}
	switch {
	case err == nil:
		return drop(eventNormal, "Deleted", "deleted stream %s on cluster %s", name, c.Name)
	case brokeradmin.IsNotFound(err):
		return drop(eventNormal, "Deleted", "stream %s was already gone from cluster %s", name, c.Name)
	case !c.DeletionTimestamp.IsZero() && brokeradmin.IsUnreachable(err):
		return gone(fmt.Sprintf("StreamCluster %s is being deleted and its brokers could not be reached", c.Name))
	}
	ready := metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonDeleting, Message: fmt.Sprintf(
		"deleting stream %s on cluster %s failed (retrying with backoff): %v; to delete this resource without deleting the stream, set annotation %s: \"false\"",
		name, c.Name, err, AnnotationManaged)}
	old := s.Status.DeepCopy()
	written, perr := patchStatus(ctx, r.Client, s, withReady(ready))
	// A Conflict or a Stream gone is no error of its own: the error below
	// retries the deletion with backoff anyway.
	if perr != nil && !apierrors.IsConflict(perr) && !apierrors.IsNotFound(perr) {
		return ctrl.Result{}, perr
	}
	if written {
		r.readyTransitionEvent(s, old, &s.Status)
	}
	return ctrl.Result{}, fmt.Errorf("delete stream %s on cluster %s: %w", name, c.Name, err)
}
