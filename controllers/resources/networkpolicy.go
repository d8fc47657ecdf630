package resources

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// LabelNamespaceName is the label the apiserver sets on every namespace
// to its name: a namespaceSelector of one namespace.
const LabelNamespaceName = "kubernetes.io/metadata.name"

// NetworkPolicyName is the brokers' NetworkPolicy.
func NetworkPolicyName(c *streamsv1alpha1.StreamCluster) string { return c.Name + "-brokers" }

// NetworkPolicy builds the brokers' ingress policy, or nil when
// spec.networkPolicy does not enable one. The client port admits the pods
// of the selected namespaces (the cluster's own when none are), the
// operator's namespace (its admin calls; "" when it does not run in a
// cluster), spec.networkPolicy.from, and the brokers themselves (they
// forward requests to a stream's owner); the peer port admits only the
// cluster's own brokers. Egress is left alone.
func NetworkPolicy(c *streamsv1alpha1.StreamCluster, operatorNamespace string) *networkingv1.NetworkPolicy {
	np := c.Spec.NetworkPolicy
	if np == nil || !np.Enabled {
		return nil
	}
	brokers := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c)}}
	namespaces := &metav1.LabelSelector{MatchLabels: map[string]string{LabelNamespaceName: c.Namespace}}
	if np.NamespaceSelector != nil {
		namespaces = np.NamespaceSelector.DeepCopy()
	}
	clients := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: namespaces}}
	if operatorNamespace != "" {
		clients = append(clients, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelNamespaceName: operatorNamespace}},
		})
	}
	for _, p := range np.From {
		clients = append(clients, *p.DeepCopy())
	}
	clients = append(clients, brokers)
	port := func(name string) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString(name))}}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: objectMeta(c, NetworkPolicyName(c)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: port(ClientPortName), From: clients},
				{Ports: port(PeerPortName), From: []networkingv1.NetworkPolicyPeer{brokers}},
			},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }
