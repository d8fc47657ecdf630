package resources

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// StreamAccess: a token limited to scopes and prefixes, kept in two
// Secrets. The cluster's access Secret (<cluster>-access-tokens, in the
// cluster's namespace, owned by the StreamCluster) holds one token file
// per StreamAccess, projected into the brokers' token directory; the
// StreamAccess's own Secret (in its namespace, owned by it) holds what the
// application needs to connect.

// Keys of a StreamAccess's Secret.
const (
	// AccessTokenKey is the bearer token (absent with spec.tokenFrom: the
	// application reads its own Secret).
	AccessTokenKey = "token"
	// AccessScopesKey is the token's scope items, as the brokers read
	// them: read:shop/,write:shop/.
	AccessScopesKey = "scopes"
	// AccessURLKey is the cluster's client URL.
	AccessURLKey = "url"
	// CAKey (ca.crt) is the cluster's CA, when it has TLS.

	// AccessTokenPrefix starts every StreamAccess's token name (its key in
	// the access Secret, its file in the brokers' token directory).
	AccessTokenPrefix = "access."
	// AccessRotatedAnnotation, on a StreamAccess's Secret, is the
	// rotate-token value its token was minted for: a rotation that wrote
	// the Secret but not the status is not done twice.
	AccessRotatedAnnotation = "streams.picomq.io/rotated-for"
	// ComponentAccess is app.kubernetes.io/component of the Secrets a
	// StreamAccess makes.
	ComponentAccess = "access"
	// MaxAccessTokenBytes bounds a token given with spec.tokenFrom.
	MaxAccessTokenBytes = 4096
	// MinAccessTokenBytes is the broker's shortest token.
	MinAccessTokenBytes = 16
)

// AccessTokensSecretName is the cluster's access Secret.
func AccessTokensSecretName(c *streamsv1alpha1.StreamCluster) string {
	return c.Name + "-access-tokens"
}

// AccessTokenName is the name of a StreamAccess's token on the brokers:
// access.<namespace>.<name>, a valid Secret key and file name (a
// namespace holds no '.', so the first '.' after the prefix ends it; the
// CRD bounds the name so that the key stays within 253 characters).
func AccessTokenName(namespace, name string) string {
	return AccessTokenPrefix + namespace + "." + name
}

// AccessItems renders scopes × prefixes as a token file's scope items:
// every scope on every prefix, scopes in the order read, write, prefixes
// sorted, duplicates dropped, so that a reordered spec renders the same
// items. Scopes other than read and write, and prefixes that are not
// stream names, are refused: a tenant never gets admin, nor a grant
// beyond its prefixes.
func AccessItems(scopes []streamsv1alpha1.AccessScope, prefixes []string) (string, error) {
	if len(scopes) == 0 {
		return "", fmt.Errorf("spec.scopes: want read, write or both")
	}
	if len(prefixes) == 0 {
		return "", fmt.Errorf("spec.prefixes: want at least one stream-name prefix")
	}
	var want []streamsv1alpha1.AccessScope
	for _, s := range scopes {
		if s != streamsv1alpha1.AccessRead && s != streamsv1alpha1.AccessWrite {
			return "", fmt.Errorf("spec.scopes: %q is not read or write", s)
		}
	}
	for _, s := range []streamsv1alpha1.AccessScope{streamsv1alpha1.AccessRead, streamsv1alpha1.AccessWrite} {
		if slices.Contains(scopes, s) {
			want = append(want, s)
		}
	}
	for _, p := range prefixes {
		if err := streamsv1alpha1.ValidatePrefix(p); err != nil {
			return "", fmt.Errorf("spec.prefixes: %w", err)
		}
	}
	ps := slices.Compact(slices.Sorted(slices.Values(prefixes)))
	items := make([]string, 0, len(want)*len(ps))
	for _, s := range want {
		for _, p := range ps {
			items = append(items, string(s)+":"+p)
		}
	}
	return strings.Join(items, ","), nil
}

// AccessTokenFile is a token file's content: "<items>:<token>".
func AccessTokenFile(items, token string) []byte {
	return []byte(items + ":" + token)
}

// ParseAccessTokenFile splits a token file the operator wrote into its
// items and token (the token follows the last ':'; it holds none).
func ParseAccessTokenFile(v []byte) (items, token string, ok bool) {
	s := string(v)
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", "", false
	}
	items, token = s[:i], s[i+1:]
	if ValidateAccessToken(token) != nil {
		return "", "", false
	}
	return items, token, true
}

// ValidateAccessToken checks a token as the brokers will take it in a
// file with prefixed scope items: 16 bytes at least (4096 at most), no
// white space, and no ':' or ',', which would split it. Its errors never
// quote it.
func ValidateAccessToken(token string) error {
	switch {
	case len(token) < MinAccessTokenBytes:
		return fmt.Errorf("the token is %d bytes: the brokers take %d or more", len(token), MinAccessTokenBytes)
	case len(token) > MaxAccessTokenBytes:
		return fmt.Errorf("the token is %d bytes: at most %d", len(token), MaxAccessTokenBytes)
	case strings.ContainsAny(token, " \t\r\n\v\f"):
		return fmt.Errorf("the token holds white space")
	case strings.ContainsAny(token, ":,"):
		return fmt.Errorf("the token holds ':' or ',', which would split it from its scope items")
	}
	return nil
}

// NormalizeUserToken is a token read from a user's Secret: a trailing
// newline (kubectl create secret --from-file) dropped, as the brokers drop
// one from a token file.
func NormalizeUserToken(v []byte) string {
	return strings.TrimRight(string(v), "\r\n")
}

// AccessTokensSecret is the cluster's access Secret as the operator
// creates it: empty, owned by the cluster (it goes with it), its keys
// added and removed one by one by the StreamAccess controller.
func AccessTokensSecret(c *streamsv1alpha1.StreamCluster) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   typeMeta("v1", "Secret"),
		ObjectMeta: objectMeta(c, AccessTokensSecretName(c)),
		Type:       corev1.SecretTypeOpaque,
	}
}

// AccessSecretParams is what a StreamAccess's Secret holds besides its
// spec: the token ("" with tokenFrom: no token key), the rendered items,
// the cluster's CA (nil: no TLS) and the rotation it was minted for.
type AccessSecretParams struct {
	Token      string
	Items      string
	CA         []byte
	RotatedFor string
}

// AccessSecret builds a StreamAccess's Secret in its namespace: token,
// scopes, url and ca.crt, owned by the StreamAccess (deleting it deletes
// the Secret).
func AccessSecret(a *streamsv1alpha1.StreamAccess, c *streamsv1alpha1.StreamCluster, p AccessSecretParams) *corev1.Secret {
	data := map[string][]byte{
		AccessScopesKey: []byte(p.Items),
		AccessURLKey:    []byte(Endpoint(c)),
	}
	if p.Token != "" {
		data[AccessTokenKey] = []byte(p.Token)
	}
	if c.Spec.TLS != nil && len(p.CA) > 0 {
		data[CAKey] = p.CA
	}
	s := &corev1.Secret{
		TypeMeta: typeMeta("v1", "Secret"),
		ObjectMeta: metav1.ObjectMeta{
			Name:      a.EffectiveSecretName(),
			Namespace: a.Namespace,
			Labels: map[string]string{
				LabelName:      NameValue,
				LabelInstance:  a.Name,
				LabelComponent: ComponentAccess,
				LabelManagedBy: ManagedByValue,
				LabelPartOf:    NameValue,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(a, streamsv1alpha1.GroupVersion.WithKind("StreamAccess"))},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if p.RotatedFor != "" {
		s.Annotations = map[string]string{AccessRotatedAnnotation: p.RotatedFor}
	}
	return s
}

// URL signing keys.
const (
	// URLSigningVolumeName and URLSigningMountPath hold the keys of signed
	// read URLs when spec.auth.urlSigning is set.
	URLSigningVolumeName = "url-signing"
	URLSigningMountPath  = "/etc/picomq/url-signing"
	// MinURLSigningKeyBytes is the broker's shortest signing key.
	MinURLSigningKeyBytes = 32
	// maxURLSigningKeyIDLen is the broker's longest key id.
	maxURLSigningKeyIDLen = 64
	// maxURLSigningKeyBytes is the broker's largest key file.
	maxURLSigningKeyBytes = 64 << 10
)

// ValidateURLSigningKeys checks a URL signing Secret's data as the brokers
// read its files: at least one key, each named by a key id (letters,
// digits, '.', '_', '-', at most 64, not starting with '.', which the
// brokers would skip as a hidden file) and holding 32 bytes or more (a
// trailing newline not counted). Its errors name keys, never values.
func ValidateURLSigningKeys(data map[string][]byte) error {
	if len(data) == 0 {
		return fmt.Errorf("it holds no key: the brokers would sign nothing and verify nothing")
	}
	for _, id := range slices.Sorted(maps.Keys(data)) {
		if !validKeyID(id) {
			return fmt.Errorf("key %q is not a key id (letters, digits, '.', '_', '-', %d at most, not starting with '.')", id, maxURLSigningKeyIDLen)
		}
		n := len(strings.TrimRight(string(data[id]), "\r\n"))
		if n < MinURLSigningKeyBytes || n > maxURLSigningKeyBytes {
			return fmt.Errorf("key %q holds %d bytes: a signing key holds %d to %d", id, n, MinURLSigningKeyBytes, maxURLSigningKeyBytes)
		}
	}
	return nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > maxURLSigningKeyIDLen || id[0] == '.' {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// anonymousReadPrefixes is spec.auth.anonymousReadPrefixes as the broker
// reads it, comma-joined and sorted (a reordered list must not roll the
// brokers), or "" for none.
func anonymousReadPrefixes(a *streamsv1alpha1.AuthSpec) string {
	if a == nil || len(a.AnonymousReadPrefixes) == 0 {
		return ""
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(a.AnonymousReadPrefixes))), ",")
}
