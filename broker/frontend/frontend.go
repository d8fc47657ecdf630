// Package frontend is what the broker's two HTTP front ends share — the
// partitioned-log and admin API (broker/httpapi) and the Durable Streams
// protocol (broker/dsapi): their common options, and how a refusal becomes
// a response (a coded problem document, with the status the front end
// maps it to).
package frontend

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// Defaults of Options.
const (
	DefaultLongPollTimeout = time.Second
	DefaultMaxBodyBytes    = 16 << 20
)

// ProblemContentType is the media type of a refusal's body (RFC 9457).
const ProblemContentType = "application/problem+json"

// Options are the settings both front ends take; zero values take the
// defaults.
type Options struct {
	// LongPollTimeout is the longest a read waits for an append before it
	// answers that nothing came (default 1s).
	LongPollTimeout time.Duration
	// MaxBodyBytes bounds a request body (default 16 MiB): a larger one is
	// refused with 413 before anything is written.
	MaxBodyBytes int64
	// Logger receives the front end's logs (default: discard).
	Logger *slog.Logger
}

// WithDefaults returns o with its zero fields set.
func (o Options) WithDefaults() Options {
	if o.LongPollTimeout <= 0 {
		o.LongPollTimeout = DefaultLongPollTimeout
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Coded is err's outermost coded error, or STREAM_BACKEND_FAILED naming op
// and wrapping err when it has none.
func Coded(err error, op string) *errs.Error {
	if coded, ok := errs.As(err); ok {
		return coded
	}
	return stream.StreamBackendFailed.Wrap(err, "op", op)
}

// Abandoned reports a request whose client went away (its context ended)
// and err saying so: nothing is answered, nobody would read it.
func Abandoned(r *http.Request, err error) bool {
	ctx := r.Context()
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Cause(ctx)))
}

// WriteProblem answers coded with status: a problem document (no body for
// HEAD), never cached, and Retry-After on 503 — every 503 of the broker is
// worth retrying. A status of 500 or more is logged as an error, others at
// debug.
func WriteProblem(w http.ResponseWriter, r *http.Request, log *slog.Logger, coded *errs.Error, status int) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	if status >= 500 {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", coded)
	} else {
		log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", coded)
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	body, err := errs.Marshal(coded)
	if err != nil {
		log.Error("cannot encode a problem", "err", err, "cause", coded)
		body = []byte(coded.Error())
		h.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		h.Set("Content-Type", ProblemContentType)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

type visibleKey struct{}

// WithVisible marks the request's caller as allowed to see only the
// streams visible reports true for (a token limited to prefixes): a
// listing leaves the others out.
func WithVisible(ctx context.Context, visible func(name string) bool) context.Context {
	return context.WithValue(ctx, visibleKey{}, visible)
}

// Visible reports whether the caller of ctx may see the stream name in a
// listing: true unless WithVisible said otherwise.
func Visible(ctx context.Context, name string) bool {
	f, _ := ctx.Value(visibleKey{}).(func(string) bool)
	return f == nil || f(name)
}

// SignatureParam is the query parameter that carries a signed read URL's
// signature (broker/auth).
const SignatureParam = "picomq-sig"

// Credentialed reports whether a request carried credentials — a bearer
// token, or a signed URL — so that its answer is for its caller alone and
// never stored by a shared cache.
func Credentialed(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || r.URL.Query().Has(SignatureParam)
}
