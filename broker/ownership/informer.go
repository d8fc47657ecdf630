package ownership

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// startInformer watches the cluster's Leases (its namespace, its label),
// makes the informer's cache the loop's source, and stamps every change
// with this broker's clock as the event arrives, so expiry runs from when
// the change reached this broker rather than from the next period. It
// returns once the cache has synced; stop waits for the informer to end.
func (m *Manager) startInformer(ctx context.Context) (stop func(), err error) {
	selector := labels.SelectorFromSet(labels.Set{LabelCluster: m.cfg.Cluster})
	factory := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0,
		informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	inf := factory.Coordination().V1().Leases()
	informer := inf.Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.onLease(obj) },
		UpdateFunc: func(_, obj any) { m.onLease(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				m.forgetLease(l.Name)
				m.signal()
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	stop = factory.Shutdown
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		stop()
		return nil, ctx.Err()
	}
	lister := inf.Lister().Leases(m.cfg.Namespace)
	m.source = func() ([]*coordinationv1.Lease, error) { return lister.List(selector) }
	return stop, nil
}

func (m *Manager) onLease(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok && m.observeLease(l) {
		m.signal()
	}
}
