package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picomq/picomq/controllers/resources"
)

// CacheOptions are the manager's informer settings for these controllers:
// limited to namespaces (all when empty), and, for the kinds the operator
// owns and for the broker pods, to the objects it labelled, so that the
// manager does not cache every ConfigMap, Service, Role or Pod of the
// cluster. Secrets are not cached at all: the controller watches their
// metadata only and reads the few it needs from the apiserver. Namespaces
// are cluster-scoped, so the namespace list does not limit them: their
// metadata is cached whole, for the labels that admit Streams to a
// cluster of another namespace. A Stream and its cluster in two namespaces
// need both in the list.
func CacheOptions(namespaces []string) cache.Options {
	owned := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedByValue})}
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&appsv1.StatefulSet{}:           owned,
		&corev1.Service{}:               owned,
		&corev1.ConfigMap{}:             owned,
		&corev1.ServiceAccount{}:        owned,
		&rbacv1.Role{}:                  owned,
		&rbacv1.RoleBinding{}:           owned,
		&policyv1.PodDisruptionBudget{}: owned,
		&networkingv1.NetworkPolicy{}:   owned,
		// The broker pods carry the StatefulSet template's labels.
		&corev1.Pod{}: owned,
	}}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
