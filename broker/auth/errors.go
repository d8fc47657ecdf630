package auth

import "github.com/picomq/picomq/broker/errs"

// The refusals of the token check. Their fields name the token (by its file
// name, never its value) and the scope a request needs.
var (
	Unauthenticated = errs.Static(0x00_10_09_01, "UNAUTHENTICATED",
		"The request carries no valid bearer token",
		"The broker serves this route only to a request with an Authorization: Bearer header naming a token of --auth-tokens-dir; the token was missing, malformed or unknown (a token removed from the directory stops working within seconds).",
		401, 77)
	Forbidden = errs.Static(0x00_10_09_02, "FORBIDDEN",
		"The token's scopes do not allow this request",
		"Each scope allows exactly what it names (read: reads, long-polls, listings, status; write: appends, closes, consumer-group commits; admin: everything); field need is the scope the request needs, token the token's name.",
		403, 77)
)
