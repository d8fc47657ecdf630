package journalpeer

import "github.com/picomq/picomq/broker/errs"

// The peer API's own refusals: block 0.16.12 (0x00_10_0C_xx), beside the
// journal's 0.16.10 and the ensemble rules' 0.16.11. The journal's
// refusals cross as they are.
var (
	// BadObject refuses a body that is not a whole object (or fence
	// answer): damaged on the way, cut short, or of another format.
	// Nothing was written.
	BadObject = errs.Static(0x00_10_0C_01, "BAD_JOURNAL_OBJECT",
		"The journal object sent is malformed or damaged; nothing was written",
		"broker/journalpeer: a body that does not decode or fails its CRC-32C; fields: reason, bytes",
		400, 65)

	// TooLarge refuses a body over the handler's bound before reading it.
	TooLarge = errs.Static(0x00_10_0C_02, "JOURNAL_BODY_TOO_LARGE",
		"The journal object sent is larger than this member takes; nothing was written",
		"broker/journalpeer: a body over MaxObjectBytes; fields: bytes, max",
		413, 65)

	// NoRoute answers a path or method the journal's peer API lacks.
	NoRoute = errs.Static(0x00_10_0C_03, "JOURNAL_PEER_NO_ROUTE",
		"No such journal peer route",
		"broker/journalpeer: an unknown path or method under /v1/peer/journal/; fields: method, path",
		404, 65)

	// BadRequest refuses a fence or read whose path values do not parse.
	BadRequest = errs.Static(0x00_10_0C_04, "BAD_JOURNAL_PEER_REQUEST",
		"The journal peer request names no valid stream, epoch or object",
		"broker/journalpeer: a path value that is not a number; fields: field, value",
		400, 65)
)
