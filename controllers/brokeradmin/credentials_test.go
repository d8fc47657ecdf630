package brokeradmin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// testCA is a CA that signs server certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serverCert is a certificate for names (DNS names or IPs) signed by ca.
func (ca *testCA) serverCert(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tmpl.DNSNames = nil
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// quiet drops the servers' logs of the handshakes the tests fail on
// purpose.
var quiet = log.New(io.Discard, "", 0)

const testToken = "0123456789abcdef0123456789abcdef"

// tlsBroker serves the node status over TLS with a certificate for
// demo-0.demo-headless.ns.svc, answering 401 without the test token as a
// broker does. The returned Broker dials it by that name (resolved to the
// server's loopback address).
func tlsBroker(t *testing.T, ca *testCA) (Broker, *HTTP) {
	t.Helper()
	const host = "demo-0.demo-headless.ns.svc"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.Header().Set("WWW-Authenticate", "Bearer")
			w.Header().Set("Content-Type", wire.ProblemContentType)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type":"about:blank","title":"UNAUTHENTICATED","status":401,"code":"0x00100901","detail":"missing or unknown bearer token"}`)
			return
		}
		fmt.Fprint(w, `{"nodeId":"demo-0","raftState":"Leader","leader":"demo-0","ready":true}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t, host)}}
	srv.Config.ErrorLog = quiet
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	// The name the operator dials, resolved to the test server: the
	// certificate is verified against it, not against 127.0.0.1.
	dialer := &net.Dialer{Timeout: 3 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		if strings.HasPrefix(a, host+":") {
			a = addr
		}
		return dialer.DialContext(ctx, network, a)
	}}
	h := &HTTP{Client: &http.Client{Transport: tr}, Timeout: 5 * time.Second}
	return Broker{Namespace: "ns", Cluster: "demo", Pod: "demo-0", URL: "https://" + host + ":" + port}, h
}

func TestHTTPVerifiesTheBrokerAndSendsTheToken(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	b, h := tlsBroker(t, ca)

	b.Credentials = Credentials{CA: ca.pem, Token: testToken}
	st, err := h.Status(context.Background(), b)
	if err != nil || st.NodeID != "demo-0" {
		t.Fatalf("right CA and token: %+v, %v", st, err)
	}

	// Another CA: the handshake fails, whatever the token.
	other := newTestCA(t)
	b.Credentials = Credentials{CA: other.pem, Token: testToken}
	_, err = h.Status(context.Background(), b)
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) {
		t.Errorf("wrong CA: %v, want an unknown authority error", err)
	}

	// No CA: the system roots do not know the test CA either.
	b.Credentials = Credentials{Token: testToken}
	if _, err := h.Status(context.Background(), b); err == nil || !errors.As(err, &unknown) {
		t.Errorf("no CA: %v, want an unknown authority error", err)
	}

	// The right CA but no token: the broker's 401, said plainly.
	b.Credentials = Credentials{CA: ca.pem}
	_, err = h.Status(context.Background(), b)
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "operator-token") {
		t.Errorf("no token: %v, want ErrUnauthenticated naming the 401 and the token Secret", err)
	}
	if IsUnreachable(err) || IsNotSupported(err) {
		t.Errorf("no token: %v read as unreachable or unsupported", err)
	}
	b.Credentials = Credentials{CA: ca.pem, Token: strings.Repeat("x", 32)}
	if _, err := h.Status(context.Background(), b); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("wrong token: %v, want ErrUnauthenticated", err)
	}
}

// The host name verified is the one dialled: a certificate for another
// name is refused even when it chains to the right CA.
func TestHTTPVerifiesTheHostName(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"nodeId":"demo-0"}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t, "demo-1.demo-headless.ns.svc")}}
	srv.Config.ErrorLog = quiet
	srv.StartTLS()
	t.Cleanup(srv.Close)
	b := Broker{Namespace: "ns", Pod: "demo-0", URL: srv.URL, Credentials: Credentials{CA: ca.pem}}
	_, err := NewHTTP().Status(context.Background(), b)
	var host x509.HostnameError
	if err == nil || !errors.As(err, &host) {
		t.Errorf("certificate for another name: %v, want a host name error", err)
	}
}

func TestCredentialsRefuseAnEmptyCA(t *testing.T) {
	t.Parallel()
	b := Broker{Namespace: "ns", Pod: "demo-0", URL: "https://demo-0.demo-headless.ns.svc:4437", Credentials: Credentials{CA: []byte("not pem")}}
	if _, err := NewHTTP().Status(context.Background(), b); !errors.Is(err, errNoCA) {
		t.Errorf("a CA bundle without certificates: %v", err)
	}
	if _, err := NewClientFactory().For(b.URL, b.Credentials); !errors.Is(err, errNoCA) {
		t.Errorf("stream admin with a CA bundle without certificates: %v", err)
	}
}

// The Stream controller's client: same verification, same token, through
// the broker client's transport.
func TestClientFactoryCredentials(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	var auth []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", wire.ProblemContentType)
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"title":"STREAM_NOT_FOUND","status":404,"code":"0x00010001"}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t, "127.0.0.1")}}
	srv.Config.ErrorLog = quiet
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL

	f := NewClientFactory()
	a, err := f.For(url, Credentials{CA: ca.pem, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	if a2, _ := f.For(url, Credentials{CA: ca.pem, Token: testToken}); a2 != a {
		t.Error("same endpoint and credentials: a new client")
	}
	if a3, _ := f.For(url, Credentials{CA: ca.pem, Token: "other-token-0123456789abcdef"}); a3 == a {
		t.Error("another token: the same client")
	}
	if _, err = a.GetStream(context.Background(), "s"); err == nil || IsUnreachable(err) || !strings.Contains(err.Error(), "status=404") {
		t.Fatalf("verified broker: %v, want its answer (404)", err)
	}
	if len(auth) != 1 || auth[0] != "Bearer "+testToken {
		t.Errorf("Authorization sent %q", auth)
	}
	bad, _ := f.For(url, Credentials{CA: newTestCA(t).pem, Token: testToken})
	if _, err := bad.GetStream(context.Background(), "s"); err == nil || len(auth) != 1 {
		t.Errorf("wrong CA: %v, %d requests reached the server", err, len(auth))
	}
}
