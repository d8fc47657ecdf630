package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Setup registers the controllers with mgr, sharing opts (defaults filled
// in once, so that they share the broker clients too).
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	opts = opts.withDefaults()
	if err := (&StreamClusterReconciler{Options: opts}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&StreamReconciler{Options: opts}).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	return (&StreamAccessReconciler{Options: opts}).SetupWithManager(ctx, mgr)
}
