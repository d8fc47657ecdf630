package brokeradmin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// StreamAdmin is what the Stream controller asks of a cluster: the broker
// client's admin calls. *client.Client implements it.
type StreamAdmin interface {
	CreateStream(ctx context.Context, name string, cfg client.StreamConfig) (client.StreamInfo, bool, error)
	GetStream(ctx context.Context, name string) (client.StreamInfo, error)
	UpdatePolicy(ctx context.Context, name string, p stream.PolicyValue) (client.StreamInfo, error)
	DeleteStream(ctx context.Context, name string) error
}

var _ StreamAdmin = (*client.Client)(nil)

// StreamAdminFactory returns the StreamAdmin of the cluster served at
// endpoint (a base URL).
type StreamAdminFactory interface {
	For(endpoint string) (StreamAdmin, error)
}

// ClientFactory is the default StreamAdminFactory: one broker client per
// endpoint, made once and reused by every reconcile, all sharing one
// connection pool.
type ClientFactory struct {
	hc      *http.Client
	mu      sync.Mutex
	clients map[string]*client.Client
}

// NewClientFactory returns a factory with its own connection pool.
func NewClientFactory() *ClientFactory {
	return &ClientFactory{hc: client.NewHTTPClient(), clients: map[string]*client.Client{}}
}

// For implements StreamAdminFactory.
func (f *ClientFactory) For(endpoint string) (StreamAdmin, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[endpoint]; ok {
		return c, nil
	}
	c, err := client.New(endpoint, client.WithHTTPClient(f.hc), client.WithUserAgent("picomq-operator"))
	if err != nil {
		return nil, err
	}
	f.clients[endpoint] = c
	return c, nil
}

// Len is how many clients the factory holds (one per endpoint).
func (f *ClientFactory) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}

// Names of the broker refusals the Stream controller tells apart. They are
// matched by name, stable across versions, so that the operator does not
// link the broker's metadata state machine to get the statics.
const (
	CodeStreamNotFound      = "STREAM_NOT_FOUND"
	CodeStreamExists        = "STREAM_EXISTS"
	CodePartitionsShrink    = "PARTITIONS_SHRINK"
	CodeStreamMisconfigured = "STREAM_MISCONFIGURED"
	CodeBackendFailed       = "STREAM_BACKEND_FAILED"
	CodeNotReady            = "NOT_READY"
)

// ErrorCode is the name of the broker refusal in err (STREAM_NOT_FOUND...),
// or "" when err carries none.
func ErrorCode(err error) string {
	if e, ok := errs.As(err); ok {
		return e.Name()
	}
	return ""
}

// IsNotFound reports a STREAM_NOT_FOUND refusal.
func IsNotFound(err error) bool { return ErrorCode(err) == CodeStreamNotFound }

// IsUnreachable reports a failure to talk to the broker at all (refused
// connection, DNS, timeout), as opposed to a refusal the broker answered.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	if errors.As(err, &oe) || errors.As(err, &de) || errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// The client wraps transport failures in STREAM_BACKEND_FAILED with
	// the cause as its message once decoded; an answer that was not a
	// problem (a proxy's 502 page) carries a status.
	if e, ok := errs.As(err); ok && e.Name() == CodeBackendFailed {
		if _, hasStatus := e.Field("status"); !hasStatus {
			return true
		}
	}
	return false
}
