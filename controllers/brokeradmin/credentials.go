package brokeradmin

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/picomq/picomq/broker/client"
)

// Credentials are what the operator verifies a cluster's brokers with and
// presents to them: the CA of spec.tls's Secret (ca.crt) and the operator's
// own token (spec.auth). The zero value is a cluster without either.
type Credentials struct {
	// CA is the PEM bundle the brokers' certificates must chain to, for an
	// https URL; the host name verified is the one dialled (the pod's name
	// in the headless Service, or the client Service's). Nil: the system
	// roots.
	CA []byte
	// Token is sent as "Authorization: Bearer <token>"; "" sends none.
	Token string
}

// key tells credentials apart in the per-credentials caches without
// keeping the token itself as a map key.
func (c Credentials) key() string {
	h := sha256.New()
	h.Write(c.CA)
	h.Write([]byte{0})
	h.Write([]byte(c.Token))
	return hex.EncodeToString(h.Sum(nil))
}

// errNoCA is a CA bundle with no certificate in it.
var errNoCA = errors.New("the CA bundle (ca.crt) holds no PEM certificate")

// tlsConfig verifies servers against ca (the system roots when nil).
func tlsConfig(ca []byte) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errNoCA
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// bearer adds the operator's token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// withCredentials returns a client that talks to the brokers with creds
// over a transport of its own (base's transport cloned for TLS), or base
// itself for the zero Credentials.
func withCredentials(base *http.Client, creds Credentials) (*http.Client, error) {
	if len(creds.CA) == 0 && creds.Token == "" {
		return base, nil
	}
	var rt http.RoundTripper = base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if len(creds.CA) > 0 {
		cfg, err := tlsConfig(creds.CA)
		if err != nil {
			return nil, err
		}
		rt, err = withTLS(rt, cfg)
		if err != nil {
			return nil, err
		}
	}
	if creds.Token != "" {
		rt = bearer{token: creds.Token, next: rt}
	}
	// No redirect is followed: the token would go wherever it points.
	return &http.Client{Transport: rt, Timeout: base.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}, nil
}

// withTLS is rt (a fresh copy) verifying servers with cfg.
func withTLS(rt http.RoundTripper, cfg *tls.Config) (http.RoundTripper, error) {
	switch t := rt.(type) {
	case *http.Transport:
		c := t.Clone()
		c.TLSClientConfig = cfg
		return c, nil
	case *client.Transport:
		// The broker client's transport sends https through Fallback.
		fb, err := withTLS(orDefault(t.Fallback), cfg)
		if err != nil {
			return nil, err
		}
		return &client.Transport{Fallback: fb, Proxy: t.Proxy, DialContext: t.DialContext,
			MaxIdlePerHost: t.MaxIdlePerHost, IdleTimeout: t.IdleTimeout}, nil
	}
	return nil, fmt.Errorf("cannot configure TLS on a %T", rt)
}

func orDefault(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		return http.DefaultTransport
	}
	return rt
}
