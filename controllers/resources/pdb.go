package resources

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// PodDisruptionBudget lets voluntary evictions (node drains, cluster
// upgrades) take at most spec.podDisruptionBudget.maxUnavailable brokers at
// once (default 1), so the metadata log keeps its quorum.
func PodDisruptionBudget(c *streamsv1alpha1.StreamCluster) *policyv1.PodDisruptionBudget {
	maxUnavailable := int32(1)
	if m := c.Spec.PodDisruptionBudget.MaxUnavailable; m != nil {
		maxUnavailable = *m
	}
	mu := intstr.FromInt32(maxUnavailable)
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   typeMeta("policy/v1", "PodDisruptionBudget"),
		ObjectMeta: objectMeta(c, PodDisruptionBudgetName(c)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &mu,
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
		},
	}
}
