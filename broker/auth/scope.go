package auth

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// Scope is a set of rights a token holds.
type Scope uint8

// The scopes. Each allows exactly what it names; admin allows everything.
const (
	Read Scope = 1 << iota
	Write
	Admin
)

// ParseScopes reads a comma list of read, write and admin.
func ParseScopes(s string) (Scope, error) {
	var out Scope
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(part) {
		case "read":
			out |= Read
		case "write":
			out |= Write
		case "admin":
			out |= Admin
		default:
			return 0, fmt.Errorf("unknown scope %q (want read, write or admin)", strings.TrimSpace(part))
		}
	}
	return out, nil
}

func (s Scope) String() string {
	var names []string
	for _, n := range []struct {
		s    Scope
		name string
	}{{Read, "read"}, {Write, "write"}, {Admin, "admin"}} {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// Allows reports whether a scope allows a request needing need: admin
// allows everything, the others only themselves.
func (s Scope) Allows(need Need) bool {
	switch need {
	case Open, AnyToken:
		return true
	case NeedRead:
		return s&(Read|Admin) != 0
	case NeedWrite:
		return s&(Write|Admin) != 0
	default:
		return s&Admin != 0
	}
}

// Need is what a request requires.
type Need uint8

const (
	// NeedAdmin is first so that the zero value fails closed.
	NeedAdmin Need = iota
	NeedRead
	NeedWrite
	// AnyToken: a valid token of any scope (/metrics with
	// --metrics-auth=token).
	AnyToken
	// Open: no token (probes, CORS preflights).
	Open
)

func (n Need) String() string {
	return [...]string{"admin", "read", "write", "any", "open"}[n]
}

// dsPrefix is the Durable Streams protocol's prefix (dsapi.Prefix; the
// tests check they agree, without this package linking the broker).
const dsPrefix = "/v1/stream/"

// Classify is the scope a request needs, from its method and (decoded)
// path alone. What it does not know needs admin: a route added later
// without a line here is refused to everyone but admin, never opened.
//
// Trim and compact drop records, so they are admin's, not write's: a
// producer's token cannot delete what others wrote.
func Classify(method, path string, metricsOpen bool) Need {
	read := method == http.MethodGet || method == http.MethodHead
	switch {
	case path == "/healthz" || path == "/readyz":
		return Open
	case path == "/metrics":
		if metricsOpen {
			return Open
		}
		return AnyToken
	case strings.HasPrefix(path, dsPrefix):
		switch method {
		case http.MethodOptions:
			return Open // a CORS preflight never carries credentials
		case http.MethodGet, http.MethodHead:
			return NeedRead
		case http.MethodPost, http.MethodPut:
			// Append, close; and create: a producer creates its stream
			// (idempotently: a PUT of an existing stream with the same
			// configuration changes nothing).
			return NeedWrite
		}
		return NeedAdmin // DELETE deletes
	case strings.HasPrefix(path, wire.LogPrefix):
		// As httpapi reads it: the operation follows the first ':' (a
		// name holds none).
		_, op, _ := strings.Cut(path[len(wire.LogPrefix):], ":")
		switch op {
		case "":
			if read {
				return NeedRead
			}
			if method == http.MethodPost {
				return NeedWrite
			}
		case wire.OpBounds, wire.OpSeek, wire.OpCommitted:
			if read {
				return NeedRead
			}
		case wire.OpCommit:
			if method == http.MethodPost {
				return NeedWrite
			}
		}
		return NeedAdmin
	case path == wire.AppendsPath, path == SignPath:
		if method == http.MethodPost {
			return NeedWrite
		}
		return NeedAdmin
	case path == wire.StreamsPath || strings.HasPrefix(path, wire.StreamsPrefix),
		path == wire.NodePath, path == wire.DrainPath, path == wire.ClockPath:
		if read {
			return NeedRead // listings, a stream's state, node and drain status
		}
		return NeedAdmin
	}
	return NeedAdmin
}

// Target is the stream a request is about, from its (decoded) path, as
// the handlers read it: "" for a route about no one stream. unscoped says
// whether such a route is one a token limited to prefixes may use —
// listings (filtered to what it may read), the node's status, a
// multi-stream append (each stream checked) and minting a signed URL (its
// scope checked) — rather than one about the whole cluster.
func Target(path string) (name string, unscoped bool) {
	switch {
	case strings.HasPrefix(path, dsPrefix):
		return path[len(dsPrefix):], false
	case strings.HasPrefix(path, wire.LogPrefix):
		name, _, _ = strings.Cut(path[len(wire.LogPrefix):], ":")
		return name, false
	case strings.HasPrefix(path, wire.StreamsPrefix):
		return path[len(wire.StreamsPrefix):], false
	case path == wire.StreamsPath, path == wire.NodePath, path == wire.AppendsPath, path == SignPath, path == "/metrics":
		return "", true
	}
	return "", false
}
