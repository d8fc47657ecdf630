package clusterharness

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/picomq/picomq/broker/certreload/certgen"
	"github.com/picomq/picomq/broker/client"
)

// Security runs the brokers with TLS and bearer tokens.
type Security struct {
	// TLS: a CA made for the cluster signs a certificate for every broker
	// (127.0.0.1 and localhost); the brokers serve HTTPS on the client
	// port and mutual TLS on the peer port (--tls-ca-file).
	TLS bool
	// Tokens: the brokers check tokens of a directory the harness holds
	// (SetToken, RemoveToken), which starts with one admin token the
	// harness's own calls present (HarnessToken).
	Tokens bool
}

// HarnessTokenName names the token the harness's probes present.
const HarnessTokenName = "harness"

// security is a cluster's CA and tokens directory.
type security struct {
	ca        *certgen.CA
	caFile    string
	tokensDir string
	token     string // the harness's own, admin
}

// harnessAuth is what the harness's own HTTP client trusts and presents,
// by broker address, for every cluster of the test binary.
var harnessAuth = struct {
	sync.Mutex
	pool   *x509.CertPool
	tokens map[string]string // host:port -> token
}{pool: x509.NewCertPool(), tokens: map[string]string{}}

// harnessTransport adds the cluster's harness token to the harness's own
// requests, and verifies a TLS broker against the CAs of the clusters.
type harnessTransport struct{ base *http.Transport }

func (h harnessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	harnessAuth.Lock()
	tok := harnessAuth.tokens[req.URL.Host]
	harnessAuth.Unlock()
	if tok != "" && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return h.base.RoundTrip(req)
}

func newHarnessTransport() http.RoundTripper {
	return harnessTransport{base: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{
			// Verified below, against the pool as it is at the handshake
			// (clusters add their CAs as they start).
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("clusterharness: no server certificate")
				}
				harnessAuth.Lock()
				pool := harnessAuth.pool.Clone()
				harnessAuth.Unlock()
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: cs.ServerName})
				return err
			},
		},
	}}
}

// setupSecurity makes the CA, the brokers' certificates and the tokens
// directory under root.
func (c *Cluster) setupSecurity(root string) error {
	o := c.opts.Security
	if o == nil || (!o.TLS && !o.Tokens) {
		return nil
	}
	s := &security{}
	if o.TLS {
		ca, err := certgen.NewCA("clusterharness CA")
		if err != nil {
			return err
		}
		s.ca, s.caFile = ca, filepath.Join(root, "ca.crt")
		if err := os.WriteFile(s.caFile, ca.PEM, 0o600); err != nil {
			return err
		}
		harnessAuth.Lock()
		harnessAuth.pool.AppendCertsFromPEM(ca.PEM)
		harnessAuth.Unlock()
		for _, b := range c.brokers {
			b.mu.Lock()
			b.https = true
			b.mu.Unlock()
			if err := os.MkdirAll(b.tlsDir(), 0o700); err != nil {
				return err
			}
			if _, err := ca.WriteFiles(b.tlsDir(), b.Name, "127.0.0.1", "localhost"); err != nil {
				return err
			}
		}
	}
	if o.Tokens {
		s.tokensDir = filepath.Join(root, "auth")
		if err := os.MkdirAll(s.tokensDir, 0o700); err != nil {
			return err
		}
		s.token = "harness-" + randomHex(16)
		if err := writeToken(s.tokensDir, HarnessTokenName, "admin:"+s.token); err != nil {
			return err
		}
	}
	c.sec = s
	return nil
}

// registerAddrs tells the harness's client which token each broker wants.
func (c *Cluster) registerAddrs() {
	if c.sec == nil || c.sec.token == "" {
		return
	}
	harnessAuth.Lock()
	defer harnessAuth.Unlock()
	for _, b := range c.brokers {
		harnessAuth.tokens[b.ClientAddr()] = c.sec.token
	}
}

// securityArgs are the TLS and token flags of broker b.
func (c *Cluster) securityArgs(b *Broker) []string {
	if c.sec == nil {
		return nil
	}
	var args []string
	if c.sec.ca != nil {
		d := b.tlsDir()
		args = append(args, "--tls-cert-file", filepath.Join(d, "tls.crt"), "--tls-key-file", filepath.Join(d, "tls.key"), "--tls-ca-file", c.sec.caFile)
	}
	if c.sec.tokensDir != "" {
		args = append(args, "--auth-tokens-dir", c.sec.tokensDir)
	}
	return args
}

func (b *Broker) tlsDir() string { return filepath.Join(filepath.Dir(b.DataDir), "tls") }

// CAFile is the cluster's CA certificate ("" without TLS).
func (c *Cluster) CAFile() string {
	if c.sec == nil {
		return ""
	}
	return c.sec.caFile
}

// TLSConfig trusts the cluster's CA (nil without TLS).
func (c *Cluster) TLSConfig() *tls.Config {
	if c.sec == nil || c.sec.ca == nil {
		return nil
	}
	return &tls.Config{RootCAs: c.sec.ca.Pool()}
}

// HarnessToken is the admin token the harness presents ("" without
// tokens).
func (c *Cluster) HarnessToken() string {
	if c.sec == nil {
		return ""
	}
	return c.sec.token
}

// SetToken writes the token file name holding "<scopes>:<token>" (through
// a rename, as a Secret volume updates).
func (c *Cluster) SetToken(name, scopes, token string) {
	c.t.Helper()
	if c.sec == nil || c.sec.tokensDir == "" {
		c.t.Fatal("clusterharness: SetToken without Security.Tokens")
	}
	if err := writeToken(c.sec.tokensDir, name, scopes+":"+token); err != nil {
		c.t.Fatal(err)
	}
}

// RemoveToken removes the token file name.
func (c *Cluster) RemoveToken(name string) {
	c.t.Helper()
	if err := os.Remove(filepath.Join(c.sec.tokensDir, name)); err != nil {
		c.t.Fatal(err)
	}
}

// RotateCert gives broker i a new certificate of the cluster's CA, as
// cert-manager would: the files are replaced, the broker keeps running.
func (c *Cluster) RotateCert(i int) {
	c.t.Helper()
	b := c.brokers[i]
	if _, err := c.sec.ca.WriteFiles(b.tlsDir(), b.Name, "127.0.0.1", "localhost"); err != nil {
		c.t.Fatal(err)
	}
}

func writeToken(dir, name, content string) error {
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

func randomHex(n int) string {
	b := make([]byte, n)
	f, err := os.Open("/dev/urandom")
	if err == nil {
		_, err = f.Read(b)
		f.Close()
	}
	if err != nil {
		panic(fmt.Sprintf("clusterharness: random: %v", err))
	}
	return fmt.Sprintf("%x", b)
}

// ClientOptions are what a client of the cluster's brokers needs: its CA,
// and the harness's admin token.
func (c *Cluster) ClientOptions() []client.Option {
	if c.sec == nil {
		return nil
	}
	var opts []client.Option
	if conf := c.TLSConfig(); conf != nil {
		opts = append(opts, client.WithTLSConfig(conf))
	}
	if c.sec.token != "" {
		opts = append(opts, client.WithToken(c.sec.token))
	}
	return opts
}
