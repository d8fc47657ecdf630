package wire

import "github.com/picomq/picomq/broker/errs"

// The HTTP layer's own refusals: block 0.16.3 (0x00_10_03_xx), beside the
// broker's 0.16.1 (metadata) and 0.16.2 (core).
const (
	CodeMalformedBatch       errs.Code = 0x00_10_03_01
	CodeBodyTooLarge         errs.Code = 0x00_10_03_02
	CodeUnsupportedMediaType errs.Code = 0x00_10_03_03
	CodeMalformedBody        errs.Code = 0x00_10_03_04
	CodeNotReady             errs.Code = 0x00_10_03_05
	CodeRouteNotFound        errs.Code = 0x00_10_03_06
	CodeMethodNotAllowed     errs.Code = 0x00_10_03_07
	CodeNotClustered         errs.Code = 0x00_10_03_08
	CodeDrainRefused         errs.Code = 0x00_10_03_09
	CodeAmbiguousFraming     errs.Code = 0x00_10_03_0A
	CodeHeadersTooLarge      errs.Code = 0x00_10_03_0B
	CodeURITooLong           errs.Code = 0x00_10_03_0C
	CodeMalformedHeader      errs.Code = 0x00_10_03_0D
	CodeMalformedQuery       errs.Code = 0x00_10_03_0E
	CodeRequestTimeout       errs.Code = 0x00_10_03_0F
)

var (
	// MalformedBatch refuses an append body (or a read answer, client side)
	// whose framing does not parse; the fields carry the byte position and
	// why. Nothing was written.
	MalformedBatch = errs.Static(CodeMalformedBatch, "MALFORMED_BATCH",
		"The batch framing is malformed",
		"broker/httpapi: a record length is not a uvarint or runs past the body; the fields carry the byte position",
		400, 65)

	// BodyTooLarge refuses a request body above the server's limit, or a
	// batch of more records than it accepts at once. Nothing was written.
	BodyTooLarge = errs.Static(CodeBodyTooLarge, "BODY_TOO_LARGE",
		"The request body exceeds the server's limit",
		"broker/httpapi: the body is larger than MaxBodyBytes or holds more than MaxBatchRecords records; the fields carry the limit",
		413, 65)

	// UnsupportedMediaType refuses an append whose Content-Type is neither
	// the batch framing nor a raw payload.
	UnsupportedMediaType = errs.Static(CodeUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE",
		"The request's content type is not supported",
		"broker/httpapi: appends take application/vnd.picomq.batch or application/octet-stream; admin bodies application/json",
		415, 65)

	// MalformedBody refuses an admin body that is not the JSON it should be.
	MalformedBody = errs.Static(CodeMalformedBody, "MALFORMED_BODY",
		"The request body is not valid",
		"broker/httpapi: the JSON body does not parse or holds unknown members; the fields say why",
		400, 65)

	// NotReady answers /readyz, and requests that need the metadata log,
	// while this broker has no metadata leader or is shutting down.
	NotReady = errs.Static(CodeNotReady, "NOT_READY",
		"The broker is not ready",
		"broker/httpapi: the metadata log has no leader, or the broker is draining; the fields say which",
		503, 69)

	// RouteNotFound answers a path no route serves.
	RouteNotFound = errs.Static(CodeRouteNotFound, "ROUTE_NOT_FOUND",
		"No such endpoint",
		"broker/httpapi: no route serves this path; the fields carry it",
		404, 64)

	// MethodNotAllowed answers a method a route does not serve; the Allow
	// header lists those it does.
	MethodNotAllowed = errs.Static(CodeMethodNotAllowed, "METHOD_NOT_ALLOWED",
		"The method is not allowed on this endpoint",
		"broker/httpapi: the route serves other methods; the fields carry them",
		405, 64)

	// NotClustered answers a call only a clustered broker serves (the
	// drain), made to a lone broker: 501, which the operator reads as
	// "not supported".
	NotClustered = errs.Static(CodeNotClustered, "NOT_CLUSTERED",
		"This broker is not a member of a cluster",
		"broker/httpapi: the call needs cluster mode (--cluster); a lone broker has nothing to hand off",
		501, 64)

	// DrainRefused refuses to start a drain that would leave the cluster
	// unable to do what it promises (fewer other members than the
	// replication factor asks); the fields say why. Nothing changed.
	DrainRefused = errs.Static(CodeDrainRefused, "DRAIN_REFUSED",
		"The drain was refused",
		"broker/httpapi: draining this broker now would leave too few members; the fields say why",
		409, 75)

	// AmbiguousFraming refuses a request head whose body length could be
	// read two ways (RFC 9112 §6.3): Content-Length with Transfer-Encoding,
	// differing Content-Length values, or a Transfer-Encoding other than
	// chunked. The connection is closed after the answer, since where the
	// next request starts is unknown. Nothing was written.
	AmbiguousFraming = errs.Static(CodeAmbiguousFraming, "AMBIGUOUS_FRAMING",
		"The request's message framing is ambiguous",
		"broker/framing: the head carries both Content-Length and Transfer-Encoding, several Content-Length values, or a transfer coding other than chunked; the fields say which",
		400, 65)

	// HeadersTooLarge refuses a request head above the server's limits on
	// its bytes (--max-header-bytes) or its header lines (--max-headers).
	HeadersTooLarge = errs.Static(CodeHeadersTooLarge, "HEADERS_TOO_LARGE",
		"The request's header fields are too large",
		"broker/framing: the head holds more header lines or bytes than the server accepts; the fields carry the limit",
		431, 65)

	// URITooLong refuses a request target longer than --max-url-bytes.
	URITooLong = errs.Static(CodeURITooLong, "URI_TOO_LONG",
		"The request URI is too long",
		"broker/httpapi: the request target is longer than the server accepts; the fields carry the limit",
		414, 65)

	// MalformedHeader refuses a protocol header that is present but empty,
	// repeated, or not of its syntax: a header the protocol defines is
	// validated whenever it is present. Nothing was written.
	MalformedHeader = errs.Static(CodeMalformedHeader, "MALFORMED_HEADER",
		"A request header is malformed",
		"broker/httpapi: a protocol header is empty, repeated or does not parse; the fields name it",
		400, 65)

	// MalformedQuery refuses a query parameter that is empty, repeated or
	// does not parse. Nothing was written.
	MalformedQuery = errs.Static(CodeMalformedQuery, "MALFORMED_QUERY",
		"A query parameter is malformed",
		"broker/httpapi: a query parameter is empty, repeated or does not parse; the fields name it",
		400, 65)

	// RequestTimeout answers a client that did not send its request (head
	// or body) within the server's read deadline; the connection is closed.
	RequestTimeout = errs.Static(CodeRequestTimeout, "REQUEST_TIMEOUT",
		"The request was not received in time",
		"broker/httpapi: the head or body arrived slower than the server's read deadline allows; the fields carry the deadline",
		408, 75)
)
