package node

import (
	"strings"

	"github.com/picomq/picomq/broker/stream"
)

// MaxNameLength bounds a stream's path name; MaxNameDepth its segments, so
// a prefix listing or a directory walk over names stays shallow.
const (
	MaxNameLength = 255
	MaxNameDepth  = 16
)

// ValidateName refuses a name that cannot name a stream: empty, longer than
// 255 bytes or 16 segments, or with a segment that is empty, "." or "..", or holds anything
// but letters, digits, '.', '_' and '-' — so a name can never climb out of a
// path or smuggle a separator. The refusal is STREAM_MISCONFIGURED with
// field "name".
func ValidateName(name string) error {
	bad := func(reason string) error {
		return stream.StreamMisconfigured.With("field", "name", "reason", reason, "length", len(name))
	}
	if name == "" {
		return bad("empty")
	}
	if len(name) > MaxNameLength {
		return bad("longer than 255 bytes")
	}
	if strings.Count(name, "/") >= MaxNameDepth {
		return bad("more than 16 segments")
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch seg {
		case "":
			return bad("empty segment (leading, trailing or doubled '/')")
		case ".", "..":
			return bad("'.' or '..' segment")
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return bad("a segment holds a character other than letters, digits, '.', '_' and '-'")
			}
		}
	}
	return nil
}
