package brokeradmin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// DrainPath is the admin endpoint of a broker's drain: POST starts it (or
// reports its progress), GET reports progress, DELETE cancels it. The
// cluster-mode broker implements it; until then a broker answers 404 and
// the operator holds every scale-down.
const DrainPath = "/v1/admin/drain"

// HTTP is BrokerAdmin over the brokers' HTTP admin API. It is safe for
// concurrent use and keeps connections alive across reconciles.
type HTTP struct {
	Client *http.Client
	// Timeout bounds each call (default 5s).
	Timeout time.Duration

	// secured are the clients of brokers with credentials, one per
	// credentials (a cluster's CA and token), built on Client's transport.
	mu      sync.Mutex
	secured map[string]*http.Client
}

// clientFor is the client that talks to b with its credentials.
func (h *HTTP) clientFor(b Broker) (*http.Client, error) {
	hc := h.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	if len(b.Credentials.CA) == 0 && b.Credentials.Token == "" {
		return hc, nil
	}
	k := b.Credentials.key()
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.secured[k]; ok {
		return c, nil
	}
	c, err := withCredentials(hc, b.Credentials)
	if err != nil {
		return nil, err
	}
	if h.secured == nil {
		h.secured = map[string]*http.Client{}
	}
	if len(h.secured) >= maxSecured {
		// Rotated CAs and tokens leave clients behind: start over rather
		// than grow (each holds idle connections only).
		for _, old := range h.secured {
			old.CloseIdleConnections()
		}
		clear(h.secured)
	}
	h.secured[k] = c
	return c, nil
}

// maxSecured bounds HTTP's clients with credentials.
const maxSecured = 256

// NewHTTP returns a BrokerAdmin with its own connection pool.
func NewHTTP() *HTTP {
	return &HTTP{Client: NewHTTPClient(), Timeout: 5 * time.Second}
}

// NewHTTPClient is the http.Client the operator talks to brokers with:
// short dial timeout, keep-alive connections, no overall timeout (each call
// has its ctx deadline).
func NewHTTPClient() *http.Client {
	dialer := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// nodeInfo is GET /v1/admin/node: the broker's wire.NodeInfo plus the
// members the cluster-mode broker adds (absent from a single-node broker).
type nodeInfo struct {
	wire.NodeInfo
	SlotsHeld       *int32       `json:"slotsHeld,omitempty"`
	Slots           []int32      `json:"slots,omitempty"`
	UnderReplicated *int32       `json:"underReplicated,omitempty"`
	Drain           *DrainStatus `json:"drain,omitempty"`
}

// Status implements BrokerAdmin.
func (h *HTTP) Status(ctx context.Context, b Broker) (NodeStatus, error) {
	var n nodeInfo
	if err := h.call(ctx, b, http.MethodGet, wire.NodePath, &n); err != nil {
		return NodeStatus{}, err
	}
	s := NodeStatus{
		NodeID: n.NodeID, RaftState: n.RaftState, Leader: n.Leader, Ready: n.Ready,
		Streams: n.Streams, SlotsHeld: n.SlotsHeld, Slots: n.Slots,
		ClusterID: n.ClusterID, MemberID: n.MemberID, Voters: n.Voters, NonVoters: n.NonVoters,
		UnderReplicated: n.UnderReplicated,
		Removed:         n.Removed || n.RaftState == wire.RaftStateRemoved, Problem: n.Problem,
	}
	if n.Failsafe != nil {
		s.FailsafeSince, s.FailsafeRounds = n.Failsafe.Since, n.Failsafe.Rounds
	}
	if n.Drain != nil {
		s.Drain = *n.Drain
	}
	return s, nil
}

// Drain implements BrokerAdmin.
func (h *HTTP) Drain(ctx context.Context, b Broker) (DrainStatus, error) {
	var d DrainStatus
	err := h.call(ctx, b, http.MethodPost, DrainPath, &d)
	return d, err
}

// CancelDrain implements BrokerAdmin.
func (h *HTTP) CancelDrain(ctx context.Context, b Broker) error {
	return h.call(ctx, b, http.MethodDelete, DrainPath, nil)
}

// call sends one admin request and decodes a 2xx JSON answer into out.
// 404, 405 and 501 are ErrNotSupported; another refusal is the coded
// problem the broker sent (or an error naming the status).
func (h *HTTP) call(ctx context.Context, b Broker, method, path string, out any) error {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		body = bytes.NewReader([]byte("{}"))
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(b.URL, "/")+path, body)
	if err != nil {
		return fmt.Errorf("broker %s: %w", b, err)
	}
	req.Header.Set("Accept", wire.JSONContentType+", "+wire.ProblemContentType)
	req.Header.Set("User-Agent", "picomq-operator")
	if body != nil {
		req.Header.Set("Content-Type", wire.JSONContentType)
	}
	hc, err := h.clientFor(b)
	if err != nil {
		return fmt.Errorf("broker %s: %w", b, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		// The broker client's coded error, so that both edges report a
		// broker that cannot be reached the same way.
		if u := client.Unreachable(b.URL, method+" "+path, err); u != nil && ctx.Err() == nil {
			return fmt.Errorf("broker %s: %w", b, u)
		}
		return fmt.Errorf("broker %s: %s %s: %w", b, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("broker %s: %s %s: reading the answer: %w", b, method, path, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
		return fmt.Errorf("broker %s: %s %s answered %d: %w", b, method, path, resp.StatusCode, ErrNotSupported)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("broker %s: %s %s answered 401: %w (%s)", b, method, path, ErrUnauthenticated, answer(data))
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("broker %s: %s %s answered 403: %w (%s)", b, method, path, ErrForbidden, answer(data))
	case resp.StatusCode/100 != 2:
		if e, err := errs.Unmarshal(data); err == nil {
			return fmt.Errorf("broker %s: %s %s: %w", b, method, path, e)
		}
		return fmt.Errorf("broker %s: %s %s answered %d: %s", b, method, path, resp.StatusCode, snippet(data))
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("broker %s: %s %s: decoding the answer: %w", b, method, path, err)
	}
	return nil
}

// ErrUnauthenticated is a broker's 401: it holds no token matching the
// operator's (Secret <cluster>-operator-token), or was sent none.
var ErrUnauthenticated = errors.New("the broker refused the operator's token: check that spec.auth is set and the broker pods mount the Secret <cluster>-operator-token")

// ErrForbidden is a broker's 403: the operator's token lacks the admin
// scope.
var ErrForbidden = errors.New("the broker refused the call to the operator's token: its scope does not allow it (the operator's token needs admin)")

// answer is a refusal's coded problem, or its text.
func answer(data []byte) string {
	if e, err := errs.Unmarshal(data); err == nil {
		return e.Error()
	}
	return snippet(data)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// IsNotSupported reports whether err is ErrNotSupported.
func IsNotSupported(err error) bool { return errors.Is(err, ErrNotSupported) }
