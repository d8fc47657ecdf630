package workload

import (
	"context"
	"errors"
	"syscall"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// NotWritten names 5xx refusals that nevertheless guarantee nothing was
// written, so that Classify counts them as Refused rather than Unknown.
// Empty today: until cluster mode documents which of its 503s are safe
// (e.g. "no live owner", "fenced by a higher epoch"), every 5xx is
// treated as maybe-written, which can only make the checkers weaker, never
// wrong.
var NotWritten = map[string]bool{}

// Classify maps a request's error to its outcome and the coded name, if
// any: nil is OK; a refused connection (nothing listened) and a coded 4xx refusal is Refused (every refusal writes
// nothing, DESIGN.md); a timeout, a transport failure (the client's
// STREAM_BACKEND_FAILED), a 5xx or an error without a code is Unknown —
// the request may have taken effect.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		// Nothing listened: the request never reached a broker.
		return Refused, "CONNECTION_REFUSED"
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unknown, "TIMEOUT"
	}
	e, ok := errs.As(err)
	if !ok {
		return Unknown, ""
	}
	name := e.Name()
	if errors.Is(err, stream.StreamBackendFailed) {
		return Unknown, name
	}
	if NotWritten[name] {
		return Refused, name
	}
	if errs.HTTPStatus(e) >= 500 {
		return Unknown, name
	}
	return Refused, name
}

// errText is an error's text, bounded for the history.
func errText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
