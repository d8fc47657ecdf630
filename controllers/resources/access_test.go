package resources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/auth"
)

func access(ns, name string) *streamsv1alpha1.StreamAccess {
	return &streamsv1alpha1.StreamAccess{
		TypeMeta:   metav1.TypeMeta{APIVersion: "streams.picomq.io/v1alpha1", Kind: "StreamAccess"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "uid-a"},
		Spec: streamsv1alpha1.StreamAccessSpec{
			ClusterRef: streamsv1alpha1.ClusterReference{Name: "demo", Namespace: "ns"},
			Scopes:     []streamsv1alpha1.AccessScope{streamsv1alpha1.AccessRead, streamsv1alpha1.AccessWrite},
			Prefixes:   []string{"shop/"},
		},
	}
}

// Every scope on every prefix, in one order whatever the spec's, and what
// the broker reads back is exactly that: no admin, nothing unlimited.
func TestAccessItems(t *testing.T) {
	t.Parallel()
	r, w := streamsv1alpha1.AccessRead, streamsv1alpha1.AccessWrite
	for _, tc := range []struct {
		scopes   []streamsv1alpha1.AccessScope
		prefixes []string
		want     string
	}{
		{[]streamsv1alpha1.AccessScope{r, w}, []string{"shop/"}, "read:shop/,write:shop/"},
		{[]streamsv1alpha1.AccessScope{w, r}, []string{"shop/"}, "read:shop/,write:shop/"},
		{[]streamsv1alpha1.AccessScope{r}, []string{"shop/orders", "billing/", "shop/orders"}, "read:billing/,read:shop/orders"},
		{[]streamsv1alpha1.AccessScope{w, w}, []string{"a.b_c-d/e/"}, "write:a.b_c-d/e/"},
	} {
		got, err := AccessItems(tc.scopes, tc.prefixes)
		if err != nil || got != tc.want {
			t.Errorf("AccessItems(%v, %v) = %q, %v; want %q", tc.scopes, tc.prefixes, got, err, tc.want)
			continue
		}
		gs, err := auth.ParseGrants(got)
		if err != nil {
			t.Errorf("the broker refuses %q: %v", got, err)
			continue
		}
		for _, g := range gs {
			if g.Prefix == "" || g.Scope == auth.Admin {
				t.Errorf("%q: grant %+v is not limited to a prefix", got, g)
			}
		}
		if gs.String() != got {
			t.Errorf("the broker reads %q as %q", got, gs.String())
		}
	}
	for _, tc := range []struct {
		scopes   []streamsv1alpha1.AccessScope
		prefixes []string
	}{
		{nil, []string{"shop/"}},
		{[]streamsv1alpha1.AccessScope{r}, nil},
		{[]streamsv1alpha1.AccessScope{"admin"}, []string{"shop/"}},
		{[]streamsv1alpha1.AccessScope{r}, []string{"/"}},
		{[]streamsv1alpha1.AccessScope{r}, []string{"shop/../billing/"}},
		{[]streamsv1alpha1.AccessScope{r}, []string{"shop//x"}},
		{[]streamsv1alpha1.AccessScope{r}, []string{"shop,billing/"}},
		{[]streamsv1alpha1.AccessScope{r}, []string{"shop:x"}},
		{[]streamsv1alpha1.AccessScope{r}, []string{""}},
	} {
		if got, err := AccessItems(tc.scopes, tc.prefixes); err == nil {
			t.Errorf("AccessItems(%v, %v) = %q: want a refusal", tc.scopes, tc.prefixes, got)
		}
	}
}

// The token file the access Secret holds is one the broker loads under
// the token's name, with exactly the items rendered; the longest name the
// CRD admits is still a Secret key.
func TestAccessTokenFileLoadsOnTheBroker(t *testing.T) {
	t.Parallel()
	name := AccessTokenName("shop", "orders-app")
	if name != "access.shop.orders-app" {
		t.Errorf("token name %q", name)
	}
	longest := AccessTokenName(strings.Repeat("n", 63), strings.Repeat("a", 182))
	if errs := validation.IsConfigMapKey(longest); len(errs) > 0 {
		t.Errorf("the longest token name is no Secret key: %v", errs)
	}
	token := strings.Repeat("ab", TokenHexLen/2)
	items := "read:shop/,write:shop/"
	file := AccessTokenFile(items, token)
	if gotItems, gotToken, ok := ParseAccessTokenFile(file); !ok || gotItems != items || gotToken != token {
		t.Errorf("ParseAccessTokenFile(%q) = %q, %q, %v", file, gotItems, gotToken, ok)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), file, 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := auth.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	gotName, gs, ok := toks.Lookup(token)
	if !ok || gotName != name || gs.String() != items {
		t.Errorf("the broker holds %q with %q (%v), want %q with %q", gotName, gs, ok, name, items)
	}
	for _, bad := range []string{"read:shop/", "read:shop/:short", ":" + token} {
		if _, _, ok := ParseAccessTokenFile([]byte(bad)); ok {
			t.Errorf("ParseAccessTokenFile(%q) ok", bad)
		}
	}
}

func TestValidateAccessToken(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{strings.Repeat("x", 16), "Zm9v-YmFy_YmF6.cXV4+/=", strings.Repeat("a", 4096)} {
		if err := ValidateAccessToken(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	secret := "s3cr3t-value-that-must-not-leak"
	for _, bad := range []string{"", strings.Repeat("x", 15), strings.Repeat("a", 4097), secret + " x", secret + "\n", secret + ":x", secret + ",x", "\t" + secret} {
		err := ValidateAccessToken(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
	if got := NormalizeUserToken([]byte(secret + "\r\n")); got != secret {
		t.Errorf("NormalizeUserToken = %q", got)
	}
}

// The application's Secret: token, scopes, url, ca.crt with TLS; owned by
// the StreamAccess; no token key with tokenFrom.
func TestAccessSecret(t *testing.T) {
	t.Parallel()
	a := access("shop", "orders-app")
	c := cluster()
	s := AccessSecret(a, c, AccessSecretParams{Token: "tok", Items: "read:shop/,write:shop/", CA: []byte("CA"), RotatedFor: "1"})
	if s.Name != "orders-app" || s.Namespace != "shop" || s.Type != corev1.SecretTypeOpaque {
		t.Errorf("secret %s/%s type %s", s.Namespace, s.Name, s.Type)
	}
	want := map[string]string{AccessTokenKey: "tok", AccessScopesKey: "read:shop/,write:shop/", AccessURLKey: "http://demo.ns.svc:4437"}
	if len(s.Data) != len(want) {
		t.Errorf("keys %v, want %v (no ca.crt without TLS)", s.Data, want)
	}
	for k, v := range want {
		if string(s.Data[k]) != v {
			t.Errorf("%s = %q, want %q", k, s.Data[k], v)
		}
	}
	if ref := metav1.GetControllerOf(s); ref == nil || ref.Kind != "StreamAccess" || ref.Name != "orders-app" || ref.UID != "uid-a" {
		t.Errorf("controller %+v", ref)
	}
	if s.Annotations[AccessRotatedAnnotation] != "1" || s.Labels[LabelManagedBy] != ManagedByValue {
		t.Errorf("metadata %v %v", s.Annotations, s.Labels)
	}

	a.Spec.SecretName = "shop-stream-token"
	c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "cert"}
	s = AccessSecret(a, c, AccessSecretParams{Items: "read:shop/", CA: []byte("CA")})
	if s.Name != "shop-stream-token" {
		t.Errorf("name %s, want spec.secretName", s.Name)
	}
	if _, ok := s.Data[AccessTokenKey]; ok {
		t.Errorf("a token key with tokenFrom")
	}
	if string(s.Data[CAKey]) != "CA" || string(s.Data[AccessURLKey]) != "https://demo.ns.svc:4437" {
		t.Errorf("TLS: %v", s.Data)
	}
	if s.Annotations != nil {
		t.Errorf("annotations %v", s.Annotations)
	}
}

// The access Secret goes with its cluster.
func TestAccessTokensSecret(t *testing.T) {
	t.Parallel()
	c := cluster()
	s := AccessTokensSecret(c)
	if s.Name != "demo-access-tokens" || s.Namespace != "ns" || len(s.Data) != 0 {
		t.Errorf("%s/%s %v", s.Namespace, s.Name, s.Data)
	}
	if !metav1.IsControlledBy(s, c) {
		t.Errorf("not owned by the cluster: %+v", s.OwnerReferences)
	}
}

func TestValidateURLSigningKeys(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	if err := ValidateURLSigningKeys(map[string][]byte{"2026-01": key, "2026-02": append(key, '\n'), "a.b_c-D": key}); err != nil {
		t.Errorf("valid keys refused: %v", err)
	}
	for _, tc := range []struct {
		data map[string][]byte
		want string
	}{
		{nil, "no key"},
		{map[string][]byte{"k": key[:31]}, `"k" holds 31 bytes`},
		{map[string][]byte{"k": append(key[:31:31], '\n')}, `"k" holds 31 bytes`},
		{map[string][]byte{".hidden": key}, `".hidden" is not a key id`},
		{map[string][]byte{strings.Repeat("i", 65): key}, "is not a key id"},
	} {
		err := ValidateURLSigningKeys(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.data, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), string(key[:31])) {
			t.Errorf("the error quotes a key: %v", err)
		}
	}
}

// anonymousReadPrefixes and urlSigning: the broker's variables, the keys
// mounted read-only; a reordered list renders the same (rolls nothing).
func TestAnonymousPrefixesAndURLSigning(t *testing.T) {
	t.Parallel()
	c := cluster()
	c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{EnvAnonymousReadPrefixes, EnvURLSigningKeysDir} {
		if _, ok := cm.Data[k]; ok {
			t.Errorf("%s set without its field", k)
		}
	}
	c.Spec.Auth.AnonymousReadPrefixes = []string{"public/", "feed", "public/"}
	c.Spec.Auth.URLSigning = &streamsv1alpha1.URLSigningSpec{SecretName: "url-keys"}
	cm, err = ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data[EnvAnonymousReadPrefixes]; got != "feed,public/" {
		t.Errorf("%s = %q, want feed,public/", EnvAnonymousReadPrefixes, got)
	}
	if got := cm.Data[EnvURLSigningKeysDir]; got != URLSigningMountPath {
		t.Errorf("%s = %q", EnvURLSigningKeysDir, got)
	}
	c2 := c.DeepCopy()
	c2.Spec.Auth.AnonymousReadPrefixes = []string{"feed", "public/"}
	if cm2, _ := ConfigMap(c2); ConfigHash(cm2) != ConfigHash(cm) {
		t.Errorf("a reordered list changes the config hash")
	}
	ps := StatefulSet(c, params()).Spec.Template.Spec
	var vol *corev1.Volume
	for i := range ps.Volumes {
		if ps.Volumes[i].Name == URLSigningVolumeName {
			vol = &ps.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "url-keys" || len(vol.Secret.Items) != 0 ||
		ptr.Deref(vol.Secret.Optional, false) || ptr.Deref(vol.Secret.DefaultMode, 0) != 0o440 {
		t.Errorf("url signing volume %+v: want the whole Secret, required, 0440", vol)
	}
	var mounted bool
	for _, m := range ps.Containers[0].VolumeMounts {
		if m.Name == URLSigningVolumeName {
			mounted = m.MountPath == URLSigningMountPath && m.ReadOnly
		}
	}
	if !mounted {
		t.Errorf("url signing keys not mounted read-only at %s: %+v", URLSigningMountPath, ps.Containers[0].VolumeMounts)
	}
	c.Spec.Auth.AnonymousReadPrefixes = []string{"shop/../x"}
	if _, err := ConfigMap(c); err == nil {
		t.Errorf("a prefix that is not a stream name rendered")
	}
}
