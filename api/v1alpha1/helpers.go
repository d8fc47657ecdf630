package v1alpha1

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Defaults the apiserver cannot express in OpenAPI (they depend on other
// fields); the operator and the broker both read them through these helpers.
const (
	// DefaultReplicas is the broker count of a cluster that names none.
	DefaultReplicas int32 = 3
	// MaxDefaultReplicationFactor caps the replication factor's default.
	MaxDefaultReplicationFactor int32 = 3
	// DefaultClientPort is the brokers' HTTP port.
	DefaultClientPort int32 = 4437
	// DefaultSlots is the number of slot Leases.
	DefaultSlots int32 = 64
	// DefaultLeaseDuration is how long a broker's slots outlive its last
	// renewal of its member Lease.
	DefaultLeaseDuration = 4 * time.Second
	// DefaultContentType is a stream's content type when none is given.
	DefaultContentType = "application/octet-stream"
	// MaxStreamNameLength bounds a stream's path name.
	MaxStreamNameLength = 255
)

// EffectiveReplicas returns spec.replicas, or its default when a client
// bypassed the apiserver's defaulting (a unit test, an old object).
func (s *StreamClusterSpec) EffectiveReplicas() int32 {
	if s.Replicas < 1 {
		return DefaultReplicas
	}
	return s.Replicas
}

// EffectiveReplicationFactor returns spec.replicationFactor, or min(3, replicas).
func (s *StreamClusterSpec) EffectiveReplicationFactor() int32 {
	if s.ReplicationFactor != nil && *s.ReplicationFactor > 0 {
		return *s.ReplicationFactor
	}
	return min(MaxDefaultReplicationFactor, s.EffectiveReplicas())
}

// EffectiveSlots returns ownership.slots, or its default when a client
// bypassed the apiserver's defaulting.
func (o *OwnershipSpec) EffectiveSlots() int32 {
	if o.Slots < 1 {
		return DefaultSlots
	}
	return o.Slots
}

// EffectiveLeaseTimings returns the lease duration, renew deadline and
// retry period, filling the ones left out: renew deadline three quarters
// of the duration, retry a quarter of it (4s: 3s and 1s). The margin a
// quarter leaves between renew deadline and duration is the clock-rate
// difference between brokers the timing rule tolerates.
func (o *OwnershipSpec) EffectiveLeaseTimings() (lease, renew, retry time.Duration, err error) {
	lease = DefaultLeaseDuration
	if o.LeaseDuration != "" {
		d, err := o.LeaseDuration.Parse()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("ownership.leaseDuration: %w", err)
		}
		lease = d.Duration
	}
	renew = lease - lease/4 // three quarters, without overflowing
	if o.RenewDeadline != nil {
		d, err := o.RenewDeadline.Parse()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("ownership.renewDeadline: %w", err)
		}
		renew = d.Duration
	}
	retry = lease / 4
	if o.RetryPeriod != nil {
		d, err := o.RetryPeriod.Parse()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("ownership.retryPeriod: %w", err)
		}
		retry = d.Duration
	}
	if !(retry < renew && renew < lease) {
		return 0, 0, 0, fmt.Errorf("ownership: need retryPeriod (%s) < renewDeadline (%s) < leaseDuration (%s)", retry, renew, lease)
	}
	return lease, renew, retry, nil
}

// StreamName returns the stream's path name on the broker: spec.name, or
// metadata.name when that is empty.
func (s *Stream) StreamName() string {
	if s.Spec.Name != "" {
		return s.Spec.Name
	}
	return s.Name
}

// ClusterNamespace is the namespace of the Stream's StreamCluster:
// spec.clusterRef.namespace, or the Stream's own when that is empty.
func (s *Stream) ClusterNamespace() string {
	if s.Spec.ClusterRef.Namespace != "" {
		return s.Spec.ClusterRef.Namespace
	}
	return s.Namespace
}

// EffectiveFrom returns from, or its default Same when a client bypassed
// the apiserver's defaulting.
func (a *AllowedNamespaces) EffectiveFrom() NamespacesFrom {
	if a.From == "" {
		return NamespacesFromSame
	}
	return a.From
}

// Admits says whether a StreamCluster in clusterNamespace with these
// allowedNamespaces keeps the Streams of namespace ns, whose labels are
// nsLabels (read only for Selector). Its own namespace always; another as
// From says. A selector that does not parse admits nothing but the
// cluster's own namespace, and the error says why. An unknown From admits
// no other namespace: a rule the operator cannot read opens nothing.
func (a *AllowedNamespaces) Admits(clusterNamespace, ns string, nsLabels map[string]string) (bool, error) {
	if ns == clusterNamespace {
		return true, nil
	}
	switch a.EffectiveFrom() {
	case NamespacesFromAll:
		return true, nil
	case NamespacesFromSelector:
		if a.Selector == nil {
			return false, fmt.Errorf("allowedNamespaces.from is Selector but no selector is set")
		}
		sel, err := metav1.LabelSelectorAsSelector(a.Selector)
		if err != nil {
			return false, fmt.Errorf("allowedNamespaces.selector: %w", err)
		}
		return sel.Matches(labels.Set(nsLabels)), nil
	}
	return false, nil
}

// String is the rule as a Ready message quotes it: "from: Same",
// "from: All", "from: Selector (team=shop)".
func (a *AllowedNamespaces) String() string {
	from := a.EffectiveFrom()
	if from != NamespacesFromSelector || a.Selector == nil {
		return "from: " + string(from)
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Selector)
	if err != nil {
		return fmt.Sprintf("from: Selector (invalid: %v)", err)
	}
	if sel.Empty() {
		return "from: Selector (every namespace)"
	}
	return fmt.Sprintf("from: Selector (%s)", sel)
}

// EffectiveContentType returns spec.contentType or its default.
func (s *StreamSpec) EffectiveContentType() string {
	if s.ContentType == "" {
		return DefaultContentType
	}
	return s.ContentType
}

// ValidateStreamName reports why name cannot name a stream, or nil. It is the
// CRD's rule for spec.name, repeated here for names that do not come through
// the apiserver (metadata.name defaults, the broker's admin API): 1 to 255
// characters, '/'-separated segments of [a-zA-Z0-9._-], none empty, '.' or
// '..' (so a name can never climb out of a path).
func ValidateStreamName(name string) error {
	if name == "" {
		return fmt.Errorf("stream name is empty")
	}
	if len(name) > MaxStreamNameLength {
		return fmt.Errorf("stream name is %d bytes, more than %d", len(name), MaxStreamNameLength)
	}
	for i, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return fmt.Errorf("stream name %q has an empty segment at position %d (leading, trailing or doubled '/')", name, i)
		case ".", "..":
			return fmt.Errorf("stream name %q has a %q segment", name, seg)
		}
		for _, r := range seg {
			if !validNameRune(r) {
				return fmt.Errorf("stream name %q has %q in segment %q: only letters, digits, '.', '_' and '-' are allowed", name, r, seg)
			}
		}
	}
	return nil
}

func validNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

func parseDuration(s string) (metav1.Duration, error) {
	if s == "" {
		return metav1.Duration{}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return metav1.Duration{}, err
	}
	if d < 0 {
		return metav1.Duration{}, fmt.Errorf("duration %q is negative", s)
	}
	return metav1.Duration{Duration: d}, nil
}

// EffectiveMetrics is spec.auth.metrics with its default: Open when auth is
// not set or the field is absent.
func (a *AuthSpec) EffectiveMetrics() MetricsAuth {
	if a == nil || a.Metrics == "" {
		return MetricsAuthOpen
	}
	return a.Metrics
}

// ClusterNamespace is the namespace of the StreamAccess's StreamCluster:
// spec.clusterRef.namespace, or its own when that is empty.
func (a *StreamAccess) ClusterNamespace() string {
	if a.Spec.ClusterRef.Namespace != "" {
		return a.Spec.ClusterRef.Namespace
	}
	return a.Namespace
}

// EffectiveSecretName is spec.secretName, or metadata.name when that is
// empty.
func (a *StreamAccess) EffectiveSecretName() string {
	if a.Spec.SecretName != "" {
		return a.Spec.SecretName
	}
	return a.Name
}

// ValidatePrefix reports why p cannot be a token's or an anonymous read
// prefix, or nil: the CRD's rule (and the broker's auth.CheckPrefix),
// repeated for objects that did not come through the apiserver. A stream
// name, with or without a trailing '/'.
func ValidatePrefix(p string) error {
	name := strings.TrimSuffix(p, "/")
	if name == "" {
		return fmt.Errorf("prefix %q: want a stream name, or one ending in '/' for the names under it", p)
	}
	if err := ValidateStreamName(name); err != nil {
		return fmt.Errorf("prefix %q: %w", p, err)
	}
	return nil
}
