// Package client is PicoMQ's remote engine: a Go client of the broker's
// HTTP API (broker/httpapi) giving the admin calls and, per named stream, a
// stream.Stream with all five siblings (Waker, Seeker, Trimmer, Compactor,
// Committer).
//
//	s, err := client.Open(ctx, "http://localhost:4437", "shop/orders", stream.PolicyValue{Partitions: 4})
//	v, err := s.Append(ctx, []stream.RecordValue{{Key: orderID, Payload: body}})
//	entries, err := s.Read(ctx, v.Partition, from, 100)
//
// Refusals come back as the coded errors the broker returned, decoded with
// errs.Unmarshal: errors.Is(err, stream.RecordTooLarge) holds and the fields
// (sizes, offsets, field names) are intact. A broker that cannot be
// reached (its name does not resolve, no connection opens) is
// BROKER_UNREACHABLE, retriable, wrapping the cause; another transport
// failure is STREAM_BACKEND_FAILED wrapping it; a ctx that ends returns its
// cause.
//
// The package depends on neither the broker nor its metadata log.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

// Client talks to one broker (or a Service in front of brokers). It is safe
// for concurrent use and should be reused: it keeps its connections alive.
type Client struct {
	base      string
	hc        *http.Client
	userAgent string
	authz     string      // "Bearer <token>", or ""
	tls       *tls.Config // for https:// brokers (nil: the system's roots)

	appendsInFlight int
	coalesce        *coalescer // nil: every append is its own request
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc instead of
// one made by NewHTTPClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends token as the bearer token of every request
// (Authorization: Bearer), for a broker started with --auth-tokens-dir.
func WithToken(token string) Option {
	return func(c *Client) {
		c.authz = ""
		if token != "" {
			c.authz = "Bearer " + token
		}
	}
}

// WithTLSConfig verifies an https:// broker with conf (its RootCAs: the
// CA that signed the broker's certificate; TLSConfigFromCAFile makes one).
// It applies to the client New makes; one given by WithHTTPClient brings
// its own.
func WithTLSConfig(conf *tls.Config) Option { return func(c *Client) { c.tls = conf } }

// TLSConfigFromCAFile is a TLS configuration trusting the CA certificates
// of a PEM file (a cluster's ca.crt), beside none other.
func TLSConfigFromCAFile(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// WithUserAgent sets the User-Agent of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// NewHTTPClient returns the http.Client New uses by default: a Transport
// keeping up to 64 idle connections per broker, a 5s dial timeout and no
// overall timeout — an append may legitimately wait BlockTimeout for room,
// so deadlines come from the ctx of each call. HTTPS and proxied requests
// (HTTP_PROXY and the like) go through net/http's Transport.
func NewHTTPClient() *http.Client { return newHTTPClient(nil) }

func newHTTPClient(conf *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &Transport{
		Proxy:          http.ProxyFromEnvironment,
		DialContext:    dialer.DialContext,
		MaxIdlePerHost: 64,
		IdleTimeout:    90 * time.Second,
		Fallback: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			TLSClientConfig:       conf,
			ForceAttemptHTTP2:     conf != nil, // as with no configuration given
		},
	}}
}

// New returns a client of the broker at baseURL (http://host:4437).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, stream.StreamMisconfigured.With("field", "baseURL", "value", baseURL, "reason", "not an http(s) URL with a host")
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), userAgent: "picomq-go-client", appendsInFlight: DefaultAppendsInFlight}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = newHTTPClient(c.tls)
	}
	if c.appendsInFlight > 0 {
		c.coalesce = &coalescer{c: c, max: c.appendsInFlight}
	}
	return c, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// request is one call to the API.
type request struct {
	op          string // for errors: "append", "admin.create", ...
	method      string
	path        string // escaped
	query       url.Values
	header      http.Header
	body        []byte
	contentType string
	accept      string
	// recycle, when set, receives body once the transport is done with it
	// (it closed the request's body): body came from a pool.
	recycle func([]byte)
}

// recycledBody is a request body whose buffer goes back to its pool once
// the transport closes it: every RoundTripper closes a request's body when
// it has written it or given up (net/http's may do so after RoundTrip
// returns), and reads it no more.
type recycledBody struct {
	mu      sync.Mutex
	r       *bytes.Reader // nil once closed
	buf     []byte
	recycle func([]byte)
}

func (b *recycledBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r == nil {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.Read(p)
}

// Len and WriteTo make it a wholeBody: Transport writes the buffer with
// the request's head, from where it is.
func (b *recycledBody) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r == nil {
		return 0
	}
	return b.r.Len()
}

func (b *recycledBody) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r == nil {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.WriteTo(w)
}

func (b *recycledBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r != nil {
		b.r = nil
		b.recycle(b.buf)
		b.buf = nil
	}
	return nil
}

// response is a 2xx answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends r and returns its 2xx answer, or the refusal it got as the
// coded error it carries.
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	switch {
	case r.recycle != nil:
		body = &recycledBody{r: bytes.NewReader(r.body), buf: r.body, recycle: r.recycle}
	case r.body != nil || r.method == http.MethodPost || r.method == http.MethodPut || r.method == http.MethodPatch:
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		if r.recycle != nil {
			r.recycle(r.body)
		}
		return nil, stream.StreamMisconfigured.Wrap(err, "field", "request", "op", r.op)
	}
	if r.recycle != nil {
		// Not a type NewRequest knows: its length is set here, and no
		// GetBody, so no transport reads the buffer again after Close.
		req.ContentLength = int64(len(r.body))
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	} else {
		req.Header.Set("Accept", wire.JSONContentType+", "+wire.ProblemContentType)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if c.authz != "" {
		req.Header.Set("Authorization", c.authz)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if u := Unreachable(c.base, "http."+r.op, err); u != nil {
			return nil, u
		}
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "http."+r.op)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, stream.StreamBackendFailed.Wrap(err, "op", "http."+r.op, "status", resp.StatusCode)
	}
	if resp.StatusCode/100 != 2 {
		return nil, problemOf(r.op, resp, data)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// problemOf decodes a refusal. A body that is not a problem (a proxy's
// page, say) becomes STREAM_BACKEND_FAILED with the status.
func problemOf(op string, resp *http.Response, data []byte) error {
	if e, err := errs.Unmarshal(data); err == nil {
		return e
	}
	text := strings.TrimSpace(string(data))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return stream.StreamBackendFailed.With("op", "http."+op, "status", resp.StatusCode, "body", text)
}

// decode reads a JSON answer into v.
func decode(op string, resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "http."+op+".decode")
	}
	return nil
}

// Ready returns nil when the broker answers /readyz with 200, and its
// NOT_READY refusal otherwise.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, request{op: "readyz", method: http.MethodGet, path: "/readyz", accept: "text/plain, " + wire.ProblemContentType})
	return err
}

// Node returns the broker's node status.
func (c *Client) Node(ctx context.Context) (wire.NodeInfo, error) {
	var n wire.NodeInfo
	resp, err := c.do(ctx, request{op: "admin.node", method: http.MethodGet, path: wire.NodePath})
	if err != nil {
		return n, err
	}
	return n, decode("admin.node", resp, &n)
}

// StreamConfig is a named stream's configuration.
type StreamConfig struct {
	// ContentType defaults to application/octet-stream.
	ContentType string
	Policy      stream.PolicyValue
	// TTL is a sliding lifetime: the stream is deleted once nobody used it
	// for that long. Zero: none.
	TTL time.Duration
	// ExpiresAt is an absolute end of life. Zero: none.
	ExpiresAt time.Time
}

// StreamInfo describes a named stream.
type StreamInfo struct {
	Name           string
	ContentType    string
	Policy         stream.PolicyValue
	PartitionCount int
	TTL            time.Duration
	ExpiresAt      time.Time
	CreatedAt      time.Time
	LastAccess     time.Time
	Closed         bool
	Producers      map[string]wire.Producer
	// Partitions is filled by CreateStream, GetStream and UpdatePolicy, not
	// by ListStreams.
	Partitions []wire.PartitionInfo
}

func infoOf(w wire.StreamInfo) (StreamInfo, error) {
	p, err := w.Policy.Value()
	if err != nil {
		return StreamInfo{}, err
	}
	ttl, err := wire.ParseDuration("ttl", w.TTL)
	if err != nil {
		return StreamInfo{}, err
	}
	out := StreamInfo{
		Name: w.Name, ContentType: w.ContentType, Policy: p, PartitionCount: w.PartitionCount, TTL: ttl,
		CreatedAt: w.CreatedAt, LastAccess: w.LastAccess, Closed: w.Closed, Producers: w.Producers, Partitions: w.Partitions,
	}
	if w.ExpiresAt != nil {
		out.ExpiresAt = *w.ExpiresAt
	}
	return out, nil
}

func streamPath(name string) string { return wire.StreamsPrefix + wire.EscapeName(name) }

// CreateStream creates a named stream. created is false when it existed
// with the same configuration; one with another configuration is
// STREAM_EXISTS (the field "field" names what differs). A policy the broker
// refuses is STREAM_MISCONFIGURED by field, as PolicyValue.Validate words it.
func (c *Client) CreateStream(ctx context.Context, name string, cfg StreamConfig) (info StreamInfo, created bool, err error) {
	body := wire.StreamConfig{ContentType: cfg.ContentType, Policy: wire.PolicyOf(cfg.Policy)}
	if cfg.TTL != 0 {
		body.TTL = cfg.TTL.String()
	}
	if !cfg.ExpiresAt.IsZero() {
		t := cfg.ExpiresAt
		body.ExpiresAt = &t
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return StreamInfo{}, false, stream.StreamMisconfigured.Wrap(err, "field", "config")
	}
	resp, err := c.do(ctx, request{op: "admin.create", method: http.MethodPut, path: streamPath(name), body: raw, contentType: wire.JSONContentType})
	if err != nil {
		return StreamInfo{}, false, err
	}
	var w wire.StreamInfo
	if err := decode("admin.create", resp, &w); err != nil {
		return StreamInfo{}, false, err
	}
	info, err = infoOf(w)
	return info, resp.status == http.StatusCreated, err
}

// GetStream returns a named stream with its partitions; a missing one is
// STREAM_NOT_FOUND.
func (c *Client) GetStream(ctx context.Context, name string) (StreamInfo, error) {
	resp, err := c.do(ctx, request{op: "admin.get", method: http.MethodGet, path: streamPath(name)})
	if err != nil {
		return StreamInfo{}, err
	}
	var w wire.StreamInfo
	if err := decode("admin.get", resp, &w); err != nil {
		return StreamInfo{}, err
	}
	return infoOf(w)
}

// DeleteStream deletes a named stream: the name is reusable at once.
func (c *Client) DeleteStream(ctx context.Context, name string) error {
	_, err := c.do(ctx, request{op: "admin.delete", method: http.MethodDelete, path: streamPath(name)})
	return err
}

// ListStreams returns the live named streams whose names start with prefix
// ("" for all), sorted by name, without per-partition detail.
func (c *Client) ListStreams(ctx context.Context, prefix string) ([]StreamInfo, error) {
	var q url.Values
	if prefix != "" {
		q = url.Values{"prefix": {prefix}}
	}
	resp, err := c.do(ctx, request{op: "admin.list", method: http.MethodGet, path: wire.StreamsPath, query: q})
	if err != nil {
		return nil, err
	}
	var l wire.StreamList
	if err := decode("admin.list", resp, &l); err != nil {
		return nil, err
	}
	out := make([]StreamInfo, 0, len(l.Streams))
	for _, w := range l.Streams {
		info, err := infoOf(w)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// UpdatePolicy replaces a stream's policy. Partitions may only grow
// (PARTITIONS_SHRINK); a Stream value opened before keeps the count it
// read.
func (c *Client) UpdatePolicy(ctx context.Context, name string, p stream.PolicyValue) (StreamInfo, error) {
	raw, err := json.Marshal(wire.PolicyUpdate{Policy: wire.PatchOf(p)})
	if err != nil {
		return StreamInfo{}, stream.StreamMisconfigured.Wrap(err, "field", "policy")
	}
	resp, err := c.do(ctx, request{op: "admin.patch", method: http.MethodPatch, path: streamPath(name), body: raw, contentType: wire.JSONContentType})
	if err != nil {
		return StreamInfo{}, err
	}
	var w wire.StreamInfo
	if err := decode("admin.patch", resp, &w); err != nil {
		return StreamInfo{}, err
	}
	return infoOf(w)
}

// errNoPartitions guards a broker answer without partitions.
var errNoPartitions = errors.New("the broker reported a stream with no partition")

// Stream returns the named stream as a stream.Stream. It asks the broker
// for its partition count once: a missing stream is STREAM_NOT_FOUND.
func (c *Client) Stream(ctx context.Context, name string) (*Stream, error) {
	info, err := c.GetStream(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.streamOf(info)
}

func (c *Client) streamOf(info StreamInfo) (*Stream, error) {
	if info.PartitionCount < 1 {
		return nil, stream.StreamBackendFailed.Wrap(errNoPartitions, "op", "http.admin.get", "name", info.Name)
	}
	return &Stream{c: c, name: info.Name, parts: info.PartitionCount, path: wire.LogPrefix + wire.EscapeName(info.Name), wake: make(chan struct{})}, nil
}

// Open creates the named stream with policy on the broker at baseURL,
// unless it exists with the same configuration, and returns it. A stream
// of that name with another configuration is STREAM_EXISTS; a policy the
// broker refuses is STREAM_MISCONFIGURED by field, nothing created.
func Open(ctx context.Context, baseURL, name string, policy stream.PolicyValue, opts ...Option) (*Stream, error) {
	c, err := New(baseURL, opts...)
	if err != nil {
		return nil, err
	}
	return c.Open(ctx, name, StreamConfig{Policy: policy})
}

// Open creates the named stream with cfg unless it exists with the same
// configuration, and returns it.
func (c *Client) Open(ctx context.Context, name string, cfg StreamConfig) (*Stream, error) {
	info, _, err := c.CreateStream(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	return c.streamOf(info)
}

// Sign asks the broker for a signed read URL (POST /v1/sign): a URL that
// lets whoever holds it read one stream, or the streams under a prefix,
// until it expires, with no token. The client's token must be a write or
// admin token covering the scope.
func (c *Client) Sign(ctx context.Context, req wire.SignRequest) (wire.SignResponse, error) {
	var out wire.SignResponse
	body, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	resp, err := c.do(ctx, request{op: "sign", method: http.MethodPost, path: wire.SignPath, body: body, contentType: "application/json"})
	if err != nil {
		return out, err
	}
	return out, decode("sign", resp, &out)
}
