package controlplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what the components trust and present: a CA, the API server's
// serving certificate, one admin client certificate (system:masters) that
// every component uses, and the service-account key pair.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// CA and friends name the files writePKI writes.
const (
	caCert      = "ca.crt"
	caKey       = "ca.key"
	serverCert  = "apiserver.crt"
	serverKey   = "apiserver.key"
	adminCert   = "admin.crt"
	adminKey    = "admin.key"
	saKey       = "sa.key"
	saPublicKey = "sa.pub"
)

// loadOrWritePKI keeps the certificates an earlier start wrote in dir
// when they still serve addr for a month at least, so that a restarted
// stack's tokens and kubeconfigs stay valid; otherwise it writes new ones.
func loadOrWritePKI(dir string, addr, serviceIP net.IP) (pki, error) {
	p := pki{dir: dir}
	if raw, err := os.ReadFile(p.path(serverCert)); err == nil {
		if block, _ := pem.Decode(raw); block != nil {
			if cert, err := x509.ParseCertificate(block.Bytes); err == nil &&
				time.Until(cert.NotAfter) > 30*24*time.Hour && cert.VerifyHostname(addr.String()) == nil {
				complete := true
				for _, f := range []string{caCert, caKey, serverKey, adminCert, adminKey, saKey, saPublicKey} {
					if _, err := os.Stat(p.path(f)); err != nil {
						complete = false
					}
				}
				if complete {
					return p, nil
				}
			}
		}
	}
	return writePKI(dir, addr, serviceIP)
}

// writePKI generates the stack's certificates and keys into dir, valid
// for a year; the serving certificate names addr, 127.0.0.1 and
// serviceIP, the first address of the service range (the "kubernetes"
// Service).
func writePKI(dir string, addr, serviceIP net.IP) (pki, error) {
	p := pki{dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	now := time.Now()
	ca, caPriv, err := newCert(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "picomq-dev-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}, nil, nil)
	if err != nil {
		return p, err
	}
	if err := writeCert(p.path(caCert), p.path(caKey), ca, caPriv); err != nil {
		return p, err
	}
	server, serverPriv, err := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), addr, serviceIP},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}, ca, caPriv)
	if err != nil {
		return p, err
	}
	if err := writeCert(p.path(serverCert), p.path(serverKey), server, serverPriv); err != nil {
		return p, err
	}
	admin, adminPriv, err := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "picomq-dev-admin", Organization: []string{"system:masters"}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caPriv)
	if err != nil {
		return p, err
	}
	if err := writeCert(p.path(adminCert), p.path(adminKey), admin, adminPriv); err != nil {
		return p, err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return p, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return p, err
	}
	if err := writePEM(p.path(saKey), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return p, err
	}
	return p, writePEM(p.path(saPublicKey), "PUBLIC KEY", pub)
}

// newCert signs tmpl with parent's key (self-signed when parent is nil)
// over a new RSA key.
func newCert(tmpl, parent *x509.Certificate, parentKey *rsa.PrivateKey) (*x509.Certificate, *rsa.PrivateKey, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane: sign %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func writeCert(certPath, keyPath string, cert *x509.Certificate, key *rsa.PrivateKey) error {
	if err := writePEM(certPath, "CERTIFICATE", cert.Raw); err != nil {
		return err
	}
	return writePEM(keyPath, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
