// Package auth is the broker's bearer-token check: the tokens of a mounted
// directory (one file per token, re-read as it changes), the scope each
// route needs, and the HTTP middleware that refuses a request with 401 or
// 403 before any handler sees it.
//
// A token never reaches a log, an error or a metric: only its name (its
// file's name) does.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MinTokenBytes is the shortest token accepted: shorter ones are skipped.
const MinTokenBytes = 16

// maxTokenFileBytes bounds a token file read (a token is short; anything
// larger is a mistake, not a token).
const maxTokenFileBytes = 64 << 10

// entry is one token, kept as its SHA-256 digest: comparing fixed-size
// digests in constant time says nothing about the tokens' lengths.
type entry struct {
	name   string
	digest [sha256.Size]byte
	grants Grants
}

// Tokens is the set of tokens of a directory. Its methods are safe for
// concurrent use; Reload and Run replace the set atomically.
type Tokens struct {
	dirSet[entry]
}

// Load reads dir's tokens. A file that is not a valid token is skipped and
// logged by name; a directory that cannot be read is an error (the broker
// would otherwise serve with no token and refuse everyone silently).
func Load(dir string, log *slog.Logger) (*Tokens, error) {
	t := &Tokens{}
	if err := t.init(dir, "auth token", "tokens", log, t.load); err != nil {
		return nil, err
	}
	return t, nil
}

// load reads one token file and logs, by name, the scopes it grants.
func (t *Tokens) load(path, name string) (entry, error) {
	e, err := readToken(path, name)
	if err == nil {
		t.log.Info("auth token loaded", "file", name, "scopes", e.grants.String())
	}
	return e, err
}

// Lookup finds the token presented. Every token is compared, each in
// constant time, whatever matched: the time taken says nothing about which
// token, or how much of one, was right.
func (t *Tokens) Lookup(token string) (name string, grants Grants, ok bool) {
	d := sha256.Sum256([]byte(token))
	match := -1
	set := t.items()
	for i := range set {
		if subtle.ConstantTimeCompare(d[:], set[i].digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", nil, false
	}
	return set[match].name, set[match].grants, true
}

// fingerprint lists the directory's token files (hidden ones, such as a
// Secret volume's ..data links, left out) and sums up what stat says of
// each: a changed, added or removed file changes it. Stat follows links, so
// a Secret volume's update (a swapped ..data link) shows too.
func fingerprint(dir string) (string, []string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var files []string
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, de.Name()))
		if err != nil || fi.IsDir() {
			continue // a dangling link, a directory: no token
		}
		files = append(files, de.Name())
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00", de.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	sort.Strings(files)
	return b.String(), files, nil
}

// readToken reads one token file, "<scopes>:<token>", where scopes is a
// comma list of items, each read, write or admin, read and write
// optionally limited to a prefix ("read:shop/,write:shop/orders:<token>").
// Its errors never hold the file's content.
func readToken(path, name string) (entry, error) {
	buf, err := readSmall(path)
	if err != nil {
		return entry{}, err
	}
	grants, token, err := splitTokenFile(strings.TrimRight(string(buf), "\r\n"))
	if err != nil {
		return entry{}, err
	}
	if err := checkMixed(grants); err != nil {
		return entry{}, err
	}
	if len(token) < MinTokenBytes {
		return entry{}, fmt.Errorf("token shorter than %d bytes", MinTokenBytes)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return entry{}, fmt.Errorf("token holds white space")
	}
	return entry{name: name, digest: sha256.Sum256([]byte(token)), grants: grants}, nil
}

// splitTokenFile reads "<items>:<token>": items are separated by ',', an
// item is a scope with an optional ":<prefix>", and the token follows the
// last item's ':'. A token therefore holds no ':' or ',' once prefixes
// are used (the operator's are hex). Its errors never quote the content:
// a token written the wrong way round would end up in a log.
func splitTokenFile(content string) (Grants, string, error) {
	var gs Grants
	rest := content
	for {
		scope, after, delim := cutAny(rest)
		if delim == 0 {
			return nil, "", fmt.Errorf(`not "<scopes>:<token>"`)
		}
		if _, err := ParseScopes(scope); err != nil {
			return nil, "", fmt.Errorf("scopes are not a comma list of read, write and admin, each optionally :<prefix>")
		}
		if delim == ',' {
			g, _ := parseGrant(scope)
			gs, rest = append(gs, g), after
			continue
		}
		prefix, after2, delim2 := cutAny(after)
		if delim2 == 0 {
			g, _ := parseGrant(scope)
			return append(gs, g), after, nil
		}
		g, err := parseGrant(scope + ":" + prefix)
		if err != nil {
			return nil, "", fmt.Errorf("scope item %d: admin limited to a prefix, or a prefix that is not a stream name", len(gs)+1)
		}
		gs = append(gs, g)
		if delim2 == ':' {
			return gs, after2, nil
		}
		rest = after2
	}
}

// checkMixed refuses read or write over every stream beside items limited
// to prefixes: "read,write:shop/" reads as "read and write under shop/"
// but would grant read everywhere. Limited tokens spell each item out
// ("read:shop/,write:shop/"). Admin, cluster-wide by nature, may stand
// beside them.
func checkMixed(gs Grants) error {
	var bare, limited bool
	for _, g := range gs {
		switch {
		case g.Prefix != "":
			limited = true
		case g.Scope&(Read|Write) != 0:
			bare = true
		}
	}
	if bare && limited {
		return fmt.Errorf("read or write over every stream beside items limited to prefixes: write each item with its prefix (read:shop/,write:shop/)")
	}
	return nil
}

// cutAny cuts s at its first ',' or ':', returning the delimiter (0: none).
func cutAny(s string) (before, after string, delim byte) {
	i := strings.IndexAny(s, ",:")
	if i < 0 {
		return s, "", 0
	}
	return s[:i], s[i+1:], s[i]
}
