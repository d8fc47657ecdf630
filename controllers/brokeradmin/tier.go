package brokeradmin

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// TierPath is the admin endpoint of a broker's view of the cluster's
// object storage (GET, wire.TierStatus). A broker without tiered storage
// support answers 404: ErrNotSupported.
const TierPath = wire.TierPath

// Codes of wire.TierStatus.LastError, broker/tier's Unreachable and
// Refused (spelled here: importing broker/tier would link an S3 client
// into the operator).
const (
	// CodeTierUnreachable: the object storage did not answer (DNS,
	// connection, TLS, timeout).
	CodeTierUnreachable = "TIER_UNREACHABLE"
	// CodeTierRefused: it answered with a refusal (access denied, no such
	// bucket, bad credentials).
	CodeTierRefused = "TIER_REFUSED"
)

// TierAdmin is what the StreamCluster controller asks of a broker of a
// cluster with spec.tieredStorage. It is apart from BrokerAdmin so that
// an admin without it (a test's, an older one's) still serves the rest:
// the controller then reports no tiered storage status.
type TierAdmin interface {
	// Tier returns the broker's view of the object storage.
	// ErrNotSupported when the broker does not implement it.
	Tier(ctx context.Context, b Broker) (wire.TierStatus, error)
}

var _ TierAdmin = (*HTTP)(nil)

// tierAnswer is wire.TierStatus with lastSuccess read leniently: a
// broker may send "" for never, which a *time.Time refuses, and that one
// field must not cost the whole answer.
type tierAnswer struct {
	wire.TierStatus
	LastSuccess json.RawMessage `json:"lastSuccess,omitempty"`
}

// Tier implements TierAdmin.
func (h *HTTP) Tier(ctx context.Context, b Broker) (wire.TierStatus, error) {
	var a tierAnswer
	if err := h.call(ctx, b, http.MethodGet, TierPath, &a); err != nil {
		return wire.TierStatus{}, err
	}
	t := a.TierStatus
	var s string
	if json.Unmarshal(a.LastSuccess, &s) == nil && s != "" {
		if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
			t.LastSuccess = &at
		}
	}
	return t, nil
}
