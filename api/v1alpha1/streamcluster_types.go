package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StreamClusterSpec is the cluster of brokers a user asks for.
//
// +kubebuilder:validation:XValidation:rule="!has(self.replicationFactor) || self.replicationFactor <= self.replicas",message="replicationFactor cannot exceed replicas: each copy of a stream lives on a different broker"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.tieredStorage) || has(self.tieredStorage)",message="tieredStorage cannot be removed once set: the segments already uploaded would become unreadable (the brokers read tiered data only while it is configured)"
type StreamClusterSpec struct {
	// Replicas is how many broker pods run. Lowering it drains the departing
	// brokers first, so no stream loses data.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Image is the broker container image. Defaults to the operator's own
	// image for Version.
	// +optional
	Image string `json:"image,omitempty"`

	// Version is the PicoMQ version the brokers run; the operator uses it to
	// pick a default image and to order upgrades.
	// +optional
	Version string `json:"version,omitempty"`

	// Resources are the broker container's CPU and memory requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Storage is the PersistentVolumeClaim each broker keeps its metadata log
	// and segments on.
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// ReplicationFactor is how many brokers hold a copy of every committed
	// object. Defaults to min(3, replicas); cannot exceed replicas.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ReplicationFactor *int32 `json:"replicationFactor,omitempty"`

	// Ownership tunes how brokers share streams through Lease objects.
	// +kubebuilder:default={}
	// +optional
	Ownership OwnershipSpec `json:"ownership,omitempty"`

	// Broker tunes the broker processes.
	// +kubebuilder:default={}
	// +optional
	Broker BrokerSpec `json:"broker,omitempty"`

	// Service is the client Service applications connect to.
	// +kubebuilder:default={}
	// +optional
	Service ServiceSpec `json:"service,omitempty"`

	// TLS, when set, makes the brokers serve HTTPS on the client port and
	// TLS on the peer port with the certificate in the named Secret (keys
	// tls.crt, tls.key and ca.crt, as cert-manager writes them). The probes
	// and the operator's own calls then use HTTPS, verifying the brokers
	// against ca.crt.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Auth, when set, makes the brokers require a bearer token from the named
	// Secret on every request but /healthz and /readyz. The operator adds a
	// token of its own (admin scope), kept in the Secret
	// <name>-operator-token.
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`

	// NetworkPolicy, when enabled, renders a NetworkPolicy that admits the
	// client port only from the selected namespaces (and the operator's),
	// and the peer port only from the cluster's own brokers.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// AllowedNamespaces says which namespaces' Streams this cluster keeps
	// (a Stream names a cluster elsewhere with spec.clusterRef.namespace),
	// as a Gateway's allowedRoutes.namespaces does for routes. Default:
	// its own namespace only.
	// +kubebuilder:default={}
	// +optional
	AllowedNamespaces AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// CORS says which web origins may call the brokers from a browser.
	// +optional
	CORS *CORSSpec `json:"cors,omitempty"`

	// TieredStorage, when set, makes the brokers upload sealed segments to
	// an S3-compatible bucket and read old ranges back from it, keeping
	// only recent data on their disks. It cannot be removed once set, and
	// its endpoint, bucket and prefix cannot change: the data already
	// uploaded lives there.
	// +optional
	TieredStorage *TieredStorageSpec `json:"tieredStorage,omitempty"`

	// PodTemplate holds overrides applied last to the broker pods.
	// +optional
	PodTemplate PodOverrides `json:"podTemplate,omitempty"`

	// PodDisruptionBudget limits voluntary evictions of brokers.
	// +kubebuilder:default={}
	// +optional
	PodDisruptionBudget PodDisruptionBudgetSpec `json:"podDisruptionBudget,omitempty"`

	// Monitoring configures Prometheus scraping.
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`

	// Paused stops the operator from changing any child object of this
	// cluster; status keeps being reported.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// StorageSpec is the volume claim template of the brokers.
type StorageSpec struct {
	// StorageClassName is the StorageClass of the claims; the cluster's default
	// class when absent.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Size is the capacity requested for each broker's claim.
	// +kubebuilder:default="10Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// VolumeClaimTemplate, when set, overrides fields of the generated claim
	// spec (access modes, selector, volume mode, data source...).
	// +optional
	VolumeClaimTemplate *corev1.PersistentVolumeClaimSpec `json:"volumeClaimTemplate,omitempty"`
}

// OwnershipSpec tunes the slot Leases through which brokers own streams.
//
// The rules check the timings the brokers get, defaults included (the
// broker refuses to start otherwise): 0 < retryPeriod < renewDeadline <
// leaseDuration, where an absent renewDeadline is three quarters of
// leaseDuration and an absent retryPeriod a quarter of it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.renewDeadline) || duration(self.renewDeadline) < duration(self.leaseDuration)",message="renewDeadline must be shorter than leaseDuration, or a holder could lose its slot while still renewing it"
// +kubebuilder:validation:XValidation:rule="!has(self.retryPeriod) || !has(self.renewDeadline) || duration(self.retryPeriod) < duration(self.renewDeadline)",message="retryPeriod must be shorter than renewDeadline"
// +kubebuilder:validation:XValidation:rule="!has(self.retryPeriod) || duration(self.retryPeriod) > duration('0s')",message="retryPeriod must be positive"
// +kubebuilder:validation:XValidation:rule="(has(self.renewDeadline) && has(self.retryPeriod)) || ((has(self.retryPeriod) ? int(duration(self.retryPeriod)) : (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000) / 4) > 0 && (has(self.retryPeriod) ? int(duration(self.retryPeriod)) : (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000) / 4) < (has(self.renewDeadline) ? int(duration(self.renewDeadline)) : (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000) - (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000) / 4) && (has(self.renewDeadline) ? int(duration(self.renewDeadline)) : (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000) - (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000) / 4) < (has(self.leaseDuration) ? int(duration(self.leaseDuration)) : 4000000000))",message="with the defaults filled in (renewDeadline three quarters of leaseDuration, retryPeriod a quarter of it) the timings must keep 0 < retryPeriod < renewDeadline < leaseDuration: set renewDeadline and retryPeriod, or a longer leaseDuration"
type OwnershipSpec struct {
	// Slots is how many slot Leases streams hash onto. It cannot change after
	// creation: every stream's slot would move.
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ownership.slots is immutable: streams hash onto the slot count"
	// +optional
	Slots int32 `json:"slots,omitempty"`

	// LeaseDuration is how long a broker's slots stay its own after its
	// last renewal of its member Lease: a broker killed is replaced as
	// their owner after about this long.
	// +kubebuilder:default="4s"
	// +optional
	LeaseDuration Duration `json:"leaseDuration,omitempty"`

	// RenewDeadline is how long a holder keeps trying to renew before it
	// gives its slots up. Defaults to three quarters of leaseDuration.
	// +optional
	RenewDeadline *Duration `json:"renewDeadline,omitempty"`

	// RetryPeriod is how often brokers renew their member Lease and try to
	// take slots: each broker writes the API server once per period.
	// Defaults to a quarter of leaseDuration.
	// +optional
	RetryPeriod *Duration `json:"retryPeriod,omitempty"`
}

// BrokerSpec is the broker configuration rendered into the cluster's
// ConfigMap. Absent fields take the broker's own defaults.
type BrokerSpec struct {
	// FlushLinger is how long the group-commit flusher waits for more appends
	// before it writes a batch. 0 (the default) writes as soon as the
	// previous flush is done: batches still grow with load.
	// +optional
	FlushLinger *Duration `json:"flushLinger,omitempty"`

	// MaxBatchBytes bounds one group-commit object, from 4096 to 2^62
	// bytes (the broker's bound on a byte size).
	// +kubebuilder:validation:Minimum=4096
	// +kubebuilder:validation:XValidation:rule="self <= 4611686018427387904",message="maxBatchBytes must be at most 4611686018427387904 (2^62), the broker's bound on a byte size"
	// +optional
	MaxBatchBytes *int64 `json:"maxBatchBytes,omitempty"`

	// LongPollTimeout is how long a live read waits for new records before it
	// answers "up to date": positive (the broker's default is 1s).
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="longPollTimeout must be positive: a live read that never waits is not a long poll (the broker refuses 0s)"
	// +optional
	LongPollTimeout *Duration `json:"longPollTimeout,omitempty"`

	// DefaultStreamPolicy applies to streams created without a policy of their
	// own (for example by a Durable Streams PUT).
	// +optional
	DefaultStreamPolicy *StreamPolicy `json:"defaultStreamPolicy,omitempty"`
}

// ServiceSpec is the client Service.
type ServiceSpec struct {
	// Type is the Service type.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`

	// Annotations are added to the client Service (load balancer settings...).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// Port is the client port, for HTTP and the Durable Streams protocol.
	// +kubebuilder:default=4437
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// TLSSpec names the server certificate.
type TLSSpec struct {
	// SecretName is a kubernetes.io/tls Secret in the cluster's namespace
	// with tls.crt, tls.key and ca.crt (the CA the brokers verify each
	// other, and the operator verifies them, against). The certificate
	// must cover *.<name>-headless.<namespace>.svc (each broker) and
	// <name>.<namespace>.svc (the client Service). The brokers reload it
	// when it changes (cert-manager renewals).
	// +kubebuilder:validation:MinLength=1
	SecretName string `json:"secretName"`
}

// MetricsAuth says whether /metrics needs a token.
// +kubebuilder:validation:Enum=Open;Token
type MetricsAuth string

const (
	// MetricsAuthOpen serves /metrics to anyone who reaches the port.
	MetricsAuthOpen MetricsAuth = "Open"
	// MetricsAuthToken serves /metrics only with a token of read scope or
	// more.
	MetricsAuthToken MetricsAuth = "Token"
)

// AuthSpec names the bearer tokens clients present.
type AuthSpec struct {
	// SecretName is a Secret in the cluster's namespace with one key per
	// token: the key is the token's name (what the brokers log), the value
	// "<scopes>:<token>", scopes a comma list of read, write and admin
	// (each allows exactly what it names; admin allows everything), the
	// token at least 16 bytes: "read,write:4f9c...". Tokens added or
	// removed take effect without a restart. The key picomq-operator is
	// reserved for the operator's own token.
	// +kubebuilder:validation:MinLength=1
	SecretName string `json:"secretName"`

	// Metrics is whether /metrics needs a token (Token) or not (Open).
	// +kubebuilder:default=Open
	// +optional
	Metrics MetricsAuth `json:"metrics,omitempty"`

	// AnonymousReadPrefixes are streams anyone may read (GET and HEAD,
	// live tails included) without a token: public fan-out through a CDN.
	// Each is a stream name ending in '/' (the names under it) or not
	// (that one stream). Writes and everything else still need a token.
	// The brokers read the list at start, so changing it rolls them.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9._-]+(/[a-zA-Z0-9._-]+)*/?$`
	// +kubebuilder:validation:items:XValidation:rule="!self.split('/').exists(s, s == '.' || s == '..')",message="prefix segments '.' and '..' are not allowed"
	// +kubebuilder:validation:items:XValidation:rule="self.endsWith('/') || size(self) <= 255",message="a prefix names a stream: 255 characters at most, before its trailing '/'"
	// +listType=set
	// +optional
	AnonymousReadPrefixes []string `json:"anonymousReadPrefixes,omitempty"`

	// URLSigning gives the brokers the keys that sign and verify read
	// URLs (POST /v1/sign, picomq sign).
	// +optional
	URLSigning *URLSigningSpec `json:"urlSigning,omitempty"`
}

// URLSigningSpec names the keys of signed read URLs.
type URLSigningSpec struct {
	// SecretName is a Secret in the cluster's namespace with one key per
	// signing key: the Secret key is the key's id (letters, digits, '.',
	// '_', '-'; 64 at most; not starting with '.'), the value the key, 32
	// bytes or more. Every key verifies; the last by id signs. Mounted on
	// every broker and re-read as it changes: rotate by adding a key whose
	// id sorts last, then removing the old one once the URLs it signed
	// have expired.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
}

// NetworkPolicySpec selects who may reach the brokers.
type NetworkPolicySpec struct {
	// Enabled renders the NetworkPolicy <name>-brokers; false removes it.
	Enabled bool `json:"enabled"`

	// NamespaceSelector selects the namespaces whose pods may reach the
	// client port. Absent: the cluster's own namespace only. The
	// operator's namespace is always admitted (its admin calls).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// From are further sources admitted to the client port (a pod
	// selector, an IP block: a Prometheus elsewhere, an ingress
	// controller).
	// +listType=atomic
	// +optional
	From []networkingv1.NetworkPolicyPeer `json:"from,omitempty"`
}

// NamespacesFrom is which namespaces a StreamCluster admits Streams from.
// +kubebuilder:validation:Enum=Same;All;Selector
type NamespacesFrom string

const (
	// NamespacesFromSame admits the cluster's own namespace only.
	NamespacesFromSame NamespacesFrom = "Same"
	// NamespacesFromAll admits every namespace.
	NamespacesFromAll NamespacesFrom = "All"
	// NamespacesFromSelector admits the namespaces whose labels match
	// allowedNamespaces.selector, and the cluster's own.
	NamespacesFromSelector NamespacesFrom = "Selector"
)

// AllowedNamespaces admits Streams of other namespaces to a StreamCluster.
// The cluster's own namespace is always admitted: whoever may create
// Streams there may edit the cluster too, and its Streams kept before the
// field existed keep working.
//
// +kubebuilder:validation:XValidation:rule="(has(self.from) ? self.from : 'Same') != 'Selector' || has(self.selector)",message="allowedNamespaces.selector is required when from is Selector"
// +kubebuilder:validation:XValidation:rule="(has(self.from) ? self.from : 'Same') == 'Selector' || !has(self.selector)",message="allowedNamespaces.selector is read only when from is Selector: set from: Selector, or remove the selector"
type AllowedNamespaces struct {
	// From is Same (the cluster's namespace only), All (every namespace)
	// or Selector (the namespaces selector matches, and the cluster's
	// own).
	// +kubebuilder:default=Same
	// +optional
	From NamespacesFrom `json:"from,omitempty"`

	// Selector selects, by their labels, the namespaces admitted when
	// from is Selector. An empty selector ({}) matches every namespace.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="a matchExpressions operator is In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0))",message="In and NotIn need values; Exists and DoesNotExist take none"
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// CORSSpec is the brokers' cross-origin policy.
type CORSSpec struct {
	// AllowedOrigins are the origins allowed to call the brokers from a
	// browser: each http(s)://host[:port], lowercase as browsers send it,
	// with no path (https://app.example.com), or the single value "*" for
	// any origin. Others are refused (403 ORIGIN_NOT_ALLOWED). Empty: every
	// origin while the brokers check no token, none with spec.auth set.
	// The brokers read the list at start, so changing it rolls them.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=300
	// +kubebuilder:validation:items:XValidation:rule="self == '*' || self.matches('^https?://([a-z0-9]([a-z0-9-]*[a-z0-9])?([.][a-z0-9]([a-z0-9-]*[a-z0-9])?)*|[[][0-9a-f:.]+[]])(:[0-9]{1,5})?$')",message="an origin is http(s)://host[:port], lowercase, with no path, query or trailing slash (https://app.example.com), or '*'"
	// +kubebuilder:validation:XValidation:rule="!self.exists(o, o == '*') || size(self) == 1",message="'*' admits every origin: it must be the only entry"
	// +listType=set
	// +optional
	AllowedOrigins []string `json:"allowedOrigins,omitempty"`
}

// TieredStorageSpec is the object storage the brokers tier sealed
// segments to.
//
// +kubebuilder:validation:XValidation:rule="self.endpoint == oldSelf.endpoint",message="tieredStorage.endpoint cannot change: the segments already uploaded are there"
// +kubebuilder:validation:XValidation:rule="self.bucket == oldSelf.bucket",message="tieredStorage.bucket cannot change: the segments already uploaded are there"
// +kubebuilder:validation:XValidation:rule="(has(self.prefix) && size(self.prefix) > 0) == (has(oldSelf.prefix) && size(oldSelf.prefix) > 0) && (!has(self.prefix) || size(self.prefix) == 0 || self.prefix == oldSelf.prefix)",message="tieredStorage.prefix cannot change: the segments already uploaded are under it"
type TieredStorageSpec struct {
	// Endpoint is the S3 API's URL: http:// or https://, a host and an
	// optional port, no path or query (https://s3.example.com:9000).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*|[[][0-9a-fA-F:.]+[]])(:[0-9]{1,5})?/?$')",message="endpoint is http(s)://host[:port] with no path, query or credentials (https://s3.example.com:9000)"
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name, as S3 names it: 3 to 63 lowercase
	// letters, digits, dots and hyphens, starting and ending with a letter
	// or digit.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..') && !self.contains('.-') && !self.contains('-.')",message="a bucket name has no '..', '.-' or '-.'"
	Bucket string `json:"bucket"`

	// Region is the bucket's region, which requests are signed for.
	// +kubebuilder:default="us-east-1"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	// +optional
	Region string `json:"region,omitempty"`

	// PathStyle addresses the bucket as a path (endpoint/bucket/key)
	// rather than as a host (bucket.endpoint/key). S3-compatible servers
	// (MinIO, Ceph, Garage) usually need true.
	// +kubebuilder:default=false
	// +optional
	PathStyle bool `json:"pathStyle,omitempty"`

	// Prefix is put before every key the brokers write, so that clusters
	// can share a bucket. Empty: "<namespace>/<cluster name>/". Set, it
	// ends with '/' and does not start with one.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == '' || (self.endsWith('/') && !self.startsWith('/') && !self.contains('//'))",message="prefix ends with '/', does not start with one and has no '//' (tenants/a/)"
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// CASecret names a PEM CA bundle to verify an https endpoint with,
	// when it is not signed by a public CA.
	// +optional
	CASecret *SecretKeyRef `json:"caSecret,omitempty"`

	// CredentialsSecret names the Secret holding the access key. It is
	// mounted as files that the brokers re-read when they change, so a
	// rotated key takes effect without a restart.
	CredentialsSecret TierCredentials `json:"credentialsSecret"`

	// LocalRetainFor is how long a sealed segment stays on the brokers'
	// disks after it was uploaded, for streams that set no
	// localRetainFor of their own.
	// +kubebuilder:default="1h"
	// +optional
	LocalRetainFor *Duration `json:"localRetainFor,omitempty"`

	// LocalRetainBytes bounds each partition's uploaded bytes also kept on
	// the brokers' disks (the oldest go first), for streams that set no
	// localRetainBytes of their own. 0 is no bound.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LocalRetainBytes int64 `json:"localRetainBytes,omitempty"`

	// CacheBytes is each broker's local cache of ranges read back from the
	// bucket: at least 1Mi, the chunk the brokers read by.
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('1048575'))",message="cacheBytes must be at least 1Mi (1048576), the chunk the brokers read tiered data by"
	// +optional
	CacheBytes *resource.Quantity `json:"cacheBytes,omitempty"`

	// UploadBytesPerSecond bounds each broker's upload rate, so that
	// uploads leave the appends their disk, CPU and network; segments then
	// wait on the disks (under the headroom rule) while appends outpace
	// it. At least 64Ki; absent or 0 is no bound.
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && (quantity(string(self)).compareTo(quantity('0')) == 0 || quantity(string(self)).isGreaterThan(quantity('65535')))",message="uploadBytesPerSecond must be 0 (no bound) or at least 64Ki (65536)"
	// +optional
	UploadBytesPerSecond *resource.Quantity `json:"uploadBytesPerSecond,omitempty"`
}

// SecretKeyRef names one key of a Secret in the cluster's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret.
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// TierCredentials names the Secret with the object storage's access key.
type TierCredentials struct {
	// Name of the Secret, in the cluster's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// AccessKeyIDKey is the Secret's key holding the access key id.
	// +kubebuilder:default="accessKeyId"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	AccessKeyIDKey string `json:"accessKeyIdKey,omitempty"`
	// SecretAccessKeyKey is the Secret's key holding the secret access
	// key.
	// +kubebuilder:default="secretAccessKey"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	SecretAccessKeyKey string `json:"secretAccessKeyKey,omitempty"`
}

// PodOverrides are applied to the broker pod template after the operator's
// own settings, so they win.
type PodOverrides struct {
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// TopologySpreadConstraints replace the default spread of brokers across
	// hosts.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Annotations are added to the broker pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Labels are added to the broker pods; the operator's selector labels
	// cannot be overridden.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// PodDisruptionBudgetSpec limits voluntary evictions.
type PodDisruptionBudgetSpec struct {
	// MaxUnavailable is how many brokers may be evicted at once.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
}

// MonitoringSpec configures Prometheus scraping.
type MonitoringSpec struct {
	// ServiceMonitor creates a prometheus-operator ServiceMonitor for the
	// brokers when that CRD is installed.
	// +optional
	ServiceMonitor bool `json:"serviceMonitor,omitempty"`

	// PrometheusRule creates a prometheus-operator PrometheusRule with
	// PicoMQ's broker alerts (config/prometheus/rules, runbooks in
	// docs/runbooks.md) scoped to this cluster's brokers, as the
	// ServiceMonitor scrapes them, when that CRD is installed.
	// +optional
	PrometheusRule bool `json:"prometheusRule,omitempty"`
}

// StreamClusterStatus is what the operator observed of the cluster.
type StreamClusterStatus struct {
	// Conditions: Ready, Progressing, Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is how many broker pods exist: spec.replicas, except while
	// brokers are added or removed, and while a scale-down is held (the
	// Ready and Degraded conditions say so).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is how many broker pods are ready, of those that exist.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Endpoint is the URL clients use, through the client Service.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// ClusterID is the id of the cluster the brokers formed, as they report
	// it, recorded once and never changed after: the brokers read it
	// (PICOMQ_CLUSTER_ID, from the ConfigMap <name>-cluster-id), so a broker
	// starting on an empty data directory joins this cluster rather than
	// bootstrap another. A broker that reports another id is not counted
	// and makes the cluster Degraded (reason ClusterIDMismatch).
	// +optional
	ClusterID string `json:"clusterId,omitempty"`

	// MetadataLeader is the member leading the metadata log, as the brokers
	// report it: a member id, the broker's pod name followed by "~" and the
	// incarnation of its data directory (demo-1~3f9a2c1e), or the pod name
	// alone for a broker that does not report member ids. When the brokers
	// disagree (an election under way), the one most of them name.
	// +optional
	MetadataLeader string `json:"metadataLeader,omitempty"`

	// Voters are the members (ids as in metadataLeader) that vote in the
	// metadata log: a quorum of them must be up for writes. As the leader
	// reports them, or the first answering broker when the leader does not
	// answer.
	// +listType=atomic
	// +optional
	Voters []string `json:"voters,omitempty"`

	// NonVoters are members that replicate the metadata log without voting:
	// brokers catching up before their promotion, or beyond the odd number
	// of voters.
	// +listType=atomic
	// +optional
	NonVoters []string `json:"nonVoters,omitempty"`

	// SlotsHeld is how many slot Leases each broker holds, of those that
	// answered.
	// +listType=map
	// +listMapKey=broker
	// +optional
	SlotsHeld []BrokerSlots `json:"slotsHeld,omitempty"`

	// UnderReplicated is how many committed objects have fewer copies on
	// current members than the replication factor asks (a copy on a member
	// that was removed, or written when fewer brokers were live). It is a
	// count over the whole cluster, which every broker computes from its
	// copy of the metadata log: the leader's count (the freshest), or the
	// highest count reported when the leader did not answer — never a sum,
	// which would count each object once per broker. Absent when no broker
	// reports it.
	// +optional
	UnderReplicated *int32 `json:"underReplicated,omitempty"`

	// TieredStorage is the object storage as the brokers report it; absent
	// without spec.tieredStorage or while no broker reports it.
	// +optional
	TieredStorage *TieredStorageStatus `json:"tieredStorage,omitempty"`
}

// TieredStorageStatus is the brokers' view of the object storage.
type TieredStorageStatus struct {
	// Reachable is true when every broker that reported can reach the
	// bucket.
	Reachable bool `json:"reachable"`
	// TieredBytes is how many bytes of the cluster's streams are in the
	// bucket.
	// +optional
	TieredBytes int64 `json:"tieredBytes,omitempty"`
	// UploadsPending is how many sealed segments wait for upload, over the
	// brokers that reported.
	// +optional
	UploadsPending int64 `json:"uploadsPending,omitempty"`
	// LastError is the failure of a broker that cannot reach the bucket;
	// absent while every one can.
	// +optional
	LastError *TieredStorageError `json:"lastError,omitempty"`
}

// TieredStorageError is a broker's last object-storage failure.
type TieredStorageError struct {
	// Broker is the pod that reported it.
	Broker string `json:"broker"`
	// Code is TIER_UNREACHABLE (no answer: network, DNS, TLS) or
	// TIER_REFUSED (access denied, no such bucket, bad credentials).
	Code string `json:"code"`
	// Message is the broker's description of it.
	// +optional
	Message string `json:"message,omitempty"`
}

// BrokerSlots is one broker's share of the slots.
type BrokerSlots struct {
	// Broker is the broker pod's name.
	Broker string `json:"broker"`
	// Slots is how many slot Leases it holds.
	Slots int32 `json:"slots"`
}

// StreamCluster is a cluster of PicoMQ brokers: a StatefulSet of broker pods,
// each with a PersistentVolumeClaim, sharing streams through slot Leases and a
// replicated metadata log.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=strc,categories=picomq
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`,description="Brokers the spec asks for"
// +kubebuilder:printcolumn:name="Brokers",type=integer,JSONPath=`.status.replicas`,description="Broker pods that exist (more than desired while a scale-down is held)"
// +kubebuilder:printcolumn:name="Ready Brokers",type=integer,JSONPath=`.status.readyReplicas`,description="Broker pods that are ready"
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.metadataLeader`,priority=1,description="Member leading the metadata log"
// +kubebuilder:printcolumn:name="Under-Replicated",type=integer,JSONPath=`.status.underReplicated`,priority=1,description="Committed objects with fewer copies than the replication factor"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type StreamCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec StreamClusterSpec `json:"spec,omitempty"`
	// +optional
	Status StreamClusterStatus `json:"status,omitempty"`
}

// StreamClusterList is a list of StreamClusters.
// +kubebuilder:object:root=true
type StreamClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StreamCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StreamCluster{}, &StreamClusterList{})
}
