package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
)

// Client calls other brokers' peer HTTP API. URLs name a peer by its
// configuration address (Advertise); the transport resolves it at each new
// connection.
type Client struct {
	d  Dialer
	hc *http.Client
}

// NewClient returns a client dialling through d.
func NewClient(d Dialer) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, hostport string) (net.Conn, error) {
			return d.Dial(ctx, addrOf(d.Addresses, hostport))
		},
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       time.Minute,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	return &Client{d: d, hc: &http.Client{Transport: tr}}
}

// addrOf turns the host:port the transport dials back into a configuration
// address: a static name had no port, and the URL gave it :80.
func addrOf(a Addresses, hostport string) string {
	if a.Static != nil {
		if host, port, err := net.SplitHostPort(hostport); err == nil && port == "80" {
			return host
		}
	}
	return hostport
}

// URL is the URL of path on the peer at configuration address addr.
func (c *Client) URL(addr, path string) string { return "http://" + addr + path }

// Do sends req and returns its response; a refusal (status 400 and above)
// with a coded problem body comes back as that coded error, the response
// closed.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if coded, err := errs.Unmarshal(body); err == nil {
		return nil, coded
	}
	return nil, &HTTPError{Method: req.Method, Path: req.URL.Path, Status: resp.Status, Code: resp.StatusCode, Body: strings.TrimSpace(string(body))}
}

// HTTPError is a peer's failed answer that is no coded problem: a route an
// older build lacks (404), a proxy's error page.
type HTTPError struct {
	Method, Path, Status string
	Code                 int
	Body                 string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("peer: %s %s: %s: %s", e.Method, e.Path, e.Status, e.Body)
}

// CloseIdle drops idle connections (a peer moved).
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// Server serves the peer HTTP API on a Mux's HTTP listener.
type Server struct {
	mux *http.ServeMux
	srv *http.Server
}

// NewServer returns an empty peer API; add its routes with Handle before
// Serve.
func NewServer(log *slog.Logger) *Server {
	mux := http.NewServeMux()
	return &Server{mux: mux, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
}

// Handle registers a route (a ServeMux pattern).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Serve serves ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops serving, letting requests in flight finish within ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
