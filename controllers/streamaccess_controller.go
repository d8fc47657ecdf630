package controllers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/picomq/picomq/controllers/resources"
)

// Metadata the StreamAccess controller reads and writes.
const (
	// AccessFinalizer makes deleting a StreamAccess wait until its token
	// is out of the cluster's access Secret.
	AccessFinalizer = "streams.picomq.io/access-token"
	// AnnotationRotateToken, on a StreamAccess, asks for a new token: when
	// its value differs from status.rotateToken the operator mints one
	// (the old one stops working) and records the value.
	AnnotationRotateToken = "streams.picomq.io/rotate-token"

	// accessClusterIndex indexes StreamAccesses by the namespace/name of
	// the StreamCluster they name.
	accessClusterIndex = "access.spec.clusterRef"
	// accessCrossNamespaceIndex indexes the StreamAccesses that name a
	// cluster in another namespace by their own namespace.
	accessCrossNamespaceIndex = "access.spec.clusterRef.crossNamespace"
	// accessTokenFromIndex indexes StreamAccesses by the Secret their
	// spec.tokenFrom names (in their namespace).
	accessTokenFromIndex = "access.spec.tokenFrom"
)

// StreamAccessReconciler turns a StreamAccess into a token: its file in
// the cluster's access Secret (<cluster>-access-tokens, projected into the
// brokers' token directory) and the application's Secret in the
// StreamAccess's namespace. See doc.go, "Access as a resource".
type StreamAccessReconciler struct {
	Client client.Client
	// APIReader reads Secrets (never cached: see credentials.go).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   Options
}

// accessOutcome is what a reconcile of an accepted StreamAccess did.
type accessOutcome struct {
	minted, rotated bool
}

// denial is why a StreamAccess gets no token: its Ready condition.
type denial struct {
	reason, message string
}

func (d *denial) Error() string { return d.reason + ": " + d.message }

// Reconcile implements reconcile.Reconciler.
func (r *StreamAccessReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Options.observe != nil {
		r.Options.observe("streamaccess", req.String())
	}
	var a streamsv1alpha1.StreamAccess
	if err := r.Client.Get(ctx, req.NamespacedName, &a); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !a.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &a)
	}
	if _, err := patchObject(ctx, r.Client, &a, func(a *streamsv1alpha1.StreamAccess) {
		controllerutil.AddFinalizer(a, AccessFinalizer)
	}); err != nil {
		return requeueOnConflict(err)
	}

	tokenName := resources.AccessTokenName(a.Namespace, a.Name)
	var c streamsv1alpha1.StreamCluster
	switch err := r.Client.Get(ctx, accessClusterKey(&a), &c); {
	case apierrors.IsNotFound(err):
		// Its access Secret went with it (owned by the cluster).
		return r.finish(ctx, &a, nil, &denial{streamsv1alpha1.ReasonClusterNotFound, fmt.Sprintf(
			"StreamCluster %s does not exist: no broker holds a token for this StreamAccess", accessClusterKey(&a))})
	case outsideCache(err):
		return r.finish(ctx, &a, nil, &denial{streamsv1alpha1.ReasonClusterNotFound, fmt.Sprintf(
			"StreamCluster %s is in namespace %s, which the operator does not watch (its --namespaces)", accessClusterKey(&a), accessClusterKey(&a).Namespace)})
	case err != nil:
		return ctrl.Result{}, err
	}

	out, d, err := r.grant(ctx, &a, &c, tokenName)
	switch {
	case err != nil:
		return requeueOnConflict(err)
	case d != nil:
		// Whatever the brokers held for it goes: a token is never left in
		// force for a StreamAccess that is not granted one.
		removed, err := r.revoke(ctx, &c, tokenName)
		if err != nil {
			return requeueOnConflict(err)
		}
		if removed {
			event(r.Recorder, &a, eventWarning, "TokenRevoked", "Revoke",
				"token %s removed from Secret %s/%s (%s): the brokers refuse it once their token volume syncs", tokenName, c.Namespace, resources.AccessTokensSecretName(&c), d.reason)
		}
		return r.finish(ctx, &a, &c, d)
	}
	switch {
	case out.rotated:
		event(r.Recorder, &a, eventNormal, "TokenRotated", "Rotate",
			"annotation %s is %q: a new token is in Secret %s and the old one is refused once the brokers' token volume syncs", AnnotationRotateToken, a.Annotations[AnnotationRotateToken], a.EffectiveSecretName())
	case out.minted:
		event(r.Recorder, &a, eventNormal, "TokenIssued", "Grant",
			"token %s written to Secret %s and granted on StreamCluster %s/%s", tokenName, a.EffectiveSecretName(), c.Namespace, c.Name)
	}
	return r.finish(ctx, &a, &c, nil)
}

// finish writes the status: Ready (Accepted when d is nil, else d), the
// cluster that accepted it, its Secret and token name, the rotation acted
// on. A denied StreamAccess is looked at again at the resync; a change of
// what denied it (the cluster, the namespace's labels, a Secret) brings it
// back sooner.
func (r *StreamAccessReconciler) finish(ctx context.Context, a *streamsv1alpha1.StreamAccess, c *streamsv1alpha1.StreamCluster, d *denial) (ctrl.Result, error) {
	old := a.Status.DeepCopy()
	_, err := patchStatus(ctx, r.Client, a, func(a *streamsv1alpha1.StreamAccess) {
		ready := metav1.Condition{Type: streamsv1alpha1.ConditionReady, ObservedGeneration: a.Generation}
		a.Status.ObservedGeneration = a.Generation
		if d != nil {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, d.reason, d.message
			a.Status.Cluster, a.Status.TokenName = "", ""
		} else {
			ready.Status, ready.Reason = metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted
			ready.Message = fmt.Sprintf("token %s granted on StreamCluster %s/%s and written to Secret %s; the brokers accept it once their token volume syncs (within about 2 minutes)",
				resources.AccessTokenName(a.Namespace, a.Name), c.Namespace, c.Name, a.EffectiveSecretName())
			a.Status.Cluster = c.Namespace + "/" + c.Name
			a.Status.SecretName = a.EffectiveSecretName()
			a.Status.TokenName = resources.AccessTokenName(a.Namespace, a.Name)
			a.Status.RotateToken = a.Annotations[AnnotationRotateToken]
		}
		meta.SetStatusCondition(&a.Status.Conditions, ready)
	})
	if err != nil {
		return requeueOnConflict(err)
	}
	was := meta.FindStatusCondition(old.Conditions, streamsv1alpha1.ConditionReady)
	if d != nil && (was == nil || was.Reason != d.reason) {
		event(r.Recorder, a, eventWarning, d.reason, "Grant", "%s", d.message)
	}
	return ctrl.Result{RequeueAfter: jitter(r.Options.ResyncPeriod)}, nil
}

// grant makes the token and writes both Secrets, or says why not.
func (r *StreamAccessReconciler) grant(ctx context.Context, a *streamsv1alpha1.StreamAccess, c *streamsv1alpha1.StreamCluster, tokenName string) (accessOutcome, *denial, error) {
	var out accessOutcome
	switch denied, err := admissionOf(ctx, r.Client, "StreamAccesses", a.Namespace, c); {
	case err != nil:
		return out, nil, err
	case denied != "":
		return out, &denial{streamsv1alpha1.ReasonNamespaceNotAllowed, denied}, nil
	}
	if c.Spec.Auth == nil {
		return out, &denial{streamsv1alpha1.ReasonAuthNotEnabled, fmt.Sprintf(
			"StreamCluster %s/%s has no spec.auth: its brokers check no token (every request is allowed); set spec.auth to grant this one", c.Namespace, c.Name)}, nil
	}
	items, err := resources.AccessItems(a.Spec.Scopes, a.Spec.Prefixes)
	if err != nil {
		return out, &denial{streamsv1alpha1.ReasonInvalidSpec, err.Error()}, nil
	}
	secretName := a.EffectiveSecretName()
	existing, err := getSecret(ctx, r.APIReader, a.Namespace, secretName)
	if err != nil {
		return out, nil, err
	}
	if existing != nil && !metav1.IsControlledBy(existing, a) {
		return out, &denial{streamsv1alpha1.ReasonSecretConflict, fmt.Sprintf(
			"Secret %s/%s exists and is not this StreamAccess's (no controller reference to it): the operator does not overwrite it; delete it, or set spec.secretName to another name", a.Namespace, secretName)}, nil
	}
	rotate := a.Annotations[AnnotationRotateToken]
	rotatedFor := ""
	var token string
	if ref := a.Spec.TokenFrom; ref != nil {
		user, err := getSecret(ctx, r.APIReader, a.Namespace, ref.SecretKeyRef.Name)
		switch {
		case err != nil:
			return out, nil, err
		case user == nil:
			return out, &denial{streamsv1alpha1.ReasonTokenSecretNotFound, fmt.Sprintf(
				"spec.tokenFrom: Secret %s/%s does not exist: no token is granted until it does", a.Namespace, ref.SecretKeyRef.Name)}, nil
		}
		v, ok := user.Data[ref.SecretKeyRef.Key]
		if !ok {
			return out, &denial{streamsv1alpha1.ReasonTokenInvalid, fmt.Sprintf(
				"spec.tokenFrom: Secret %s/%s has no key %s", a.Namespace, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)}, nil
		}
		token = resources.NormalizeUserToken(v)
		if err := resources.ValidateAccessToken(token); err != nil {
			return out, &denial{streamsv1alpha1.ReasonTokenInvalid, fmt.Sprintf(
				"spec.tokenFrom: Secret %s/%s, key %s: %v", a.Namespace, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key, err)}, nil
		}
	} else {
		// The token in force: the Secret's, else the access Secret's (the
		// application's Secret deleted by hand), else a new one. A
		// rotate-token value not acted on yet mints a new one — unless the
		// Secret already holds the token minted for it (the status write
		// after it failed).
		due := rotate != "" && rotate != a.Status.RotateToken
		if existing != nil {
			rotatedFor = existing.Annotations[resources.AccessRotatedAnnotation]
			if due && rotatedFor == rotate {
				due = false
			}
			if t := string(existing.Data[resources.AccessTokenKey]); !due && resources.ValidateAccessToken(t) == nil {
				token = t
			}
		}
		if token == "" && !due {
			acc, err := getSecret(ctx, r.APIReader, c.Namespace, resources.AccessTokensSecretName(c))
			if err != nil {
				return out, nil, err
			}
			if acc != nil && metav1.IsControlledBy(acc, c) {
				if _, t, ok := resources.ParseAccessTokenFile(acc.Data[tokenName]); ok {
					token = t
				}
			}
		}
		if token == "" {
			if token, err = newToken(); err != nil {
				return out, nil, err
			}
			out.minted, out.rotated = true, due && a.Status.TokenName != ""
			if due {
				rotatedFor = rotate
			}
		}
	}
	var ca []byte
	if t := c.Spec.TLS; t != nil {
		s, err := getSecret(ctx, r.APIReader, c.Namespace, t.SecretName)
		if err != nil {
			return out, nil, err
		}
		if s != nil {
			ca = s.Data[resources.CAKey]
		}
	}
	secretToken := token
	if a.Spec.TokenFrom != nil {
		secretToken = "" // the application reads its own Secret
	}
	want := resources.AccessSecret(a, c, resources.AccessSecretParams{Token: secretToken, Items: items, CA: ca, RotatedFor: rotatedFor})
	// The application's Secret first: a token is granted only once the
	// application can have it, and a rotation's new token is in the
	// Secret before the old one is refused.
	if err := r.writeSecret(ctx, existing, want); err != nil {
		return out, nil, err
	}
	if err := r.putToken(ctx, c, tokenName, resources.AccessTokenFile(items, token)); err != nil {
		var d *denial
		if errors.As(err, &d) {
			return out, d, nil
		}
		return out, nil, err
	}
	return out, nil, nil
}

// writeSecret creates want, or updates existing (the StreamAccess's own)
// to it when its data, labels, annotations or owner differ. Optimistic
// locking: a concurrent change is a Conflict, retried.
func (r *StreamAccessReconciler) writeSecret(ctx context.Context, existing, want *corev1.Secret) error {
	if existing == nil {
		return r.Client.Create(ctx, want)
	}
	next := existing.DeepCopy()
	next.Data = want.Data
	next.Type = want.Type
	next.OwnerReferences = want.OwnerReferences
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	maps.Copy(next.Labels, want.Labels)
	next.Annotations = maps.Clone(existing.Annotations)
	delete(next.Annotations, resources.AccessRotatedAnnotation)
	if v, ok := want.Annotations[resources.AccessRotatedAnnotation]; ok {
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[resources.AccessRotatedAnnotation] = v
	}
	// Semantic equality: an empty map is a nil one.
	if equality.Semantic.DeepEqual(existing, next) {
		return nil
	}
	return r.Client.Update(ctx, next)
}

// putToken sets the StreamAccess's key of the cluster's access Secret to
// value, creating the Secret (owned by the cluster) when it is missing.
// One key per StreamAccess, each written with a merge patch of that key
// alone, so that StreamAccesses reconciled at once never overwrite each
// other's.
func (r *StreamAccessReconciler) putToken(ctx context.Context, c *streamsv1alpha1.StreamCluster, key string, value []byte) error {
	s, err := getSecret(ctx, r.APIReader, c.Namespace, resources.AccessTokensSecretName(c))
	if err != nil {
		return err
	}
	if s == nil {
		want := resources.AccessTokensSecret(c)
		want.Data = map[string][]byte{key: value}
		if err := r.Client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Created by another StreamAccess since: add to it.
				return apierrors.NewConflict(corev1.Resource("secrets"), want.Name, err)
			}
			return err
		}
		return nil
	}
	if !metav1.IsControlledBy(s, c) {
		return &denial{streamsv1alpha1.ReasonSecretConflict, fmt.Sprintf(
			"Secret %s/%s exists and is not the operator's (no controller reference to StreamCluster %s): the operator keeps the StreamAccesses' tokens there; delete or rename it",
			c.Namespace, s.Name, c.Name)}
	}
	if bytes.Equal(s.Data[key], value) {
		return nil
	}
	return r.patchKey(ctx, s, key, base64.StdEncoding.EncodeToString(value))
}

// revoke removes the key from the cluster's access Secret and reports
// whether it was there. An access Secret that is missing or not the
// operator's holds nothing of the StreamAccess's.
func (r *StreamAccessReconciler) revoke(ctx context.Context, c *streamsv1alpha1.StreamCluster, key string) (bool, error) {
	s, err := getSecret(ctx, r.APIReader, c.Namespace, resources.AccessTokensSecretName(c))
	if err != nil || s == nil || !metav1.IsControlledBy(s, c) {
		return false, err
	}
	if _, ok := s.Data[key]; !ok {
		return false, nil
	}
	if err := r.patchKey(ctx, s, key, nil); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, nil
}

// patchKey sets (value base64) or removes (nil) one key of a Secret's data
// with a JSON merge patch.
func (r *StreamAccessReconciler) patchKey(ctx context.Context, s *corev1.Secret, key string, value any) error {
	body, err := json.Marshal(map[string]any{"data": map[string]any{key: value}})
	if err != nil {
		return err
	}
	return r.Client.Patch(ctx, s, client.RawPatch(types.MergePatchType, body))
}

// finalize removes a deleted StreamAccess's token from the cluster's
// access Secret, then drops the finalizer; its own Secret, which it owns,
// goes with it. It never blocks for good: a cluster that is gone (or
// going: its access Secret goes with it) or in a namespace the operator
// does not watch lets it go at once; failures to remove the key are
// retried with backoff. A namespace the cluster does not admit (any
// more) still has its key removed: taking a token away is always allowed.
func (r *StreamAccessReconciler) finalize(ctx context.Context, a *streamsv1alpha1.StreamAccess) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(a, AccessFinalizer) {
		return ctrl.Result{}, nil
	}
	tokenName := resources.AccessTokenName(a.Namespace, a.Name)
	var c streamsv1alpha1.StreamCluster
	switch err := r.Client.Get(ctx, accessClusterKey(a), &c); {
	case apierrors.IsNotFound(err), outsideCache(err):
	case err != nil:
		return ctrl.Result{}, err
	case !c.DeletionTimestamp.IsZero():
		// The access Secret goes with the cluster.
	default:
		removed, err := r.revoke(ctx, &c, tokenName)
		if err != nil {
			return requeueOnConflict(err)
		}
		if removed {
			event(r.Recorder, a, eventNormal, "TokenRevoked", "Revoke",
				"token %s removed from Secret %s/%s: the brokers refuse it once their token volume syncs", tokenName, c.Namespace, resources.AccessTokensSecretName(&c))
		}
	}
	if _, err := patchObject(ctx, r.Client, a, func(a *streamsv1alpha1.StreamAccess) {
		controllerutil.RemoveFinalizer(a, AccessFinalizer)
	}); client.IgnoreNotFound(err) != nil {
		return requeueOnConflict(err)
	}
	return ctrl.Result{}, nil
}

// accessClusterKey is the StreamCluster a StreamAccess names.
func accessClusterKey(a *streamsv1alpha1.StreamAccess) client.ObjectKey {
	return client.ObjectKey{Namespace: a.ClusterNamespace(), Name: a.Spec.ClusterRef.Name}
}

// SetupWithManager registers the controller and its indexes.
func (r *StreamAccessReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
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
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &streamsv1alpha1.StreamAccess{}, accessClusterIndex, func(o client.Object) []string {
		key := accessClusterKey(o.(*streamsv1alpha1.StreamAccess))
		return []string{clusterRefIndexValue(key.Namespace, key.Name)}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &streamsv1alpha1.StreamAccess{}, accessCrossNamespaceIndex, func(o client.Object) []string {
		if a := o.(*streamsv1alpha1.StreamAccess); a.ClusterNamespace() != a.Namespace {
			return []string{a.Namespace}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &streamsv1alpha1.StreamAccess{}, accessTokenFromIndex, func(o client.Object) []string {
		if a := o.(*streamsv1alpha1.StreamAccess); a.Spec.TokenFrom != nil {
			return []string{a.Spec.TokenFrom.SecretKeyRef.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("streamaccess").
		For(&streamsv1alpha1.StreamAccess{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&streamsv1alpha1.StreamCluster{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfCluster),
			builder.WithPredicates(clusterAccessChanged{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfNamespace),
			builder.OnlyMetadata, builder.WithPredicates(namespaceLabelsChanged{})).
		// The StreamAccess's own Secret, a tokenFrom Secret, a cluster's
		// TLS Secret (ca.crt): metadata only, as for the clusters.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfSecret), builder.OnlyMetadata).
		// A cluster's access Secret deleted by hand: every token is put
		// back. Its updates (each StreamAccess's own write) are not
		// mapped: they would reconcile every StreamAccess of the cluster
		// once per StreamAccess.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfAccessSecret), builder.OnlyMetadata,
			builder.WithPredicates(deletedOnly{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.Options.StreamConcurrency,
			RateLimiter:             rateLimiter(r.Options),
			SkipNameValidation:      &r.Options.SkipNameValidation,
		}).
		Complete(r)
}

// accessesOfCluster maps a StreamCluster to the StreamAccesses naming it.
func (r *StreamAccessReconciler) accessesOfCluster(ctx context.Context, o client.Object) []ctrl.Request {
	return r.list(ctx, client.MatchingFields{accessClusterIndex: clusterRefIndexValue(o.GetNamespace(), o.GetName())})
}

// accessesOfNamespace maps a namespace to its StreamAccesses naming a
// cluster elsewhere (the only ones its labels admit or refuse).
func (r *StreamAccessReconciler) accessesOfNamespace(ctx context.Context, o client.Object) []ctrl.Request {
	return r.list(ctx, client.MatchingFields{accessCrossNamespaceIndex: o.GetName()})
}

// accessesOfSecret maps a Secret to the StreamAccess that owns it, those
// of its namespace whose tokenFrom names it, and those of the clusters of
// its namespace whose TLS Secret it is.
func (r *StreamAccessReconciler) accessesOfSecret(ctx context.Context, o client.Object) []ctrl.Request {
	var out []ctrl.Request
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "StreamAccess" && strings.HasPrefix(ref.APIVersion, streamsv1alpha1.GroupVersion.Group+"/") {
		out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
	}
	out = append(out, r.list(ctx, client.InNamespace(o.GetNamespace()), client.MatchingFields{accessTokenFromIndex: o.GetName()})...)
	var clusters streamsv1alpha1.StreamClusterList
	if err := r.Client.List(ctx, &clusters, client.InNamespace(o.GetNamespace())); err == nil {
		for i := range clusters.Items {
			if t := clusters.Items[i].Spec.TLS; t != nil && t.SecretName == o.GetName() {
				out = append(out, r.accessesOfCluster(ctx, &clusters.Items[i])...)
			}
		}
	}
	return out
}

// accessesOfAccessSecret maps a cluster's access Secret to the
// StreamAccesses of that cluster.
func (r *StreamAccessReconciler) accessesOfAccessSecret(ctx context.Context, o client.Object) []ctrl.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "StreamCluster" || o.GetName() != ref.Name+"-access-tokens" {
		return nil
	}
	return r.list(ctx, client.MatchingFields{accessClusterIndex: clusterRefIndexValue(o.GetNamespace(), ref.Name)})
}

func (r *StreamAccessReconciler) list(ctx context.Context, opts ...client.ListOption) []ctrl.Request {
	var list streamsv1alpha1.StreamAccessList
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing StreamAccesses")
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// clusterAccessChanged passes a StreamCluster's creation, deletion, and
// the updates that change what its StreamAccesses get: spec.auth set or
// removed, the namespaces it admits, TLS (the Secrets' ca.crt and url),
// its endpoint.
type clusterAccessChanged struct{ predicate.Funcs }

func (clusterAccessChanged) Create(crevent.CreateEvent) bool   { return true }
func (clusterAccessChanged) Delete(crevent.DeleteEvent) bool   { return true }
func (clusterAccessChanged) Generic(crevent.GenericEvent) bool { return false }
func (clusterAccessChanged) Update(e crevent.UpdateEvent) bool {
	oldC, ok1 := e.ObjectOld.(*streamsv1alpha1.StreamCluster)
	newC, ok2 := e.ObjectNew.(*streamsv1alpha1.StreamCluster)
	if !ok1 || !ok2 {
		return false
	}
	return (oldC.Spec.Auth == nil) != (newC.Spec.Auth == nil) ||
		!equality.Semantic.DeepEqual(oldC.Spec.AllowedNamespaces, newC.Spec.AllowedNamespaces) ||
		!equality.Semantic.DeepEqual(oldC.Spec.TLS, newC.Spec.TLS) ||
		oldC.Spec.Service.Port != newC.Spec.Service.Port ||
		oldC.DeletionTimestamp.IsZero() != newC.DeletionTimestamp.IsZero()
}

// deletedOnly passes deletions only.
type deletedOnly struct{ predicate.Funcs }

func (deletedOnly) Create(crevent.CreateEvent) bool   { return false }
func (deletedOnly) Delete(crevent.DeleteEvent) bool   { return true }
func (deletedOnly) Update(crevent.UpdateEvent) bool   { return false }
func (deletedOnly) Generic(crevent.GenericEvent) bool { return false }

// pruneAccessTokens removes from c's access Secret the keys of
// StreamAccesses that no longer exist or name another cluster: one whose
// finalizer was removed by hand, or that was deleted while no operator
// ran its finalizer, must not leave a token in force. A key is kept when
// the cache knows a StreamAccess naming c by that name; otherwise the
// apiserver is asked (a StreamAccess created since the cache was filled
// keeps its key), so steady state costs no request. The StreamCluster
// controller calls it at every reconcile of a cluster with spec.auth (a
// change of the access Secret is one).
func pruneAccessTokens(ctx context.Context, cl client.Client, rd client.Reader, c *streamsv1alpha1.StreamCluster) (removed []string, err error) {
	s, err := getSecret(ctx, rd, c.Namespace, resources.AccessTokensSecretName(c))
	if err != nil || s == nil || !metav1.IsControlledBy(s, c) || len(s.Data) == 0 {
		return nil, err
	}
	var list streamsv1alpha1.StreamAccessList
	if err := cl.List(ctx, &list, client.MatchingFields{accessClusterIndex: clusterRefIndexValue(c.Namespace, c.Name)}); err != nil {
		// No index (the StreamAccess controller is not set up): nothing
		// is pruned rather than everything.
		return nil, nil
	}
	known := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		known[resources.AccessTokenName(list.Items[i].Namespace, list.Items[i].Name)] = true
	}
	for key := range s.Data {
		if known[key] {
			continue
		}
		ns, name, ok := strings.Cut(strings.TrimPrefix(key, resources.AccessTokenPrefix), ".")
		if !ok || !strings.HasPrefix(key, resources.AccessTokenPrefix) {
			continue // not a StreamAccess's key: left alone
		}
		var a streamsv1alpha1.StreamAccess
		switch err := rd.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &a); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return removed, err
		case accessClusterKey(&a) != client.ObjectKeyFromObject(c):
		default:
			continue
		}
		body, err := json.Marshal(map[string]any{"data": map[string]any{key: nil}})
		if err != nil {
			return removed, err
		}
		if err := cl.Patch(ctx, s, client.RawPatch(types.MergePatchType, body)); err != nil {
			return removed, client.IgnoreNotFound(err)
		}
		removed = append(removed, key)
	}
	return removed, nil
}

// clusterOfAccess maps a StreamAccess to the StreamCluster it names.
func clusterOfAccess(_ context.Context, o client.Object) []ctrl.Request {
	a, ok := o.(*streamsv1alpha1.StreamAccess)
	if !ok {
		return nil
	}
	return []ctrl.Request{{NamespacedName: accessClusterKey(a)}}
}
