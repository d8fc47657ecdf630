package controllers

// Tests of the status patch helper against controller-runtime's fake
// client, which checks the resourceVersion an optimistic-lock merge patch
// carries as the apiserver does.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// patchCounter is a fake client holding s that counts the patches it is
// sent, of the object and of its status.
func patchCounter(t *testing.T, s *streamsv1alpha1.Stream) (client.Client, *atomic.Int32, *atomic.Int32) {
	t.Helper()
	var patches, statusPatches atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(s).WithStatusSubresource(s).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				patches.Add(1)
				return c.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				statusPatches.Add(1)
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	return c, &patches, &statusPatches
}

func testStream() *streamsv1alpha1.Stream {
	return &streamsv1alpha1.Stream{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Generation: 2},
		Spec:       streamsv1alpha1.StreamSpec{ClusterRef: streamsv1alpha1.ClusterReference{Name: "demo"}},
	}
}

func readStream(t *testing.T, c client.Client) *streamsv1alpha1.Stream {
	t.Helper()
	var s streamsv1alpha1.Stream
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "s"}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func TestPatchStatusWritesChangesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, statusPatches := patchCounter(t, testStream())
	s := readStream(t, c)
	rv := s.ResourceVersion
	ready := metav1.Condition{Status: metav1.ConditionTrue, Reason: streamsv1alpha1.ReasonCreated, Message: "ok"}

	written, err := patchStatus(ctx, c, s, withReady(ready), withApplied(`{"partitions":1}`), func(s *streamsv1alpha1.Stream) { s.Status.Closed = true })
	if err != nil || !written {
		t.Fatalf("patchStatus = %v, %v; want written", written, err)
	}
	// The object given is the patched one, at its new resourceVersion.
	if !meta.IsStatusConditionTrue(s.Status.Conditions, streamsv1alpha1.ConditionReady) || !s.Status.Closed ||
		s.Status.ObservedGeneration != 2 || s.ResourceVersion == rv {
		t.Errorf("after the patch: status %+v, resourceVersion %s (was %s)", s.Status, s.ResourceVersion, rv)
	}
	if got := readStream(t, c); !got.Status.Closed || !meta.IsStatusConditionTrue(got.Status.Conditions, streamsv1alpha1.ConditionReady) {
		t.Errorf("stored status %+v", got.Status)
	}

	// The same changes again: nothing to write, no request.
	before := statusPatches.Load()
	written, err = patchStatus(ctx, c, s, withReady(ready), withApplied(`{"partitions":1}`), func(s *streamsv1alpha1.Stream) { s.Status.Closed = true })
	if err != nil || written {
		t.Errorf("an unchanged status: written %v, err %v", written, err)
	}
	if n := statusPatches.Load() - before; n != 0 {
		t.Errorf("%d status patches for an unchanged status", n)
	}
}

func TestPatchStatusConflictsWithANewerObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, _ := patchCounter(t, testStream())
	stale := readStream(t, c)

	// Someone else writes first.
	newer := readStream(t, c)
	newer.Status.Closed = true
	if err := c.Status().Update(ctx, newer); err != nil {
		t.Fatal(err)
	}

	staleRV := stale.ResourceVersion
	written, err := patchStatus(ctx, c, stale, withReady(metav1.Condition{Status: metav1.ConditionFalse, Reason: streamsv1alpha1.ReasonConflict, Message: "x"}))
	if !apierrors.IsConflict(err) || written {
		t.Fatalf("patch of a stale object: written %v, err %v; want a Conflict", written, err)
	}
	if stale.ResourceVersion != staleRV || len(stale.Status.Conditions) != 0 {
		t.Errorf("a failed patch changed the object given: %+v", stale)
	}
	if got := readStream(t, c); !got.Status.Closed || len(got.Status.Conditions) != 0 {
		t.Errorf("the newer status was overwritten: %+v", got.Status)
	}
	// The reconcile runs again soon, without an error (and its backoff).
	res, rerr := requeueOnConflict(err)
	if rerr != nil || res.RequeueAfter != conflictRetry {
		t.Errorf("requeueOnConflict(Conflict) = %+v, %v; want a requeue after %s", res, rerr, conflictRetry)
	}
}

func TestPatchObjectFinalizers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, patches, statusPatches := patchCounter(t, testStream())
	s := readStream(t, c)
	if written, err := patchObject(ctx, c, s, addFinalizer); err != nil || !written {
		t.Fatalf("adding the finalizer: %v %v", written, err)
	}
	if !controllerutil.ContainsFinalizer(readStream(t, c), StreamFinalizer) || !controllerutil.ContainsFinalizer(s, StreamFinalizer) {
		t.Errorf("finalizer not added")
	}
	if written, err := patchObject(ctx, c, s, addFinalizer); err != nil || written || patches.Load() != 1 {
		t.Errorf("adding it again: written %v, err %v, %d patches; want no request", written, err, patches.Load())
	}
	stale := s.DeepCopy()
	if written, err := patchObject(ctx, c, s, removeFinalizer); err != nil || !written {
		t.Fatalf("removing the finalizer: %v %v", written, err)
	}
	if _, err := patchObject(ctx, c, stale, func(s *streamsv1alpha1.Stream) { s.Annotations = map[string]string{"a": "b"} }); !apierrors.IsConflict(err) {
		t.Errorf("a patch of a stale object: %v, want a Conflict", err)
	}
	if statusPatches.Load() != 0 {
		t.Errorf("patchObject patched the status")
	}
}

func TestRequeueOnConflict(t *testing.T) {
	t.Parallel()
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "demo", errors.New("changed"))
	for _, tc := range []struct {
		err     error
		res     ctrl.Result
		wantErr bool
	}{
		{nil, ctrl.Result{}, false},
		{conflict, ctrl.Result{RequeueAfter: conflictRetry}, false},
		{errors.New("forbidden"), ctrl.Result{}, true},
		{apierrors.NewNotFound(schema.GroupResource{Resource: "streams"}, "s"), ctrl.Result{}, true},
	} {
		res, err := requeueOnConflict(tc.err)
		if res != tc.res || (err != nil) != tc.wantErr {
			t.Errorf("requeueOnConflict(%v) = %+v, %v", tc.err, res, err)
		}
	}
}
