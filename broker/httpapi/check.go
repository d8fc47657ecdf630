package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// protocolHeaders are the request headers the partitioned-log API reads:
// validated whenever present, so an empty one is malformed, not absent, and
// a repeated one is refused rather than one of its values picked.
var protocolHeaders = []string{
	http.CanonicalHeaderKey(wire.HeaderProducerID), http.CanonicalHeaderKey(wire.HeaderProducerEpoch),
	http.CanonicalHeaderKey(wire.HeaderProducerSeq), http.CanonicalHeaderKey(wire.HeaderStreamSeq),
}

// checkRequest refuses, before a route reads anything, an empty or repeated
// protocol header (400 MALFORMED_HEADER) and a query that does not parse,
// repeats a parameter or leaves one empty (400 MALFORMED_QUERY). A bare
// wait (no value) is the one empty parameter taken: it is documented as
// "wait as long as the server allows".
func checkRequest(r *http.Request) error {
	for _, name := range protocolHeaders {
		vs, ok := r.Header[name]
		switch {
		case !ok:
		case len(vs) > 1:
			return wire.MalformedHeader.With("header", name, "reason", "repeated")
		case strings.TrimSpace(vs[0]) == "":
			return wire.MalformedHeader.With("header", name, "reason", "empty")
		}
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return wire.MalformedQuery.With("reason", "does not parse")
	}
	for name, vs := range q {
		switch {
		case name == "":
			return wire.MalformedQuery.With("reason", "a parameter without a name")
		case len(vs) > 1:
			return wire.MalformedQuery.With("query", name, "reason", "repeated")
		case vs[0] == "" && name != "wait":
			return wire.MalformedQuery.With("query", name, "reason", "empty")
		}
	}
	return nil
}
