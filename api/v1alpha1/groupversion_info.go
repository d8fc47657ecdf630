// Package v1alpha1 holds the PicoMQ API: StreamCluster (a cluster of brokers)
// and Stream (a named, partitioned stream on one of them).
// +kubebuilder:object:generate=true
// +groupName=streams.picomq.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every PicoMQ object.
	GroupVersion = schema.GroupVersion{Group: "streams.picomq.io", Version: "v1alpha1"}

	// SchemeBuilder registers the PicoMQ types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the PicoMQ types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
