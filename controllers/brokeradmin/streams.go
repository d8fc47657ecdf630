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
// endpoint (a base URL), verified and authenticated with creds.
type StreamAdminFactory interface {
	For(endpoint string, creds Credentials) (StreamAdmin, error)
}

// ClientFactory is the default StreamAdminFactory: one broker client per
// endpoint and credentials, made once and reused by every reconcile, all
// sharing one connection pool (but those with a CA, which have one per
// CA).
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
func (f *ClientFactory) For(endpoint string, creds Credentials) (StreamAdmin, error) {
	k := endpoint + "\x00" + creds.key()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[k]; ok {
		return c, nil
	}
	hc, err := withCredentials(f.hc, creds)
	if err != nil {
		return nil, err
	}
	c, err := client.New(endpoint, client.WithHTTPClient(hc), client.WithUserAgent("picomq-operator"))
	if err != nil {
		return nil, err
	}
	if len(f.clients) >= maxSecured {
		// Endpoints and credentials that changed leave clients behind.
		for _, old := range f.clients {
			old.Close()
		}
		clear(f.clients)
	}
	f.clients[k] = c
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
	CodeBrokerUnreachable   = "BROKER_UNREACHABLE"
	CodeNotReady            = "NOT_READY"
	CodeDrainRefused        = "DRAIN_REFUSED"
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

// IsDrainRefused reports a DRAIN_REFUSED refusal: the broker will not
// drain now (the members that stay could not hold R copies, or no running
// majority), its fields saying why.
func IsDrainRefused(err error) bool { return ErrorCode(err) == CodeDrainRefused }

// IsUnreachable reports a failure to talk to the broker at all: it could
// not be reached (BROKER_UNREACHABLE: a name that does not resolve, a
// connection refused) or did not answer in time, as opposed to a refusal
// it answered. Both are retried; neither says anything about the stream.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, client.BrokerUnreachable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// A transport error not (yet) classified by a client: a dial that
	// failed, a name that did not resolve.
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &oe) && oe.Op == "dial" || errors.As(err, &de)
}
