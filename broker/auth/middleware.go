package auth

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// Middleware refuses a request whose credentials are missing or unknown
// (401, with WWW-Authenticate: Bearer) or do not allow it (403), before
// the handler it wraps sees it; the scope a request needs is Classify's,
// the stream it is about Target's.
//
// Credentials, in the order they are looked at:
//   - a bearer token (Authorization), whose grants must cover the stream;
//   - else a signed read URL (picomq-sig and its fellows in the query),
//     which allows reading (GET, HEAD) the streams its scope covers;
//   - else nothing, which allows reading the streams an anonymous prefix
//     covers.
type Middleware struct {
	Tokens *Tokens
	// MetricsOpen serves /metrics without a token (--metrics-auth=open);
	// otherwise it takes a token of any scope.
	MetricsOpen bool
	// AnonymousRead are the prefixes anyone may read without a token.
	AnonymousRead []string
	// Keys verify signed read URLs (nil: none is accepted).
	Keys *SigningKeys
	// MaxBodyBytes bounds the body of a multi-stream append a limited
	// token sends, read here to check every stream it names.
	MaxBodyBytes int64
	Now          func() time.Time
	Log          *slog.Logger
}

type grantsKey struct{}

// GrantsOf returns the grants of the token the request presented (nil for
// a request without one).
func GrantsOf(ctx context.Context) Grants {
	g, _ := ctx.Value(grantsKey{}).(Grants)
	return g
}

// Wrap returns next behind the check.
func (m Middleware) Wrap(next http.Handler) http.Handler {
	log := m.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := m.Now
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := Classify(r.Method, r.URL.Path, m.MetricsOpen)
		if need == Open {
			next.ServeHTTP(w, r)
			return
		}
		name, unscoped := Target(r.URL.Path)
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			m.withoutToken(w, r, next, log, now(), need, name)
			return
		}
		tname, grants, ok := m.Tokens.Lookup(token)
		if !ok {
			refuse(w, r, log, Unauthenticated.With("reason", "unknown token"), http.StatusUnauthorized)
			return
		}
		if !grants.Allows(need, name, unscoped) {
			refuse(w, r, log, Forbidden.With("token", tname, "scopes", grants.String(), "need", need.String(), "stream", name), http.StatusForbidden)
			return
		}
		// A fork copies its source's records into the new stream: the
		// token must be able to read the source, or forking would read
		// any stream into one it may read (and tell which names exist).
		if src, ok := wire.ForkSource(r.Header.Get(wire.ForkedFromHeader)); ok && strings.HasPrefix(r.URL.Path, dsPrefix) && !grants.Allows(NeedRead, src, false) {
			refuse(w, r, log, Forbidden.With("token", tname, "scopes", grants.String(), "need", NeedRead.String(), "stream", src, "reason", "the fork's source"), http.StatusForbidden)
			return
		}
		if limited(grants, need) {
			if r.URL.Path == wire.AppendsPath {
				if !m.checkAppends(w, r, log, tname, grants) {
					return
				}
			}
			r = r.WithContext(frontend.WithVisible(r.Context(), func(s string) bool { return grants.Allows(NeedRead, s, false) }))
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), grantsKey{}, grants)))
	})
}

// withoutToken serves a request with no bearer token: by a signed URL, or
// as an anonymous read, or not at all.
func (m Middleware) withoutToken(w http.ResponseWriter, r *http.Request, next http.Handler, log *slog.Logger, now time.Time, need Need, name string) {
	read := need == NeedRead && name != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	q := r.URL.Query()
	if HasSignature(q) {
		if m.Keys == nil {
			refuse(w, r, log, SignedURLInvalid.With("reason", "this broker verifies no signed URL (no --url-signing-keys-dir)"), http.StatusUnauthorized)
			return
		}
		scope, coded := m.Keys.Verify(q, now)
		if coded != nil {
			refuse(w, r, log, coded, http.StatusUnauthorized)
			return
		}
		if !read || !Covers(scope, name) {
			refuse(w, r, log, SignedURLInvalid.With("reason", "the URL's scope does not cover this request", "scope", scope, "stream", name, "method", r.Method), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	if read {
		for _, p := range m.AnonymousRead {
			if Covers(p, name) {
				next.ServeHTTP(w, r)
				return
			}
		}
	}
	refuse(w, r, log, Unauthenticated.With("reason", "no bearer token"), http.StatusUnauthorized)
}

// limited reports whether grants allow need only under prefixes.
func limited(gs Grants, need Need) bool {
	for _, g := range gs {
		if g.Prefix == "" && g.Scope.Allows(need) {
			return false
		}
	}
	return true
}

// checkAppends reads a multi-stream append sent with a limited token and
// refuses it whole, before anything is written, when one of its streams
// is outside the token's grants.
func (m Middleware) checkAppends(w http.ResponseWriter, r *http.Request, log *slog.Logger, tname string, grants Grants) bool {
	limit := m.MaxBodyBytes
	if limit <= 0 {
		limit = frontend.DefaultMaxBodyBytes
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		frontend.WriteProblem(w, r, log, frontend.Coded(err, "auth.appends.read"), http.StatusBadRequest)
		return false
	}
	if int64(len(body)) > limit {
		frontend.WriteProblem(w, r, log, wire.BodyTooLarge.With("maxBodyBytes", limit), http.StatusRequestEntityTooLarge)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	items, err := wire.DecodeAppends(body)
	if err != nil {
		return true // refused whole by the handler, which reads it the same way
	}
	for _, it := range items {
		if !grants.Allows(NeedWrite, it.Name, false) {
			refuse(w, r, log, Forbidden.With("token", tname, "scopes", grants.String(), "need", NeedWrite.String(), "stream", it.Name), http.StatusForbidden)
			return false
		}
	}
	return true
}

// bearer reads "Bearer <token>" (the scheme case-insensitively, RFC 9110
// §11.1).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func refuse(w http.ResponseWriter, r *http.Request, log *slog.Logger, coded *errs.Error, status int) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="picomq"`)
	}
	frontend.WriteProblem(w, r, log, coded, status)
}
