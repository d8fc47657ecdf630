package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

// Metadata the Stream controller reads and writes.
const (
	// StreamFinalizer makes deleting a Stream wait until the operator has
	// applied its deletionPolicy on the broker.
	StreamFinalizer = "streams.picomq.io/finalizer"
	// AnnotationManaged set to "false" detaches a Stream from its broker
	// stream: the operator no longer creates, updates or deletes it, and
	// drops its finalizer.
	AnnotationManaged = "streams.picomq.io/managed"
	// AnnotationAdminURL, on a Stream or its StreamCluster, overrides the
	// URL of the cluster's admin API (default: the client Service's DNS
	// name), for an operator running outside the cluster network.
	AnnotationAdminURL = "streams.picomq.io/admin-url"

	// clusterRefIndex indexes Streams by the namespace/name of the
	// StreamCluster they name, which may be in another namespace.
	clusterRefIndex = "spec.clusterRef"
	// crossNamespaceIndex indexes the Streams that name a cluster in
	// another namespace by their own namespace, whose labels may admit
	// them.
	crossNamespaceIndex = "spec.clusterRef.crossNamespace"
)

// StreamReconciler keeps a Stream's named stream on its cluster: created
// with its policy, updated as the spec changes, repaired when it drifts or
// is deleted out of band, deleted (or retained) with the resource.
//
// It reconciles on spec changes, on annotation changes (managed, admin-url),
// when the Ready condition, endpoint or allowedNamespaces of its cluster
// changes (in whatever namespace the cluster is) and, for a Stream that
// names a cluster in another namespace, when its namespace's labels
// change; an idle Stream is reconciled once per jittered resync period,
// which is when drift is repaired.
type StreamReconciler struct {
	Client client.Client
	// APIReader reads the Secrets holding the cluster's credentials (never
	// cached: see credentials.go).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   Options
}

// streamAdmin is the admin client of c's brokers at endpoint, with the
// cluster's CA and the operator's token. A Secret that is missing or wrong
// leaves the credentials it would give out: the call then fails and says
// why, and the cluster's Degraded condition names the Secret.
func (r *StreamReconciler) streamAdmin(ctx context.Context, endpoint string, c *streamsv1alpha1.StreamCluster) (brokeradmin.StreamAdmin, error) {
	creds, _, err := checkSecrets(ctx, r.APIReader, c, time.Now())
	if err != nil {
		return nil, err
	}
	return r.Options.StreamAdmins.For(endpoint, creds)
}

// Reconcile implements reconcile.Reconciler.
func (r *StreamReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Options.observe != nil {
		r.Options.observe("stream", req.String())
	}
	var s streamsv1alpha1.Stream
	if err := r.Client.Get(ctx, req.NamespacedName, &s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &s)
	}
	if !managed(&s) {
		return r.detach(ctx, &s)
	}
	if _, err := patchObject(ctx, r.Client, &s, addFinalizer); err != nil {
		return requeueOnConflict(err)
	}

	var cluster streamsv1alpha1.StreamCluster
	switch err := r.Client.Get(ctx, clusterKey(&s), &cluster); {
	case apierrors.IsNotFound(err):
		return r.finish(ctx, &s, nil, jitter(r.Options.ResyncPeriod), withReady(clusterNotFound(&s)))
	case outsideCache(err):
		return r.finish(ctx, &s, nil, jitter(r.Options.ResyncPeriod), withReady(clusterNotWatched(&s)))
	case err != nil:
		return ctrl.Result{}, err
	}
	// Not admitted: nothing is asked of the brokers, whatever they hold.
	switch denied, err := r.admission(ctx, &s, &cluster); {
	case err != nil:
		return ctrl.Result{}, err
	case denied != "":
		return r.finish(ctx, &s, nil, jitter(r.Options.ResyncPeriod), withReady(namespaceNotAllowed(&s, denied)))
	}
	// Another Stream keeps this broker stream (stream_keeper.go).
	switch k, err := r.keeper(ctx, &s, &cluster); {
	case err != nil:
		return ctrl.Result{}, err
	case keptByAnother(&s, k):
		return r.finish(ctx, &s, nil, jitter(r.Options.ResyncPeriod), withReady(conflict(nameTaken(&s, k))))
	}

	out := r.sync(ctx, &s, &cluster)
	r.actionEvents(&s, out)
	next := jitter(r.Options.ResyncPeriod)
	txs := []func(*streamsv1alpha1.Stream){withReady(out.ready), withBrokerInfo(out.info)}
	if out.applied != "" {
		txs = append(txs, withApplied(out.applied))
	}
	return r.finish(ctx, &s, out.retry, next, txs...)
}

// finish writes the status txs make if it changed, then returns retryErr
// (the rate limiter backs off) or schedules the next look.
func (r *StreamReconciler) finish(ctx context.Context, s *streamsv1alpha1.Stream, retryErr error, next time.Duration, txs ...func(*streamsv1alpha1.Stream)) (ctrl.Result, error) {
	old := s.Status.DeepCopy()
	written, err := patchStatus(ctx, r.Client, s, txs...)
	if err != nil {
		return requeueOnConflict(err)
	}
	if written {
		r.readyTransitionEvent(s, old, &s.Status)
	}
	if retryErr != nil {
		return ctrl.Result{}, retryErr
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// addFinalizer and removeFinalizer are the finalizer changes patchObject
// writes.
func addFinalizer(s *streamsv1alpha1.Stream)    { controllerutil.AddFinalizer(s, StreamFinalizer) }
func removeFinalizer(s *streamsv1alpha1.Stream) { controllerutil.RemoveFinalizer(s, StreamFinalizer) }

// dropFinalizer removes the operator's finalizer, with optimistic locking;
// a Stream already gone is no error.
func (r *StreamReconciler) dropFinalizer(ctx context.Context, s *streamsv1alpha1.Stream) error {
	_, err := patchObject(ctx, r.Client, s, removeFinalizer)
	return client.IgnoreNotFound(err)
}

// managed is false when the Stream carries streams.picomq.io/managed: "false".
func managed(s *streamsv1alpha1.Stream) bool {
	return s.Annotations[AnnotationManaged] != "false"
}

// adminEndpoint is the base URL of the cluster's admin API: the Stream's
// override annotation, else the cluster's, else the client Service.
func adminEndpoint(s *streamsv1alpha1.Stream, c *streamsv1alpha1.StreamCluster) string {
	if u := s.Annotations[AnnotationAdminURL]; u != "" {
		return u
	}
	return clusterAdminEndpoint(c)
}

// detach leaves the broker stream alone for good: the finalizer goes and
// the status says why nothing is reconciled.
func (r *StreamReconciler) detach(ctx context.Context, s *streamsv1alpha1.Stream) (ctrl.Result, error) {
	had := controllerutil.ContainsFinalizer(s, StreamFinalizer)
	if err := r.dropFinalizer(ctx, s); err != nil {
		return requeueOnConflict(err)
	}
	if had {
		event(r.Recorder, s, eventNormal, "Detached", "Detach",
			"annotation %s is \"false\": the operator leaves stream %s on the broker alone, and deleting this resource will not delete it", AnnotationManaged, s.StreamName())
	}
	if _, err := patchStatus(ctx, r.Client, s, withReady(unmanaged(s))); client.IgnoreNotFound(err) != nil {
		return requeueOnConflict(err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the controller and the indexes of Streams by
// cluster, by broker stream and by the namespace whose labels admit them.
func (r *StreamReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = r.Options.recorder
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(EventSource)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &streamsv1alpha1.Stream{}, clusterRefIndex, func(o client.Object) []string {
		key := clusterKey(o.(*streamsv1alpha1.Stream))
		return []string{clusterRefIndexValue(key.Namespace, key.Name)}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &streamsv1alpha1.Stream{}, brokerNameIndex, func(o client.Object) []string {
		return []string{brokerNameIndexValue(o.(*streamsv1alpha1.Stream))}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &streamsv1alpha1.Stream{}, crossNamespaceIndex, func(o client.Object) []string {
		if s := o.(*streamsv1alpha1.Stream); crossNamespace(s) {
			return []string{s.Namespace}
		}
		return nil
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("stream").
		For(&streamsv1alpha1.Stream{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A Stream that stops keeping its broker stream hands it to the
		// next Stream naming it.
		Watches(&streamsv1alpha1.Stream{}, handler.EnqueueRequestsFromMapFunc(r.streamsOfBrokerName),
			builder.WithPredicates(keeperMayChange{})).
		Watches(&streamsv1alpha1.StreamCluster{}, handler.EnqueueRequestsFromMapFunc(r.streamsOfCluster),
			builder.WithPredicates(clusterAvailabilityChanged{})).
		// Namespaces are cluster-scoped: cached whatever namespaces the
		// manager is limited to, metadata only (the labels).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.streamsOfNamespace),
			builder.OnlyMetadata, builder.WithPredicates(namespaceLabelsChanged{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Options.StreamConcurrency,
			RateLimiter:             rateLimiter(r.Options),
			SkipNameValidation:      &r.Options.SkipNameValidation,
		}).
		Complete(r)
}

// streamsOfCluster maps a StreamCluster to its Streams, in every watched
// namespace.
func (r *StreamReconciler) streamsOfCluster(ctx context.Context, o client.Object) []ctrl.Request {
	streams, err := streamsNaming(ctx, r.Client, o.GetNamespace(), o.GetName())
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the Streams of a cluster", "cluster", o.GetNamespace()+"/"+o.GetName())
		return nil
	}
	return requestsOf(streams)
}

// streamsNaming lists the Streams, of any watched namespace, that name the
// cluster namespace/name.
func streamsNaming(ctx context.Context, cl client.Reader, namespace, name string) ([]streamsv1alpha1.Stream, error) {
	var list streamsv1alpha1.StreamList
	err := cl.List(ctx, &list, client.MatchingFields{clusterRefIndex: clusterRefIndexValue(namespace, name)})
	return list.Items, err
}

// clusterAvailabilityChanged passes a StreamCluster's creation, deletion,
// and the updates that change whether its Streams can be reconciled: its
// Ready condition, its endpoint, its admin-url annotation, the namespaces
// it admits, whether it has tiered storage (TieringNotConfigured).
type clusterAvailabilityChanged struct{ predicate.Funcs }

func (clusterAvailabilityChanged) Create(crevent.CreateEvent) bool   { return true }
func (clusterAvailabilityChanged) Delete(crevent.DeleteEvent) bool   { return true }
func (clusterAvailabilityChanged) Generic(crevent.GenericEvent) bool { return false }
func (clusterAvailabilityChanged) Update(e crevent.UpdateEvent) bool {
	oldC, ok1 := e.ObjectOld.(*streamsv1alpha1.StreamCluster)
	newC, ok2 := e.ObjectNew.(*streamsv1alpha1.StreamCluster)
	if !ok1 || !ok2 {
		return false
	}
	return meta.IsStatusConditionTrue(oldC.Status.Conditions, streamsv1alpha1.ConditionReady) !=
		meta.IsStatusConditionTrue(newC.Status.Conditions, streamsv1alpha1.ConditionReady) ||
		oldC.Status.Endpoint != newC.Status.Endpoint ||
		oldC.Annotations[AnnotationAdminURL] != newC.Annotations[AnnotationAdminURL] ||
		!equality.Semantic.DeepEqual(oldC.Spec.AllowedNamespaces, newC.Spec.AllowedNamespaces) ||
		(oldC.Spec.TieredStorage == nil) != (newC.Spec.TieredStorage == nil)
}
