package wire

import (
	"net/url"
	"strings"
)

// ForkedFromHeader names the stream a Durable Streams create forks (a path
// under /v1/stream/, or a URL whose path is one).
const ForkedFromHeader = "Stream-Forked-From"

// ForkSource is the stream name a Stream-Forked-From value names, read the
// one way the token check, the router and the Durable Streams handler all
// read it (the handler validates the name after).
func ForkSource(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	p := v
	if !strings.HasPrefix(v, "/") {
		u, err := url.Parse(v)
		if err != nil {
			return "", false
		}
		p = u.Path
	}
	name, ok := strings.CutPrefix(p, "/v1/stream/")
	return name, ok && name != ""
}
