package controllers

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

// StreamClusterReconciler turns a StreamCluster into its brokers: the
// children built by controllers/resources, applied with server-side apply,
// a scale-down that drains the departing brokers first, and a status made
// of small condition functions (streamcluster_status.go) patched with
// optimistic locking.
//
// It reconciles on spec changes (generation) and on any change of a child,
// never on its own status writes; an idle cluster is looked at again once
// per jittered resync period.
type StreamClusterReconciler struct {
	Client     client.Client
	APIReader  client.Reader
	RESTMapper meta.RESTMapper
	Recorder   events.EventRecorder
	Options    Options

	// reach logs the brokers' answers to the status call once per change.
	reach reachLog
}

// clusterObservation is what one reconcile saw and did; the status
// functions read it.
type clusterObservation struct {
	// desired is spec.replicas; slots is spec.ownership.slots (0: the
	// default).
	desired int32
	slots   int32
	// clusterID is the cluster id status records (clusterStatus sets it:
	// the recorded one, or the one the brokers just agreed on).
	clusterID string
	// renderedClusterID is the id this reconcile rendered for the brokers
	// (the ConfigMap <name>-cluster-id), "" when none.
	renderedClusterID string
	// sts is the StatefulSet after this reconcile's apply (nil: none).
	sts *appsv1.StatefulSet
	// brokers are the answers of the brokers' admin API.
	brokers []brokerObservation
	// pods is how many broker pods exist; failing says which of them are
	// failing and why (crash loops, images that cannot be pulled...).
	pods    int
	failing []string
	// plan is the replica count applied, and why.
	plan scalePlan
	// paused: spec.paused, children left alone.
	paused bool
	// firstLook: the first reconcile of this generation.
	firstLook bool
	// specErr: the spec cannot be built into children (nothing applied).
	specErr error
	// applyErr: applying a child failed (retried with backoff).
	applyErr error
	// creds verify and authenticate the operator's calls to the brokers;
	// secret is what is wrong with a Secret the spec names (nil: nothing).
	creds  brokeradmin.Credentials
	secret *secretProblem
	// storageChange: the claim template changed, which a StatefulSet cannot
	// take; the old one is kept and this says why.
	storageChange string
	// tierReason and tierMessage: the brokers cannot use the object
	// storage (clusterStatus fills them from the brokers' answers).
	tierReason, tierMessage string
	// tiered: spec.tieredStorage is set (its reachability is polled).
	tiered bool
	// deferred events are recorded once the status is written.
	deferred []func()
}

// Reconcile implements reconcile.Reconciler.
func (r *StreamClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Options.observe != nil {
		r.Options.observe("streamcluster", req.String())
	}
	var c streamsv1alpha1.StreamCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &c); err != nil {
		if apierrors.IsNotFound(err) {
			r.reach.forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		// Owner references let the garbage collector remove the children;
		// the StatefulSet's retention policy keeps the claims.
		return ctrl.Result{}, nil
	}

	o := clusterObservation{
		desired:   c.Spec.EffectiveReplicas(),
		slots:     c.Spec.Ownership.EffectiveSlots(),
		paused:    c.Spec.Paused,
		firstLook: c.Status.ObservedGeneration != c.Generation,
		tiered:    c.Spec.TieredStorage != nil,
	}
	creds, problem, err := checkSecrets(ctx, r.APIReader, &c, time.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	o.creds, o.secret = creds, problem
	sts := &appsv1.StatefulSet{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.StatefulSetName(&c)}, sts); {
	case apierrors.IsNotFound(err):
		sts = nil
	case err != nil:
		return ctrl.Result{}, err
	}
	o.sts = sts
	current := o.desired
	if sts != nil && sts.Spec.Replicas != nil {
		current = *sts.Spec.Replicas
	}
	if sts != nil {
		o.brokers = r.observeBrokers(ctx, &c, current, o.creds)
		r.reach.observe(ctrl.LoggerFrom(ctx), c.Namespace, c.Name, o.brokers)
		pods, err := r.listBrokerPods(ctx, &c)
		if err != nil {
			return ctrl.Result{}, err
		}
		o.pods, o.failing = len(pods), failingPods(pods)
	}

	if !o.paused {
		o.plan = r.planReplicas(ctx, &c, o.creds, sts, o.desired, current, o.brokers)
		applied, err := r.applyChildren(ctx, &c, &o)
		if apierrors.IsConflict(err) {
			// A child changed since it was read: decide again from the
			// newer version.
			return requeueOnConflict(err)
		}
		o.applyErr = err
		if applied != nil {
			o.sts = applied
		}
		r.scaleEvents(&c, current, o)
	} else {
		o.plan = scalePlan{replicas: current, from: current}
	}

	old := c.Status.DeepCopy()
	written, err := patchStatus(ctx, r.Client, &c, func(c *streamsv1alpha1.StreamCluster) {
		c.Status = clusterStatus(c, o)
	})
	if err != nil {
		// A Conflict: a reconcile that read a stale cluster; the one that
		// won has written its status (and recorded its events).
		return requeueOnConflict(err)
	}
	if written {
		// Events about status transitions are recorded once the transition
		// is written, so that two reconciles racing on a stale cache do not
		// both report it.
		r.transitionEvents(&c, old, o)
		for _, e := range o.deferred {
			e()
		}
	}
	if o.applyErr != nil {
		return ctrl.Result{}, o.applyErr
	}
	// Tokens of StreamAccesses that are gone (a finalizer removed by
	// hand): out of the brokers' token directory.
	if !o.paused && c.Spec.Auth != nil {
		removed, err := pruneAccessTokens(ctx, r.Client, r.APIReader, &c)
		if err != nil {
			return requeueOnConflict(err)
		}
		for _, key := range removed {
			event(r.Recorder, &c, eventWarning, "TokenRevoked", "Prune",
				"token %s removed from Secret %s: no StreamAccess naming this cluster has that name (deleted without its finalizer?)", key, resources.AccessTokensSecretName(&c))
		}
	}
	// Streams deleted while a cluster of this name was gone: once a broker
	// serves, they go (orphans.go).
	if !o.paused && o.sts != nil && o.sts.Status.ReadyReplicas > 0 {
		if err := r.deleteRecordedStreams(ctx, &c, o.creds); err != nil {
			return requeueOnConflict(err)
		}
	}
	return ctrl.Result{RequeueAfter: r.nextLook(o, &c.Status)}, nil
}

// nextLook is when the cluster is looked at again with no event: soon while
// a scale-down waits on the brokers or a recorded cluster id waits to be
// rendered, sooner than the resync while it is not Ready or its brokers
// rebalance or repair, every TierPollInterval while it uses object storage
// (whose loss no Kubernetes event announces), else at the jittered resync.
func (r *StreamClusterReconciler) nextLook(o clusterObservation, st *streamsv1alpha1.StreamClusterStatus) time.Duration {
	switch {
	case o.plan.draining != "" || o.plan.blocked != "":
		return r.Options.DrainPollInterval
	case !o.paused && o.specErr == nil && st.ClusterID != o.renderedClusterID:
		// The id was recorded by this reconcile's status write, after
		// the children were applied: render it now rather than at the
		// next resync (status writes trigger no reconcile).
		return conflictRetry
	case !meta.IsStatusConditionTrue(st.Conditions, streamsv1alpha1.ConditionReady):
		return min(r.Options.NotReadyPollInterval, r.Options.ResyncPeriod)
	case settlingReason(st) || tierDegraded(st):
		// The brokers move slots or copies by themselves, or reach
		// their object storage again, which no Kubernetes event
		// announces: look again soon, so that status follows.
		return min(r.Options.DrainPollInterval, r.Options.ResyncPeriod)
	case o.tiered:
		return min(jitter(r.Options.TierPollInterval), r.Options.ResyncPeriod)
	}
	return jitter(r.Options.ResyncPeriod)
}

// settlingReason: Progressing says the brokers rebalance or repair.
func settlingReason(st *streamsv1alpha1.StreamClusterStatus) bool {
	c := meta.FindStatusCondition(st.Conditions, streamsv1alpha1.ConditionProgressing)
	return c != nil && c.Status == metav1.ConditionTrue &&
		(c.Reason == streamsv1alpha1.ReasonRebalancing || c.Reason == streamsv1alpha1.ReasonRepairing)
}

// SetupWithManager registers the controller: StreamClusters on generation
// changes only (status writes do not come back as reconciles), and every
// owned child on any change.
func (r *StreamClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.Options = r.Options.withDefaults()
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.RESTMapper == nil {
		r.RESTMapper = mgr.GetRESTMapper()
	}
	if r.Recorder == nil {
		r.Recorder = r.Options.recorder
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(EventSource)
	}
	generation := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	return ctrl.NewControllerManagedBy(mgr).
		Named("streamcluster").
		For(&streamsv1alpha1.StreamCluster{}, generation).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		// A PDB's status moves with every pod; only its spec matters here.
		Owns(&policyv1.PodDisruptionBudget{}, generation).
		// The broker pods belong to the StatefulSet; their crashes and
		// recoveries are what Degraded reports.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(clusterOfPod), builder.WithPredicates(podFailureChanged{})).
		// The Secrets a cluster names (and its operator token): created,
		// fixed or deleted, they change Degraded and the credentials. Only
		// their metadata is watched: the manager holds no Secret's data.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(clustersOfSecret(r.Client)), builder.OnlyMetadata).
		Owns(&networkingv1.NetworkPolicy{}).
		// A StreamAccess gone: its token must be too, whether or not its
		// finalizer ran (pruneAccessTokens).
		Watches(&streamsv1alpha1.StreamAccess{}, handler.EnqueueRequestsFromMapFunc(clusterOfAccess), builder.WithPredicates(deletedOnly{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Options.StreamClusterConcurrency,
			RateLimiter:             rateLimiter(r.Options),
			SkipNameValidation:      &r.Options.SkipNameValidation,
		}).
		Complete(r)
}
