package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
)

// certs is a CA and a server certificate it signed, PEM-encoded.
type certs struct {
	ca, crt, key []byte
}

// newCerts signs a certificate for names with a fresh CA, valid from
// notBefore for an hour.
func newCerts(t *testing.T, notBefore time.Time, names ...string) certs {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: notBefore, NotAfter: notBefore.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: notBefore, NotAfter: notBefore.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certs{
		ca:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		crt: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// clusterNames are the names a certificate of cluster demo in ns must
// cover.
var clusterNames = []string{"*.demo-headless.ns.svc", "demo.ns.svc"}

func tlsSecret(name string, c certs) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": c.crt, "tls.key": c.key, "ca.crt": c.ca}}
}

func TestValidateTLSSecret(t *testing.T) {
	t.Parallel()
	c := testCluster()
	now := time.Now()
	good := newCerts(t, now.Add(-time.Minute), clusterNames...)
	if err := validateTLSSecret(c, tlsSecret("cert", good), now); err != nil {
		t.Fatalf("a cert-manager style Secret: %v", err)
	}
	other := newCerts(t, now.Add(-time.Minute), clusterNames...)
	for name, tc := range map[string]struct {
		mutate func(s *corev1.Secret)
		want   string
	}{
		"no key":         {func(s *corev1.Secret) { delete(s.Data, "tls.key") }, "no tls.key"},
		"no ca":          {func(s *corev1.Secret) { delete(s.Data, "ca.crt") }, "no ca.crt"},
		"garbage cert":   {func(s *corev1.Secret) { s.Data["tls.crt"] = []byte("garbage") }, "tls.crt and tls.key"},
		"key of another": {func(s *corev1.Secret) { s.Data["tls.key"] = other.key }, "tls.crt and tls.key"},
		"garbage ca":     {func(s *corev1.Secret) { s.Data["ca.crt"] = []byte("garbage") }, "ca.crt holds no PEM certificate"},
		"another ca":     {func(s *corev1.Secret) { s.Data["ca.crt"] = other.ca }, "does not verify for demo-0.demo-headless.ns.svc"},
		"brokers uncovered": {func(s *corev1.Secret) {
			w := newCerts(t, now.Add(-time.Minute), "demo.ns.svc")
			*s = *tlsSecret("cert", w)
		}, "does not verify for demo-0.demo-headless.ns.svc"},
		"service uncovered": {func(s *corev1.Secret) {
			w := newCerts(t, now.Add(-time.Minute), clusterNames[0])
			*s = *tlsSecret("cert", w)
		}, "does not verify for demo.ns.svc"},
		"expired": {func(s *corev1.Secret) {
			w := newCerts(t, now.Add(-2*time.Hour), clusterNames...)
			*s = *tlsSecret("cert", w)
		}, "expired"},
	} {
		s := tlsSecret("cert", good)
		tc.mutate(s)
		err := validateTLSSecret(c, s, now)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestCheckSecrets(t *testing.T) {
	t.Parallel()
	now := time.Now()
	good := newCerts(t, now.Add(-time.Minute), clusterNames...)
	secure := func() *streamsv1alpha1.StreamCluster {
		c := testCluster()
		c.UID = "uid-1"
		c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "cert"}
		c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
		return c
	}
	tokens := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tokens", Namespace: "ns"},
		Data: map[string][]byte{"app": []byte("read,write:0123456789abcdef0123")}}
	admin, metrics := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	opToken := resources.OperatorTokenSecret(secure(), admin, metrics)
	reader := func(objs ...client.Object) client.Reader {
		return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	}
	cases := []struct {
		name       string
		objs       []client.Object
		reason     string
		wantSecret string
		token      string
		ca         bool
	}{
		{"all there", []client.Object{tlsSecret("cert", good), tokens, opToken}, "", "", admin, true},
		{"no operator token yet", []client.Object{tlsSecret("cert", good), tokens}, "", "", "", true},
		{"tls missing", []client.Object{tokens, opToken}, streamsv1alpha1.ReasonTLSSecretNotFound, "ns/cert", admin, false},
		{"tls invalid", []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cert", Namespace: "ns"}, Data: map[string][]byte{"tls.crt": good.crt}}, tokens, opToken},
			streamsv1alpha1.ReasonTLSSecretInvalid, "ns/cert", admin, false},
		{"auth missing", []client.Object{tlsSecret("cert", good), opToken}, streamsv1alpha1.ReasonAuthSecretNotFound, "ns/tokens", admin, true},
		{"reserved name", []client.Object{tlsSecret("cert", good), opToken, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tokens", Namespace: "ns"},
			Data: map[string][]byte{"picomq-operator": []byte("admin:0123456789abcdef0123")}}}, streamsv1alpha1.ReasonReservedTokenName, "ns/tokens", admin, true},
	}
	for _, tc := range cases {
		creds, problem, err := checkSecrets(context.Background(), reader(tc.objs...), secure(), now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		switch {
		case tc.reason == "" && problem != nil:
			t.Errorf("%s: problem %+v", tc.name, problem)
		case tc.reason != "" && (problem == nil || problem.reason != tc.reason || !strings.Contains(problem.message, tc.wantSecret)):
			t.Errorf("%s: problem %+v, want %s naming %s", tc.name, problem, tc.reason, tc.wantSecret)
		}
		if creds.Token != tc.token || (len(creds.CA) > 0) != tc.ca {
			t.Errorf("%s: token %q, CA %v; want %q, %v", tc.name, creds.Token, len(creds.CA) > 0, tc.token, tc.ca)
		}
	}
	// A token Secret of the same name that the cluster does not control
	// is not trusted.
	foreign := opToken.DeepCopy()
	foreign.OwnerReferences = nil
	if creds, _, _ := checkSecrets(context.Background(), reader(tlsSecret("cert", good), tokens, foreign), secure(), now); creds.Token != "" {
		t.Errorf("a token Secret the cluster does not own was used")
	}
}

func TestEnsureOperatorToken(t *testing.T) {
	t.Parallel()
	c := testCluster()
	c.UID = "uid-1"
	c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
	cl := fake.NewClientBuilder().WithScheme(scheme).Build()
	ctx := context.Background()
	tok, created, err := ensureOperatorToken(ctx, cl, cl, c)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("first: %q %v %v", tok, created, err)
	}
	again, created, err := ensureOperatorToken(ctx, cl, cl, c)
	if err != nil || created || again != tok {
		t.Fatalf("second: %q %v %v: the token must not rotate", again, created, err)
	}
	var s corev1.Secret
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "demo-operator-token"}, &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data["picomq-operator"]) != "admin:"+tok || !metav1.IsControlledBy(&s, c) {
		t.Errorf("Secret %v owners %v", s.Data, s.OwnerReferences)
	}
	// Broken by hand: repaired with a new token.
	s.Data["picomq-operator"] = []byte("admin:short")
	if err := cl.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	fixed, created, err := ensureOperatorToken(ctx, cl, cl, c)
	if err != nil || !created || fixed == tok || len(fixed) != 64 {
		t.Errorf("repair: %q %v %v", fixed, created, err)
	}
	// Someone else's Secret of that name is left alone, and said so.
	other := testCluster()
	other.Name, other.UID = "other", "uid-2"
	if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other-operator-token", Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ensureOperatorToken(ctx, cl, cl, other); err == nil || !strings.Contains(err.Error(), "not the operator's") {
		t.Errorf("foreign Secret: %v", err)
	}
}

func TestCheckTierSecrets(t *testing.T) {
	t.Parallel()
	spec := func() *streamsv1alpha1.StreamCluster {
		c := testCluster()
		c.Spec.TieredStorage = &streamsv1alpha1.TieredStorageSpec{Endpoint: "https://s3.example.com", Bucket: "b-1",
			CredentialsSecret: streamsv1alpha1.TierCredentials{Name: "s3"}, CASecret: &streamsv1alpha1.SecretKeyRef{Name: "s3-ca"}}
		return c
	}
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	creds := secret("s3", map[string]string{"accessKeyId": "id", "secretAccessKey": "secret"})
	ca := secret("s3-ca", map[string]string{"ca.crt": "pem"})
	cases := []struct {
		name, want string
		objs       []client.Object
	}{
		{"all there", "", []client.Object{creds, ca}},
		{"no credentials", "spec.tieredStorage.credentialsSecret: Secret ns/s3 does not exist", []client.Object{ca}},
		{"no secret key", "has no key secretAccessKey", []client.Object{secret("s3", map[string]string{"accessKeyId": "id"}), ca}},
		{"no CA", "spec.tieredStorage.caSecret: Secret ns/s3-ca does not exist", []client.Object{creds}},
	}
	for _, tc := range cases {
		_, problem, err := checkSecrets(context.Background(), fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build(), spec(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.want == "" && problem != nil:
			t.Errorf("%s: %+v", tc.name, problem)
		case tc.want != "" && (problem == nil || problem.reason != streamsv1alpha1.ReasonTieredStorageSecretNotFound || !strings.Contains(problem.message, tc.want)):
			t.Errorf("%s: %+v, want %s saying %q", tc.name, problem, streamsv1alpha1.ReasonTieredStorageSecretNotFound, tc.want)
		}
	}
	// The Secrets wake the cluster that names them.
	c := spec()
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(c).Build()
	for _, name := range []string{"s3", "s3-ca"} {
		if reqs := clustersOfSecret(cl)(context.Background(), secret(name, nil)); len(reqs) != 1 || reqs[0].Name != c.Name {
			t.Errorf("Secret %s wakes %v", name, reqs)
		}
	}
}
