package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/certreload"
	"github.com/picomq/picomq/broker/cors"
	"github.com/picomq/picomq/broker/dsapi"
	"github.com/picomq/picomq/broker/framing"
	"github.com/picomq/picomq/broker/routing"
	"github.com/picomq/picomq/broker/settings"
)

// security is the broker's TLS and token check, as its settings ask: each
// part nil when not configured.
type security struct {
	cert   *certreload.Reloader
	ca     *x509.CertPool // nil: the system's roots, and no client certificates asked
	tokens *auth.Tokens
	keys   *auth.SigningKeys // signed read URLs; nil: none
	mw     auth.Middleware
	cors   *cors.Policy
}

// tokenReloadInterval is how often the tokens directory is looked at.
const tokenReloadInterval = time.Second

func loadSecurity(cfg settings.Settings, logger *slog.Logger) (*security, error) {
	s := &security{}
	var err error
	if cfg.TLS.Enabled() {
		if s.cert, err = certreload.New(cfg.TLS.CertFile, cfg.TLS.KeyFile, logger); err != nil {
			return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
		if cfg.TLS.CAFile != "" {
			pem, err := os.ReadFile(cfg.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca-file: %w", err)
			}
			s.ca = x509.NewCertPool()
			if !s.ca.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca-file %s: no PEM certificate in it", cfg.TLS.CAFile)
			}
		}
	}
	if cfg.AuthTokensDir != "" {
		if s.tokens, err = auth.Load(cfg.AuthTokensDir, logger); err != nil {
			return nil, fmt.Errorf("--auth-tokens-dir: %w", err)
		}
		if s.tokens.Len() == 0 {
			logger.Warn("the auth tokens directory holds no valid token: every request but the probes is refused until one is added", "dir", cfg.AuthTokensDir)
		}
		if d := cfg.Access.URLSigningKeysDir; d != "" {
			if s.keys, err = auth.LoadSigningKeys(d, logger); err != nil {
				return nil, fmt.Errorf("--url-signing-keys-dir: %w", err)
			}
			if s.keys.Len() == 0 {
				logger.Warn("the url signing keys directory holds no valid key: no URL is signed or verified until one is added", "dir", d)
			}
		}
		s.mw = auth.Middleware{Tokens: s.tokens, MetricsOpen: cfg.MetricsAuth == "open", AnonymousRead: cfg.Access.AnonymousReadPrefixes,
			Keys: s.keys, MaxBodyBytes: cfg.MaxBodyBytes, Log: logger}
	}
	if s.cors, err = cors.New(cfg.Access.CORSAllowedOrigins, s.tokens != nil); err != nil {
		return nil, fmt.Errorf("--cors-allowed-origins: %w", err)
	}
	// A request another broker routed here answers its client's origin
	// there: headers set here too would reach the page twice.
	s.cors.Skip = func(r *http.Request) bool { return r.Header.Get(routing.RouteHeader) != "" }
	s.cors.Log = logger
	return s, nil
}

// register exports what an operator alerts on: when the certificate in
// force expires (it is re-read as cert-manager renews it, so the gauge
// moves on by itself; an alert fires when it comes within 14 days).
func (s *security) register(reg prometheus.Registerer) {
	if s.cert == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_tls_certificate_expiry_timestamp_seconds",
		Help: "When the broker's TLS certificate in force expires (its NotAfter), in Unix seconds.",
	}, func() float64 {
		c := s.cert.Certificate()
		if c == nil || c.Leaf == nil {
			return 0
		}
		return float64(c.Leaf.NotAfter.Unix())
	}))
}

// run keeps the tokens in step with their directory until ctx ends.
func (s *security) run(ctx context.Context) {
	if s.tokens != nil {
		go s.tokens.Run(ctx, tokenReloadInterval)
	}
	if s.keys != nil {
		go s.keys.Run(ctx, tokenReloadInterval)
	}
}

// wrap puts the token check in front of h (the whole client port: the
// router too, so a request is authenticated by the broker it reaches
// before it is proxied anywhere).
//
// The origin check (CORS) goes outside it: a preflight carries no token,
// and a page must be able to read a 401 or 403 to tell its user why.
func (s *security) wrap(h http.Handler) http.Handler {
	if s.tokens != nil {
		h = s.mw.Wrap(h)
	}
	return s.cors.Wrap(h)
}

// signer is the handler of POST /v1/sign.
func (s *security) signer(logger *slog.Logger) http.Handler {
	return auth.SignHandler{Keys: s.keys, Log: logger, DSPrefix: dsapi.Prefix}
}

// serverTLS is the client port's TLS (nil: plain HTTP).
func (s *security) serverTLS() *tls.Config {
	if s.cert == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.cert.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}
}

// peerServerTLS is the peer port's TLS (nil: plain; then only a
// NetworkPolicy admitting the cluster's own pods protects it). Every peer
// must present a certificate, verified against the CA (without
// --tls-ca-file, the system's roots): the peer API takes metadata commands
// and object copies, and checks no token, so a connection is a peer's only
// when its certificate says so.
func (s *security) peerServerTLS() *tls.Config {
	c := s.serverTLS()
	if c != nil {
		c.ClientCAs, c.ClientAuth = s.ca, tls.RequireAndVerifyClientCert
		c.NextProtos = []string{"http/1.1"} // the peer port's server is HTTP/1.1 only
	}
	return c
}

// clientTLS is how this broker dials its peers (peer port, and other
// brokers' client ports when proxying): the server verified against the
// CA, and this broker's own certificate presented.
func (s *security) clientTLS() *tls.Config {
	if s.cert == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.ca, GetClientCertificate: s.cert.GetClientCertificate}
}

// listenClient opens the client port: TCP, inside TLS when conf is set,
// with every request head checked (framing) before net/http reads it.
// Every layer is composed here: over TLS the handshake comes first (ALPN
// decides between HTTP/2, which net/http frames itself, and HTTP/1.1,
// whose decrypted heads the checks see); on plain TCP a connection opening
// with HTTP/2's preface (h2c) passes through the checks unread.
func listenClient(addr string, conf *tls.Config, l settings.Limits) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	lim := framing.Limits{MaxHeaderBytes: int(l.MaxHeaderBytes), MaxHeaders: l.MaxHeaders, MaxURLBytes: int(l.MaxURLBytes)}
	if conf != nil {
		return framing.ListenTLS(ln, conf, lim, l.ReadHeaderTimeout), nil
	}
	return framing.Listen(ln, lim), nil
}

// clientProtocols is what the client port speaks: HTTP/1.1, HTTP/2 over
// TLS (by ALPN) and HTTP/2 with prior knowledge on plain TCP (h2c).
func clientProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// http2Config bounds an HTTP/2 connection: how many requests it may have
// open at once (long-polls and SSE readers included). Its header lists are
// bounded by the server's MaxHeaderBytes.
func http2Config(l settings.Limits) *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: l.MaxConcurrentStreams}
}
