package controllers

import (
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// metav1IsControlledBy reports whether obj's controller reference is owner.
func metav1IsControlledBy(obj metav1.Object, owner metav1.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == owner.GetUID()
}

func statusEqual(a, b streamsv1alpha1.StreamClusterStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}
