package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// StreamPolicy is what the broker enforces on a stream: the SDK's PolicyValue.
// Every zero or absent field has one reading — the broker's default — so an
// empty policy is a working one: one partition, records up to 1 MiB, kept
// forever, never full, never compacted, in segments of 64 MiB.
//
// +kubebuilder:validation:XValidation:rule="!has(self.blockTimeout) || duration(self.blockTimeout) == duration('0s') || (has(self.maxBytes) && self.maxBytes > 0)",message="blockTimeout needs maxBytes: it is how long an append waits for room under maxBytes"
// +kubebuilder:validation:XValidation:rule="!has(self.maxBytes) || self.maxBytes == 0 || self.maxBytes >= (has(self.maxRecordBytes) && self.maxRecordBytes > 0 ? self.maxRecordBytes : 1048576)",message="maxBytes must be 0 (unbounded) or at least maxRecordBytes (default 1048576): no record could fit below it"
type StreamPolicy struct {
	// Partitions is how many partitions the stream has. A key's partition is
	// FNV-1a of the key modulo this count, so it may grow (existing keys then
	// move) but never shrink.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="partitions may only grow: records already written stay in the partitions they were appended to"
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// MaxRecordBytes bounds one record, key and payload together; a larger
	// record is refused with RECORD_TOO_LARGE. 0 means 1048576 (1 MiB).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxRecordBytes int32 `json:"maxRecordBytes,omitempty"`

	// RetainFor is how long a record is kept after it was appended, e.g. 168h.
	// Whole segments are dropped once every record in them is older. 0 or
	// absent keeps records for good.
	// +optional
	RetainFor *Duration `json:"retainFor,omitempty"`

	// RetainBytes is how many bytes of records each partition keeps; above it
	// the oldest segments are dropped. 0 is unbounded.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RetainBytes int64 `json:"retainBytes,omitempty"`

	// MaxBytes is how many bytes the stream may hold before appends wait for
	// room (producer backpressure, for streams trimmed by their readers).
	// 0 is unbounded.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxBytes int64 `json:"maxBytes,omitempty"`

	// BlockTimeout is how long an append waits for room under maxBytes before
	// it is refused with STREAM_FULL. Needs maxBytes. 0 refuses at once.
	// +optional
	BlockTimeout *Duration `json:"blockTimeout,omitempty"`

	// SegmentBytes is the size of the segments the broker writes and the unit
	// retention releases. 0 means 67108864 (64 MiB).
	// +kubebuilder:validation:Minimum=0
	// +optional
	SegmentBytes int64 `json:"segmentBytes,omitempty"`

	// CompactAfter is how old a keyed record must be before compaction may
	// drop it in favour of a later record of its key; a tombstone (empty
	// payload) is kept one more window. 0 or absent never compacts.
	// +optional
	CompactAfter *Duration `json:"compactAfter,omitempty"`

	// Tiering is Enabled or Disabled: whether the stream's sealed segments
	// go to the cluster's object storage. Absent follows the cluster: on
	// when it has spec.tieredStorage. Enabled on a cluster without it is
	// refused (Ready False, reason TieringNotConfigured).
	// +kubebuilder:validation:Enum=Enabled;Disabled
	// +optional
	Tiering Tiering `json:"tiering,omitempty"`

	// LocalRetainFor is how long a sealed segment stays on the brokers'
	// disks after its upload. Absent or 0 follows the cluster's
	// tieredStorage.localRetainFor.
	// +optional
	LocalRetainFor *Duration `json:"localRetainFor,omitempty"`

	// LocalRetainBytes bounds each partition's uploaded bytes also kept on
	// the brokers' disks. 0 follows the cluster's
	// tieredStorage.localRetainBytes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LocalRetainBytes int64 `json:"localRetainBytes,omitempty"`
}

// Tiering says whether a stream uses the cluster's object storage.
type Tiering string

const (
	// TieringEnabled uploads the stream's sealed segments.
	TieringEnabled Tiering = "Enabled"
	// TieringDisabled keeps the stream on the brokers' disks only.
	TieringDisabled Tiering = "Disabled"
)

// Duration is a non-negative Go duration string such as "30s", "15m" or
// "168h", at most 2562047h (what a Go duration holds). It is a string in the
// API so that the CRD can check it with CEL and kubectl shows it as written.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="must be a non-negative duration such as 500ms, 30s, 15m or 168h, at most 2562047h"
type Duration string

// Parse returns the duration, or 0 for an empty one. The CRD has already
// refused malformed and negative values; a client that bypassed it gets the
// parse error.
func (d Duration) Parse() (metav1.Duration, error) {
	return parseDuration(string(d))
}
