package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StreamSpec is a named stream a user asks a StreamCluster to keep.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.ttl) && has(self.expiresAt))",message="set ttl or expiresAt, not both: one is a sliding lifetime, the other an absolute one"
// +kubebuilder:validation:XValidation:rule="has(self.name) == has(oldSelf.name)",message="name cannot be added or removed after creation: it is the stream's identity on the broker"
type StreamSpec struct {
	// ClusterRef names the StreamCluster that keeps the stream: in this
	// namespace, or in clusterRef.namespace when that cluster's
	// spec.allowedNamespaces admits this one. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterRef is immutable: a stream cannot move to another cluster"
	ClusterRef ClusterReference `json:"clusterRef"`

	// Name is the stream's path name on the broker, e.g. logs/api/prod: one to
	// 255 characters, segments of letters, digits, '.', '_' and '-' separated
	// by '/', no empty, '.' or '..' segment, no leading or trailing slash.
	// Defaults to metadata.name. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+(/[a-zA-Z0-9._-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '.' || s == '..')",message="name segments '.' and '..' are not allowed"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="name is immutable: it is the stream's identity on the broker"
	// +optional
	Name string `json:"name,omitempty"`

	// ContentType is the media type of the stream's records, as the Durable
	// Streams protocol reports it. Immutable.
	// +kubebuilder:default="application/octet-stream"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="contentType is immutable: records already written carry it"
	// +optional
	ContentType string `json:"contentType,omitempty"`

	// TTL is a sliding lifetime: the stream is deleted once it has been idle
	// (no read or write) this long: 0 (none) or at least 1s, as the broker
	// counts it in whole seconds. Exclusive with expiresAt.
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) == duration('0s') || duration(self) >= duration('1s')",message="ttl must be 0 (none) or at least 1s: the broker counts a stream's idle lifetime in whole seconds"
	// +optional
	TTL *Duration `json:"ttl,omitempty"`

	// ExpiresAt is an absolute lifetime: the stream is deleted at this time.
	// Exclusive with ttl.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// StreamPolicy: partitions, limits, retention, backpressure and
	// compaction.
	StreamPolicy `json:",inline"`

	// DeletionPolicy says what deleting this resource does to the stream on
	// the broker: Delete removes it and its data, Retain leaves it.
	// +kubebuilder:default=Delete
	// +kubebuilder:validation:Enum=Delete;Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// ClusterReference names a StreamCluster, in the Stream's namespace or
// another.
type ClusterReference struct {
	// Name of the StreamCluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the StreamCluster; empty: the Stream's own. A cluster in
	// another namespace keeps the Stream only if its
	// spec.allowedNamespaces admits the Stream's namespace (Ready False,
	// reason NamespaceNotAllowed, otherwise).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// DeletionPolicy says what happens to a broker stream when its Stream
// resource is deleted.
type DeletionPolicy string

const (
	// DeletionPolicyDelete deletes the stream and its data on the broker.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain leaves the stream on the broker.
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// PartitionState is where a partition's internal stream is in its life on
// the brokers.
// +kubebuilder:validation:Enum=NotOpened;Open;Closed
type PartitionState string

const (
	// PartitionNotOpened: no broker has opened the partition yet (nothing
	// was appended to or read from it); it has no epoch and no owner, and
	// its first use opens it.
	PartitionNotOpened PartitionState = "NotOpened"
	// PartitionOpen: the partition is open on its owner, which takes its
	// appends.
	PartitionOpen PartitionState = "Open"
	// PartitionClosed: the partition was opened before and is open on no
	// broker now (its owner restarted or let it go); its next use opens it
	// again, at a higher epoch.
	PartitionClosed PartitionState = "Closed"
)

// PartitionStatus is one partition as the broker reports it.
type PartitionStatus struct {
	// Partition is the partition's index, from 0.
	Partition int32 `json:"partition"`
	// InternalID is the broker's internal stream id behind the partition.
	InternalID int64 `json:"internalID"`
	// State is NotOpened (never used yet: no epoch, no owner), Open (open on
	// its owner) or Closed (opened before, open on no broker now).
	State PartitionState `json:"state"`
	// Epoch counts the openings of the partition's internal stream: each
	// opening fences the writer of the one before. Absent until the
	// partition is first opened.
	// +optional
	Epoch *int64 `json:"epoch,omitempty"`
	// Owner is the broker that opened the partition last, which its appends
	// go through while it is Open. Absent until the partition is first
	// opened.
	// +optional
	Owner string `json:"owner,omitempty"`
	// Start is the first offset still readable.
	Start int64 `json:"start"`
	// End is the offset the next record will take.
	End int64 `json:"end"`
	// LocalBytes is what the partition's retained data takes on the
	// brokers' disks (one copy counted); TieredBytes what of it is in
	// object storage. A segment uploaded and still kept locally counts in
	// both.
	// +optional
	LocalBytes int64 `json:"localBytes,omitempty"`
	// +optional
	TieredBytes int64 `json:"tieredBytes,omitempty"`
}

// StreamStatus is what the operator observed of the stream on its broker.
type StreamStatus struct {
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the latest spec generation the operator fully
	// applied to the broker's stream. While a change is being applied,
	// retried or refused it stays below metadata.generation; the Ready
	// condition, whose own observedGeneration is the generation it
	// describes, says why.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// AppliedPolicy is the policy the operator last set on the broker's
	// stream (or found there as asked), in the admin API's JSON with the
	// defaults filled in. A broker policy that differs from it was changed
	// on the broker, not through this resource: that drift is set back, with
	// a Warning event.
	// +optional
	AppliedPolicy string `json:"appliedPolicy,omitempty"`

	// Partitions describes every partition of the stream.
	// +listType=map
	// +listMapKey=partition
	// +optional
	Partitions []PartitionStatus `json:"partitions,omitempty"`

	// Closed reports that the stream refuses appends for good (a Durable
	// Streams close).
	// +optional
	Closed bool `json:"closed,omitempty"`

	// ExpiresAt is when the stream will expire, if it has a lifetime.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// LocalBytes and TieredBytes are the partitions' totals: bytes on the
	// brokers' disks (one copy) and in object storage.
	// +optional
	LocalBytes int64 `json:"localBytes,omitempty"`
	// +optional
	TieredBytes int64 `json:"tieredBytes,omitempty"`
	// LocalSize and TieredSize are the same totals for people (1.5Gi),
	// which kubectl get prints: it cannot shorten a number itself.
	// +optional
	LocalSize string `json:"localSize,omitempty"`
	// +optional
	TieredSize string `json:"tieredSize,omitempty"`
}

// Stream is a named, partitioned, durable stream on a StreamCluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=strm,categories=picomq
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Cluster Namespace",type=string,JSONPath=`.spec.clusterRef.namespace`,priority=1,description="The cluster's namespace (the Stream's own when empty)"
// +kubebuilder:printcolumn:name="Stream",type=string,JSONPath=`.spec.name`,description="The stream's name on the broker (metadata.name when empty)"
// +kubebuilder:printcolumn:name="Partitions",type=integer,JSONPath=`.spec.partitions`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Local",type=string,JSONPath=`.status.localSize`,description="Bytes on the brokers' disks (one copy)"
// +kubebuilder:printcolumn:name="Tiered",type=string,JSONPath=`.status.tieredSize`,description="Bytes in the cluster's object storage"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Stream struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec StreamSpec `json:"spec"`
	// +optional
	Status StreamStatus `json:"status,omitempty"`
}

// StreamList is a list of Streams.
// +kubebuilder:object:root=true
type StreamList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Stream `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Stream{}, &StreamList{})
}
