package resources

import (
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// Keys of the operator's token Secret (<cluster>-operator-token). The first
// two are token files in the brokers' token directory (file name = token
// name, content "<scopes>:<token>"); the third is the metrics token alone,
// as Prometheus sends it.
const (
	// OperatorTokenKey is the operator's own admin token. A user's auth
	// Secret may not use this name (ReservedTokenName).
	OperatorTokenKey = "picomq-operator"
	// MetricsTokenKey is the read token Prometheus scrapes /metrics with
	// when spec.auth.metrics is Token and a ServiceMonitor is asked for;
	// reserved then too.
	MetricsTokenKey = "picomq-metrics"
	// MetricsBearerKey is the metrics token without its scopes, for the
	// ServiceMonitor's bearerTokenSecret.
	MetricsBearerKey = "metrics-token"

	// TokenHexLen is the length of a generated token: 32 random bytes.
	TokenHexLen = 64
)

// OperatorTokenSecretName is the Secret holding the operator's tokens.
func OperatorTokenSecretName(c *streamsv1alpha1.StreamCluster) string {
	return c.Name + "-operator-token"
}

// OperatorTokenSecret builds the operator's token Secret from two tokens
// (TokenHexLen hex digits each, drawn by the caller): the operator's admin
// token and the metrics read token. The operator creates it once and
// rewrites it only when it is missing or invalid (ParseOperatorTokens), so
// that the tokens the brokers hold stay the ones it sends.
func OperatorTokenSecret(c *streamsv1alpha1.StreamCluster, admin, metrics string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   typeMeta("v1", "Secret"),
		ObjectMeta: objectMeta(c, OperatorTokenSecretName(c)),
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			OperatorTokenKey: []byte("admin:" + admin),
			MetricsTokenKey:  []byte("read:" + metrics),
			MetricsBearerKey: []byte(metrics),
		},
	}
}

// ParseOperatorTokens returns the admin and metrics tokens of the
// operator's token Secret's data, and false when a key is missing or not
// what OperatorTokenSecret writes (the Secret is then written again).
func ParseOperatorTokens(data map[string][]byte) (admin, metrics string, ok bool) {
	admin, ok1 := strings.CutPrefix(string(data[OperatorTokenKey]), "admin:")
	metrics, ok2 := strings.CutPrefix(string(data[MetricsTokenKey]), "read:")
	if !ok1 || !ok2 || !isToken(admin) || !isToken(metrics) || string(data[MetricsBearerKey]) != metrics {
		return "", "", false
	}
	return admin, metrics, true
}

func isToken(s string) bool {
	if len(s) != TokenHexLen || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// MetricsTokenProjected is whether the brokers hold the metrics token:
// only when /metrics needs a token and a ServiceMonitor scrapes it (a read
// token reads every stream, so it exists only where it is used).
func MetricsTokenProjected(c *streamsv1alpha1.StreamCluster) bool {
	return c.Spec.Auth != nil && c.Spec.Auth.EffectiveMetrics() == streamsv1alpha1.MetricsAuthToken && c.Spec.Monitoring.ServiceMonitor
}

// ReservedTokenNames are the keys a user's auth Secret may not have: the
// operator's token files in the same directory.
func ReservedTokenNames(c *streamsv1alpha1.StreamCluster) []string {
	if MetricsTokenProjected(c) {
		return []string{OperatorTokenKey, MetricsTokenKey}
	}
	return []string{OperatorTokenKey}
}

// authVolume is the brokers' token directory: the user's auth Secret, the
// operator's token files and the cluster's access Secret (the
// StreamAccesses' tokens) in one projected volume. The user's Secret comes
// first: where two have a key, the kubelet writes the later one, so the
// operator's token and a StreamAccess's are the ones the brokers hold (and
// the user's is reported, ReservedTokenName). The user's Secret and the
// access Secret are projected whole, so that tokens added to them reach
// the brokers without a restart. The access Secret is optional: it exists
// once a StreamAccess is accepted, and its absence must never keep a pod
// from starting.
func authVolume(c *streamsv1alpha1.StreamCluster) corev1.Volume {
	items := []corev1.KeyToPath{{Key: OperatorTokenKey, Path: OperatorTokenKey}}
	if MetricsTokenProjected(c) {
		items = append(items, corev1.KeyToPath{Key: MetricsTokenKey, Path: MetricsTokenKey})
	}
	mode := int32(0o440)
	return corev1.Volume{Name: AuthVolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: c.Spec.Auth.SecretName}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: OperatorTokenSecretName(c)}, Items: items}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: AccessTokensSecretName(c)}, Optional: ptr.To(true)}},
		},
	}}}
}
