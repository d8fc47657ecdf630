package dsapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// requestHeaders are the protocol's request headers: each is validated
// whenever it is present, so an empty one is malformed, not absent, and a
// repeated one is refused rather than one of its values picked.
var requestHeaders = []string{
	hSeq, hTTL, hExpiresAt, hClosed, hForkedFrom, hForkOffset, hForkSubOffset,
	hProducerID, hProducerEpoch, hProducerSeq,
}

// queryParams are the protocol's query parameters, held to the same rule.
var queryParams = []string{"offset", "live", "cursor"}

// checkRequest refuses an empty or repeated protocol header (400
// MALFORMED_HEADER) or query parameter (400 MALFORMED_QUERY), and a
// Stream-Closed other than true or false, before anything is read or
// written; the handlers then parse the values' syntax.
func checkRequest(hd http.Header, rawQuery string) error {
	for _, name := range requestHeaders {
		vs, ok := hd[http.CanonicalHeaderKey(name)]
		if !ok {
			continue
		}
		switch {
		case len(vs) > 1:
			return wire.MalformedHeader.With("header", name, "reason", "repeated")
		case strings.TrimSpace(vs[0]) == "":
			return wire.MalformedHeader.With("header", name, "reason", "empty")
		case name == hClosed && !strings.EqualFold(vs[0], "true") && !strings.EqualFold(vs[0], "false"):
			return wire.MalformedHeader.With("header", name, "reason", "not true or false")
		}
	}
	if rawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return wire.MalformedQuery.With("reason", "does not parse")
	}
	for _, name := range queryParams {
		vs, ok := q[name]
		switch {
		case !ok:
		case len(vs) > 1:
			return wire.MalformedQuery.With("query", name, "reason", "repeated")
		case vs[0] == "":
			return wire.MalformedQuery.With("query", name, "reason", "empty")
		}
	}
	return nil
}
