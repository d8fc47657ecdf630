package workload

import (
	"context"
	"errors"
	"syscall"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

// NotWritten names the 5xx refusals whose declarations say nothing was
// written, so that Classify counts them as Refused rather than Unknown —
// and checkDuplicates then proves the broker right: a refused append
// found in the log is a violation. Every other 5xx (METADATA_UNAVAILABLE,
// whose outcome may be "written", among them) is maybe-written, which can
// only make the checkers weaker, never wrong.
var NotWritten = map[string]bool{
	"APPEND_ABORTED": true, // broker/node: rolled back, built on a refused append's offsets
	"OWNER_CHANGED":  true, // broker/node: fenced by a higher epoch
	"NO_SLOT_OWNER":  true, // broker/routing: no live holder to send it to
	"NOT_SLOT_OWNER": true, // broker/ownership: refused before anything was written
	// broker/routing: refused before the router sent or served anything
	"METADATA_CATCHING_UP": true,
	// broker/cluster: a broker that drained and left refuses every client
	// request before serving or routing it (a proxy cut short by a
	// stopping broker answers a write PROXY_OUTCOME_UNKNOWN instead, and
	// NOT_READY only to a read)
	"NOT_READY": true,
}

// Classify maps a request's error to its outcome and the coded name, if
// any: nil is OK; BROKER_UNREACHABLE (the client sent nothing), a
// refused connection (nothing listened) and a coded 4xx refusal is Refused (every refusal writes
// nothing, DESIGN.md); a timeout, a transport failure (the client's
// STREAM_BACKEND_FAILED), a 5xx or an error without a code is Unknown —
// the request may have taken effect.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	if errors.Is(err, client.BrokerUnreachable) {
		// The client opened no connection: nothing was sent.
		return Refused, "BROKER_UNREACHABLE"
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
