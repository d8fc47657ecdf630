package wire

import "time"

// TierPath answers TierStatus (admin scope).
const TierPath = "/v1/admin/tier"

// TierStatus is the answer of GET /v1/admin/tier: this broker's view of the
// cluster's object storage, what the operator turns into the StreamCluster's
// Degraded reasons.
type TierStatus struct {
	Enabled  bool   `json:"enabled"`
	Endpoint string `json:"endpoint,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	// Reachable is false from a failed request until the next success.
	Reachable bool `json:"reachable"`
	// LastError is the last failure's code (TIER_UNREACHABLE, TIER_REFUSED,
	// TIER_CORRUPT) and message; nil once a request succeeds after it.
	LastError   *TierError `json:"lastError"`
	LastSuccess *time.Time `json:"lastSuccess,omitempty"`
	// UploadsPending are segments waiting for upload on this broker,
	// UploadsFailed the failed attempts since it started.
	UploadsPending int   `json:"uploadsPending"`
	UploadsFailed  int64 `json:"uploadsFailed"`
	// TieredBytes is the cluster's bytes in object storage (from the
	// metadata log, the same on every broker).
	TieredBytes int64 `json:"tieredBytes"`
}

// TierError is a coded object-storage failure.
type TierError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
