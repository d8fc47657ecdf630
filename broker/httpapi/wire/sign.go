package wire

import "time"

// SignPath mints a signed read URL (broker/auth):
//
//	POST /v1/sign   {"stream": "shop/orders", "expiresIn": "10m"}
//
// with a token whose write or admin grants cover the scope.
const SignPath = "/v1/sign"

// SignRequest is POST /v1/sign's body: one of Stream and Prefix (a stream
// name ending in '/'), and when the URL expires (ExpiresIn, a Go
// duration, or ExpiresAt; default 1h, at most 7 days ahead).
type SignRequest struct {
	Stream    string     `json:"stream,omitempty"`
	Prefix    string     `json:"prefix,omitempty"`
	ExpiresIn string     `json:"expiresIn,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// SignResponse is its answer: the stream's URL (when a stream was asked
// for) and the query that signs any read URL of the scope.
type SignResponse struct {
	URL       string    `json:"url,omitempty"`
	Query     string    `json:"query"`
	Scope     string    `json:"scope"`
	ExpiresAt time.Time `json:"expiresAt"`
	Key       string    `json:"key"`
}
