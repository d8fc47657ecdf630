// Package certreload serves a TLS certificate from a pair of files and
// takes up a new pair when they change (cert-manager rotates a Secret's
// files in place), without a restart and without touching the connections
// already open: a handshake uses the pair in force when it starts.
package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is how often at most the files are looked at.
const DefaultInterval = time.Second

// Reloader holds the certificate of CertFile and KeyFile.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger
	interval          time.Duration
	now               func() time.Time

	cert atomic.Pointer[tls.Certificate]

	mu      sync.Mutex // one look at the files at a time
	checked time.Time  // last look at the files
	seen    string     // their stat when the pair in force was read, or when a bad pair was refused
}

// New reads the pair; a pair that cannot be loaded is an error (the broker
// does not start without one). log may be nil.
func New(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log, interval: DefaultInterval, now: time.Now}
	stat, err := r.stat()
	if err != nil {
		return nil, err
	}
	c, err := load(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert.Store(c)
	r.seen, r.checked = stat, r.now()
	return r, nil
}

// Certificate is the pair in force, after a look at the files if the last
// one is older than the interval. It never fails once New succeeded: a new
// pair that does not load is logged and the old one kept.
func (r *Reloader) Certificate() *tls.Certificate {
	r.maybeReload()
	return r.cert.Load()
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// GetClientCertificate is tls.Config.GetClientCertificate: a broker dialling
// a peer presents the same pair.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// Reload looks at the files now, whatever the interval, and reports
// whether a new pair was taken up.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked()
}

func (r *Reloader) maybeReload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.now().Sub(r.checked) < r.interval {
		return
	}
	_, _ = r.reloadLocked()
}

func (r *Reloader) reloadLocked() (bool, error) {
	r.checked = r.now()
	stat, err := r.stat()
	if err != nil {
		// Mid-rotation, a file may be missing for a moment: keep the pair.
		return false, err
	}
	if stat == r.seen {
		return false, nil
	}
	c, err := load(r.certFile, r.keyFile)
	if err != nil {
		// The cert may be written before its key: the next look, after
		// both changed, loads them; until then the old pair serves.
		r.log.Warn("the new TLS certificate or key does not load: serving the previous pair", "certFile", r.certFile, "keyFile", r.keyFile, "err", err)
		r.seen = stat
		return false, err
	}
	r.cert.Store(c)
	r.seen = stat
	r.log.Info("TLS certificate reloaded", "certFile", r.certFile, "notAfter", c.Leaf.NotAfter, "subject", c.Leaf.Subject.String())
	return true, nil
}

// stat sums up both files as stat (which follows a Secret volume's links)
// sees them.
func (r *Reloader) stat() (string, error) {
	var s string
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

func load(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	if len(c.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	return &c, nil
}
