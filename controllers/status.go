package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// conflictRetry is how soon a reconcile whose write lost an
// optimistic-locking race runs again (against the newer object).
const conflictRetry = 200 * time.Millisecond

// patchStatus writes the status that txs make of a copy of obj, when it
// differs from obj's, as a merge patch of the status subresource carrying
// obj's resourceVersion: a concurrent writer makes it fail with a Conflict
// rather than be overwritten. On success obj is the patched object.
//
// txs run on a copy of obj as the reconcile read it, not on a fresh read:
// the status they compute describes what this reconcile observed of that
// version. When it lost the race (a Conflict, see requeueOnConflict), the
// reconcile that won has written its own status, and this one runs again
// against the newer object instead of writing its stale view over it.
func patchStatus[T object[T]](ctx context.Context, c client.Client, obj T, txs ...func(T)) (written bool, err error) {
	return patchWithOptimisticLock(obj, txs, func(patched client.Object, p client.Patch) error {
		return c.Status().Patch(ctx, patched, p)
	})
}

// patchObject is patchStatus for the object itself (its metadata: the
// finalizers).
func patchObject[T object[T]](ctx context.Context, c client.Client, obj T, txs ...func(T)) (written bool, err error) {
	return patchWithOptimisticLock(obj, txs, func(patched client.Object, p client.Patch) error {
		return c.Patch(ctx, patched, p)
	})
}

// object is an API object that copies itself into another of its type
// (every generated API type does).
type object[T any] interface {
	client.Object
	DeepCopyInto(T)
}

func patchWithOptimisticLock[T object[T]](obj T, txs []func(T), patch func(client.Object, client.Patch) error) (bool, error) {
	patched := obj.DeepCopyObject().(T)
	for _, tx := range txs {
		tx(patched)
	}
	if equality.Semantic.DeepEqual(obj, patched) {
		return false, nil
	}
	if err := patch(patched, client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, err
	}
	patched.DeepCopyInto(obj)
	return true, nil
}

// requeueOnConflict is what a reconcile returns when a write failed with
// err: a Conflict (the object changed since it was read: an
// optimistic-locking race lost, or a child's precondition failed) runs the
// reconcile again soon against the newer version, without the error
// backoff and without logging an error; anything else is the error.
func requeueOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}
