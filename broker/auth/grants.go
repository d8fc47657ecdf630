package auth

import (
	"fmt"
	"strings"
)

// Grant is one item of a token's scopes: a scope, over every stream or
// over the streams its Prefix covers (Covers). Admin is always over every
// stream: it also governs the cluster (drain, node, trims of any stream).
type Grant struct {
	Scope  Scope
	Prefix string // "": every stream
}

// Grants are a token's scope items.
type Grants []Grant

// ParseGrants reads a comma list of scope items, each read, write or admin,
// read and write optionally limited to a prefix: "read:shop/,write:shop/orders".
func ParseGrants(s string) (Grants, error) {
	var out Grants
	for _, item := range strings.Split(s, ",") {
		g, err := parseGrant(strings.TrimSpace(item))
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

func parseGrant(item string) (Grant, error) {
	name, prefix, limited := strings.Cut(item, ":")
	s, err := ParseScopes(name)
	if err != nil {
		return Grant{}, err
	}
	if !limited {
		return Grant{Scope: s}, nil
	}
	if s == Admin {
		return Grant{}, fmt.Errorf("admin cannot be limited to a prefix (%q): it governs the whole cluster", item)
	}
	if err := CheckPrefix(prefix); err != nil {
		return Grant{}, err
	}
	return Grant{Scope: s, Prefix: prefix}, nil
}

// CheckPrefix checks a prefix as grants and --anonymous-read-prefixes take
// it: a stream name (segments of letters, digits, '.', '_', '-'; no empty,
// '.' or '..' segment), with or without a trailing '/'.
func CheckPrefix(p string) error {
	name := strings.TrimSuffix(p, "/")
	if name == "" || !validName(name) {
		return fmt.Errorf("prefix %q: want a stream name, or one ending in '/' for the names under it", p)
	}
	return nil
}

// Covers reports whether prefix covers the stream name: one ending in '/'
// covers every name under it ("shop/" covers "shop/orders" and
// "shop/eu/orders", not "shop" or "shopping"); one without covers that
// name alone. An empty prefix covers every name. A name that is not a
// valid stream name is covered only by the empty prefix (no handler would
// serve it; this keeps "shop/../billing" out of "shop/").
func Covers(prefix, name string) bool {
	if prefix == "" {
		return true
	}
	if !validName(name) {
		return false
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(name, prefix)
	}
	return name == prefix
}

// validName is node.ValidateName's rule (without importing the broker).
func validName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, c := range []byte(seg) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Allows reports whether a grant covers a request needing need on the
// stream name ("" for a request about no one stream, which a limited grant
// allows only when unscoped is set: listings, filtered after, and the
// node's status).
func (gs Grants) Allows(need Need, name string, unscoped bool) bool {
	for _, g := range gs {
		if !g.Scope.Allows(need) {
			continue
		}
		if g.Prefix == "" || (name == "" && unscoped) || (name != "" && Covers(g.Prefix, name)) {
			return true
		}
	}
	return false
}

// Scopes is the union of the grants' scopes (prefixes left out).
func (gs Grants) Scopes() Scope {
	var s Scope
	for _, g := range gs {
		s |= g.Scope
	}
	return s
}

func (gs Grants) String() string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = g.Scope.String()
		if g.Prefix != "" {
			parts[i] += ":" + g.Prefix
		}
	}
	return strings.Join(parts, ",")
}
