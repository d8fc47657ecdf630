package resources

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// LeaseVerbs are what brokers do with slot Leases: find them, acquire free
// or expired ones, renew theirs. Nothing else, and nothing cluster-wide.
var LeaseVerbs = []string{"get", "list", "watch", "create", "update", "patch"}

// ServiceAccount is the identity of the broker pods.
func ServiceAccount(c *streamsv1alpha1.StreamCluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   typeMeta("v1", "ServiceAccount"),
		ObjectMeta: objectMeta(c, ServiceAccountName(c)),
		// The brokers talk to the API server (slot Leases), so they need
		// the token.
		AutomountServiceAccountToken: ptr.To(true),
	}
}

// Role lets the brokers work the slot Leases of their namespace, and
// record Events there.
func Role(c *streamsv1alpha1.StreamCluster) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "Role"),
		ObjectMeta: objectMeta(c, ServiceAccountName(c)),
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     append([]string(nil), LeaseVerbs...),
		}, {
			// A broker records an Event on its member Lease after serving
			// through an API server outage (failsafe).
			APIGroups: []string{""},
			Resources: []string{"events"},
			Verbs:     []string{"create"},
		}},
	}
}

// RoleBinding grants Role to ServiceAccount.
func RoleBinding(c *streamsv1alpha1.StreamCluster) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"),
		ObjectMeta: objectMeta(c, ServiceAccountName(c)),
		RoleRef: rbacv1.RoleRef{
			APIGroup: rbacv1.GroupName,
			Kind:     "Role",
			Name:     ServiceAccountName(c),
		},
		Subjects: []rbacv1.Subject{{
			Kind:      rbacv1.ServiceAccountKind,
			Name:      ServiceAccountName(c),
			Namespace: c.Namespace,
		}},
	}
}
