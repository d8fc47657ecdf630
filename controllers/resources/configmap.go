package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// Keys of the broker ConfigMap. Each key is the environment variable the
// broker reads (the broker takes every flag as its PICOMQ_ variable), and
// the pod loads the whole ConfigMap with envFrom. Keys marked "cluster mode"
// are read by the clustered broker; a single-node broker ignores them.
const (
	EnvListen          = "PICOMQ_LISTEN"
	EnvDataDir         = "PICOMQ_DATA_DIR"
	EnvNodeID          = "PICOMQ_NODE_ID"
	EnvFlushLinger     = "PICOMQ_FLUSH_LINGER"
	EnvMaxBatchBytes   = "PICOMQ_MAX_BATCH_BYTES"
	EnvLongPollTimeout = "PICOMQ_LONG_POLL_TIMEOUT"

	EnvCluster             = "PICOMQ_CLUSTER"               // cluster mode: slot Lease names <cluster>-slot-<n>
	EnvNamespace           = "PICOMQ_NAMESPACE"             // cluster mode: where the slot Leases live
	EnvPeerListen          = "PICOMQ_PEER_LISTEN"           // cluster mode
	EnvPeerService         = "PICOMQ_PEER_SERVICE"          // cluster mode: headless Service DNS name
	EnvSlots               = "PICOMQ_SLOTS"                 // cluster mode
	EnvLeaseDuration       = "PICOMQ_LEASE_DURATION"        // cluster mode
	EnvLeaseRenewDeadline  = "PICOMQ_LEASE_RENEW_DEADLINE"  // cluster mode
	EnvLeaseRetryPeriod    = "PICOMQ_LEASE_RETRY_PERIOD"    // cluster mode
	EnvReplicationFactor   = "PICOMQ_REPLICATION_FACTOR"    // cluster mode
	EnvClusterID           = "PICOMQ_CLUSTER_ID"            // cluster mode: in ClusterIDConfigMap, not here
	EnvDefaultStreamPolicy = "PICOMQ_DEFAULT_STREAM_POLICY" // JSON, the admin API's policy shape
	EnvTLSCertFile         = "PICOMQ_TLS_CERT_FILE"
	EnvTLSKeyFile          = "PICOMQ_TLS_KEY_FILE"
	EnvTLSCAFile           = "PICOMQ_TLS_CA_FILE" // the CA peers (and the operator) are verified against
	EnvAuthTokensDir       = "PICOMQ_AUTH_TOKENS_DIR"
	EnvMetricsAuth         = "PICOMQ_METRICS_AUTH"         // open or token
	EnvCORSAllowedOrigins  = "PICOMQ_CORS_ALLOWED_ORIGINS" // comma-separated origins, or *
	// EnvAnonymousReadPrefixes: comma-separated prefixes readable without a
	// token (spec.auth.anonymousReadPrefixes).
	EnvAnonymousReadPrefixes = "PICOMQ_ANONYMOUS_READ_PREFIXES"
	// EnvURLSigningKeysDir: the mounted spec.auth.urlSigning Secret.
	EnvURLSigningKeysDir = "PICOMQ_URL_SIGNING_KEYS_DIR"

	// spec.tieredStorage; none is rendered without it.
	EnvTierEndpoint         = "PICOMQ_TIER_ENDPOINT"
	EnvTierBucket           = "PICOMQ_TIER_BUCKET"
	EnvTierRegion           = "PICOMQ_TIER_REGION"
	EnvTierPathStyle        = "PICOMQ_TIER_PATH_STYLE" // true or false
	EnvTierPrefix           = "PICOMQ_TIER_PREFIX"     // always rendered: DefaultTierPrefix when the spec has none
	EnvTierCacheBytes       = "PICOMQ_TIER_CACHE_BYTES"
	EnvTierLocalRetainFor   = "PICOMQ_TIER_LOCAL_RETAIN_FOR"
	EnvTierLocalRetainBytes = "PICOMQ_TIER_LOCAL_RETAIN_BYTES"
	EnvTierUploadRate       = "PICOMQ_TIER_UPLOAD_BYTES_PER_SECOND"
	EnvTierCAFile           = "PICOMQ_TIER_CA_FILE" // only with caSecret
	// EnvTierCredentialsDir: the mounted access key (TierAccessKeyIDFile,
	// TierSecretAccessKeyFile), which the brokers re-read as it changes.
	EnvTierCredentialsDir = "PICOMQ_TIER_CREDENTIALS_DIR"
)

// ConfigMap renders the broker configuration of c. Only what changes the
// brokers' behaviour goes in: its hash rolls the pods. The replica count in
// particular is not in it (scaling must not restart the brokers), and
// neither is the replication factor when it is left to its default: the
// default follows the broker count, which the brokers learn from the
// metadata log.
func ConfigMap(c *streamsv1alpha1.StreamCluster) (*corev1.ConfigMap, error) {
	s := &c.Spec
	data := map[string]string{
		EnvListen:      ":" + itoa(ClientPort),
		EnvDataDir:     DataDir,
		EnvCluster:     c.Name,
		EnvNamespace:   c.Namespace,
		EnvPeerListen:  ":" + itoa(PeerPort),
		EnvPeerService: HeadlessServiceName(c) + "." + c.Namespace + ".svc",
	}
	data[EnvSlots] = itoa(s.Ownership.EffectiveSlots())
	lease, renew, retry, err := s.Ownership.EffectiveLeaseTimings()
	if err != nil {
		return nil, err
	}
	data[EnvLeaseDuration] = lease.String()
	data[EnvLeaseRenewDeadline] = renew.String()
	data[EnvLeaseRetryPeriod] = retry.String()
	if s.ReplicationFactor != nil {
		data[EnvReplicationFactor] = itoa(*s.ReplicationFactor)
	}
	if b := s.Broker.FlushLinger; b != nil {
		d, err := b.Parse()
		if err != nil {
			return nil, fmt.Errorf("broker.flushLinger: %w", err)
		}
		data[EnvFlushLinger] = d.Duration.String()
	}
	if s.Broker.MaxBatchBytes != nil {
		data[EnvMaxBatchBytes] = strconv.FormatInt(*s.Broker.MaxBatchBytes, 10)
	}
	if b := s.Broker.LongPollTimeout; b != nil {
		d, err := b.Parse()
		if err != nil {
			return nil, fmt.Errorf("broker.longPollTimeout: %w", err)
		}
		data[EnvLongPollTimeout] = d.Duration.String()
	}
	if p := s.Broker.DefaultStreamPolicy; p != nil {
		v, err := PolicyValue(*p)
		if err != nil {
			return nil, fmt.Errorf("broker.defaultStreamPolicy.%w", err)
		}
		raw, err := json.Marshal(wire.PolicyOf(v))
		if err != nil {
			return nil, err
		}
		data[EnvDefaultStreamPolicy] = string(raw)
	}
	if s.TLS != nil {
		data[EnvTLSCertFile] = TLSMountPath + "/" + corev1.TLSCertKey
		data[EnvTLSKeyFile] = TLSMountPath + "/" + corev1.TLSPrivateKeyKey
		data[EnvTLSCAFile] = TLSMountPath + "/" + CAKey
	}
	if s.Auth != nil {
		data[EnvAuthTokensDir] = AuthMountPath
		data[EnvMetricsAuth] = "open"
		if s.Auth.EffectiveMetrics() == streamsv1alpha1.MetricsAuthToken {
			data[EnvMetricsAuth] = "token"
		}
		for _, p := range s.Auth.AnonymousReadPrefixes {
			if err := streamsv1alpha1.ValidatePrefix(p); err != nil {
				return nil, fmt.Errorf("auth.anonymousReadPrefixes: %w", err)
			}
		}
		if prefixes := anonymousReadPrefixes(s.Auth); prefixes != "" {
			data[EnvAnonymousReadPrefixes] = prefixes
		}
		if s.Auth.URLSigning != nil {
			data[EnvURLSigningKeysDir] = URLSigningMountPath
		}
	}
	if origins := corsAllowedOrigins(s.CORS); origins != "" {
		data[EnvCORSAllowedOrigins] = origins
	}
	if err := tierConfig(c, data); err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		TypeMeta:   typeMeta("v1", "ConfigMap"),
		ObjectMeta: objectMeta(c, ConfigMapName(c)),
		Data:       data,
	}, nil
}

// DefaultTierCacheBytes is tieredStorage.cacheBytes when unset (the CRD
// defaults it; this covers objects that bypassed defaulting).
const DefaultTierCacheBytes int64 = 1 << 30

// MinTierCacheBytes is the smallest cache the brokers take: one chunk of
// a tiered read (the CRD's bound too).
const MinTierCacheBytes int64 = 1 << 20

// DefaultTierLocalRetainFor is tieredStorage.localRetainFor when unset.
const DefaultTierLocalRetainFor = "1h"

// TierPrefix is the key prefix the brokers write under: the spec's, or
// "<namespace>/<name>/", so that clusters sharing a bucket never share
// keys. Rendered by the operator rather than left to the broker, which
// does not know its cluster's namespace for this purpose.
func TierPrefix(c *streamsv1alpha1.StreamCluster) string {
	if t := c.Spec.TieredStorage; t != nil && t.Prefix != "" {
		return t.Prefix
	}
	return c.Namespace + "/" + c.Name + "/"
}

// tierConfig renders spec.tieredStorage into data. The credentials are
// not here but mounted (TierCredentialsMountPath): a key in the ConfigMap
// would be in its hash, and rotating it would roll every broker.
func tierConfig(c *streamsv1alpha1.StreamCluster, data map[string]string) error {
	t := c.Spec.TieredStorage
	if t == nil {
		return nil
	}
	region := t.Region
	if region == "" {
		region = "us-east-1"
	}
	cache := DefaultTierCacheBytes
	if t.CacheBytes != nil {
		cache = t.CacheBytes.Value()
		if cache < MinTierCacheBytes {
			return fmt.Errorf("tieredStorage.cacheBytes: %s is below 1Mi, the chunk the brokers read by", t.CacheBytes)
		}
	}
	retainFor := streamsv1alpha1.Duration(DefaultTierLocalRetainFor)
	if t.LocalRetainFor != nil {
		retainFor = *t.LocalRetainFor
	}
	d, err := retainFor.Parse()
	if err != nil {
		return fmt.Errorf("tieredStorage.localRetainFor: %w", err)
	}
	if t.LocalRetainBytes < 0 {
		return fmt.Errorf("tieredStorage.localRetainBytes: %d is negative", t.LocalRetainBytes)
	}
	data[EnvTierEndpoint] = t.Endpoint
	data[EnvTierBucket] = t.Bucket
	data[EnvTierRegion] = region
	data[EnvTierPathStyle] = strconv.FormatBool(t.PathStyle)
	data[EnvTierPrefix] = TierPrefix(c)
	data[EnvTierCacheBytes] = strconv.FormatInt(cache, 10)
	data[EnvTierLocalRetainFor] = d.Duration.String()
	data[EnvTierLocalRetainBytes] = strconv.FormatInt(t.LocalRetainBytes, 10)
	if q := t.UploadBytesPerSecond; q != nil && !q.IsZero() {
		data[EnvTierUploadRate] = strconv.FormatInt(q.Value(), 10)
	}
	data[EnvTierCredentialsDir] = TierCredentialsMountPath
	if t.CASecret != nil {
		data[EnvTierCAFile] = TierCAMountPath + "/" + TierCAFile
	}
	return nil
}

// corsAllowedOrigins is spec.cors.allowedOrigins as the broker reads it,
// comma-joined (an origin holds no comma: the CRD's rule), or "" for none:
// then the variable is left out and the broker keeps its own default. The
// origins are sorted: the order means nothing to the broker, and a
// reordered list must not change the hash and roll every broker.
func corsAllowedOrigins(cors *streamsv1alpha1.CORSSpec) string {
	if cors == nil || len(cors.AllowedOrigins) == 0 {
		return ""
	}
	return strings.Join(slices.Sorted(slices.Values(cors.AllowedOrigins)), ",")
}

// ClusterIDConfigMap renders the cluster id recorded in c's status
// (PICOMQ_CLUSTER_ID), or nil while none is: a broker starting on an empty
// data directory with it joins the cluster instead of bootstrapping a new
// one (without it ordinal 0 would bootstrap, which is right only the first
// time).
//
// It is a ConfigMap of its own, which the pods load with an optional
// envFrom, rather than a key of ConfigMap: ConfigHash of that one is on the
// pod template and rolls every broker when it changes, and the id is
// learned from the brokers after they started, so recording it would
// restart the whole cluster the moment it formed — for nothing, since a
// running broker keeps the id in its data directory. A broker reads it at
// its next start, the only time it matters. Optional, because the first
// pods start before any id exists; once written it never changes (status
// keeps the first id for good).
func ClusterIDConfigMap(c *streamsv1alpha1.StreamCluster) *corev1.ConfigMap {
	if c.Status.ClusterID == "" {
		return nil
	}
	return &corev1.ConfigMap{
		TypeMeta:   typeMeta("v1", "ConfigMap"),
		ObjectMeta: objectMeta(c, ClusterIDConfigMapName(c)),
		Data:       map[string]string{EnvClusterID: c.Status.ClusterID},
	}
}

// ConfigHash is a short, stable hash of a ConfigMap's data (and binary
// data), stamped on the pod template as ConfigHashAnnotation.
func ConfigHash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	write := func(m map[string]string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(h, "%d:%s=%d:%s\n", len(k), k, len(m[k]), m[k])
		}
	}
	write(cm.Data)
	bin := make(map[string]string, len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		bin[k] = string(v)
	}
	h.Write([]byte{0})
	write(bin)
	return hex.EncodeToString(h.Sum(nil))[:16]
}
