package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccessScope is what a StreamAccess's token may do on the streams its
// prefixes cover: read (reads, tails, listings) or write (appends,
// creates, closes, signing read URLs). Never admin: a tenant does not
// govern the cluster.
// +kubebuilder:validation:Enum=read;write
type AccessScope string

const (
	// AccessRead is the broker's read scope, limited to the prefixes.
	AccessRead AccessScope = "read"
	// AccessWrite is the broker's write scope, limited to the prefixes.
	AccessWrite AccessScope = "write"
)

// StreamAccessSpec is a bearer token an application asks a StreamCluster
// for: limited to scopes (read, write) on the streams under prefixes,
// written to a Secret in the application's namespace.
//
// +kubebuilder:validation:XValidation:rule="has(self.secretName) == has(oldSelf.secretName)",message="secretName cannot be added or removed after creation: pods mount that Secret; create another StreamAccess instead"
type StreamAccessSpec struct {
	// ClusterRef names the StreamCluster whose brokers accept the token:
	// in this namespace, or in clusterRef.namespace when that cluster's
	// spec.allowedNamespaces admits this one. The cluster must have
	// spec.auth. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterRef is immutable: a token belongs to one cluster"
	ClusterRef ClusterReference `json:"clusterRef"`

	// Scopes are what the token may do on the streams its prefixes cover:
	// read, write, or both. Each scope is granted on every prefix.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	Scopes []AccessScope `json:"scopes"`

	// Prefixes are the streams the token covers: a stream name ending in
	// '/' covers the names under it (shop/ covers shop/orders and
	// shop/eu/orders, not shop or shopping/x); one without covers that one
	// stream. Segments of letters, digits, '.', '_' and '-'; no empty, '.'
	// or '..' segment.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9._-]+(/[a-zA-Z0-9._-]+)*/?$`
	// +kubebuilder:validation:items:XValidation:rule="!self.split('/').exists(s, s == '.' || s == '..')",message="prefix segments '.' and '..' are not allowed"
	// +kubebuilder:validation:items:XValidation:rule="self.endsWith('/') || size(self) <= 255",message="a prefix names a stream: 255 characters at most, before its trailing '/'"
	// +listType=set
	Prefixes []string `json:"prefixes"`

	// SecretName is the Secret the operator writes in this namespace,
	// owned by this StreamAccess: token (unless tokenFrom is set), scopes
	// (the token's scope items as the brokers read them), url (the
	// cluster's client Service) and, when the cluster has TLS, ca.crt.
	// Defaults to metadata.name. Immutable.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="secretName is immutable: pods mount that Secret; create another StreamAccess instead"
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// TokenFrom takes the token from a Secret you manage in this namespace
	// (External Secrets, Vault...) instead of one the operator mints. The
	// brokers accept it while that Secret holds it: change the value to
	// rotate it. The operator then writes no token into secretName, only
	// scopes, url and ca.crt.
	// +optional
	TokenFrom *TokenSource `json:"tokenFrom,omitempty"`
}

// TokenSource says where a StreamAccess's token comes from.
type TokenSource struct {
	// SecretKeyRef is a key of a Secret in the StreamAccess's namespace.
	// Its value is the token: 16 to 4096 bytes, no white space, ':' or ','
	// (a trailing newline is dropped).
	SecretKeyRef SecretKeySelector `json:"secretKeyRef"`
}

// SecretKeySelector names a key of a Secret in the same namespace.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key of the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// StreamAccessStatus is what the operator did with a StreamAccess.
type StreamAccessStatus struct {
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Cluster is the StreamCluster ("namespace/name") whose brokers hold
	// the token, once it accepted this StreamAccess.
	// +optional
	Cluster string `json:"cluster,omitempty"`

	// SecretName is the Secret in this namespace the operator wrote.
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// TokenName is the token's name on the brokers (its file in their
	// token directory, what their logs show): access.<namespace>.<name>.
	// +optional
	TokenName string `json:"tokenName,omitempty"`

	// RotateToken is the value of the streams.picomq.io/rotate-token
	// annotation the operator last acted on: a different value mints a
	// new token.
	// +optional
	RotateToken string `json:"rotateToken,omitempty"`
}

// StreamAccess is a bearer token limited to scopes and stream prefixes on
// a StreamCluster, written to a Secret in the application's namespace:
// access as a resource, granted by the cluster's allowedNamespaces.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sacc,categories=picomq
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 182",message="metadata.name is at most 182 characters: the token's name on the brokers is access.<namespace>.<name>, a Secret key of 253 at most"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.tokenFrom) || self.spec.tokenFrom.secretKeyRef.name != (has(self.spec.secretName) ? self.spec.secretName : self.metadata.name)",message="tokenFrom names the Secret the operator writes (spec.secretName, default metadata.name): keep your token in another Secret"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Cluster Namespace",type=string,JSONPath=`.spec.clusterRef.namespace`,priority=1,description="The cluster's namespace (the StreamAccess's own when empty)"
// +kubebuilder:printcolumn:name="Scopes",type=string,JSONPath=`.spec.scopes`
// +kubebuilder:printcolumn:name="Prefixes",type=string,JSONPath=`.spec.prefixes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StreamAccess struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec StreamAccessSpec `json:"spec"`
	// +optional
	Status StreamAccessStatus `json:"status,omitempty"`
}

// StreamAccessList is a list of StreamAccesses.
// +kubebuilder:object:root=true
type StreamAccessList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StreamAccess `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StreamAccess{}, &StreamAccessList{})
}
