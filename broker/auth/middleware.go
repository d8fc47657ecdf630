package auth

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
)

// Middleware refuses a request whose bearer token is missing or unknown
// (401, with WWW-Authenticate: Bearer) or whose scopes do not allow it
// (403), before the handler it wraps sees it; the scope a request needs is
// Classify's.
type Middleware struct {
	Tokens *Tokens
	// MetricsOpen serves /metrics without a token (--metrics-auth=open);
	// otherwise it takes a token of any scope.
	MetricsOpen bool
	Log         *slog.Logger
}

// Wrap returns next behind the token check.
func (m Middleware) Wrap(next http.Handler) http.Handler {
	log := m.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := Classify(r.Method, r.URL.Path, m.MetricsOpen)
		if need == Open {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			refuse(w, r, log, Unauthenticated.With("reason", "no bearer token"), http.StatusUnauthorized)
			return
		}
		name, scopes, ok := m.Tokens.Lookup(token)
		if !ok {
			refuse(w, r, log, Unauthenticated.With("reason", "unknown token"), http.StatusUnauthorized)
			return
		}
		if !scopes.Allows(need) {
			refuse(w, r, log, Forbidden.With("token", name, "scopes", scopes.String(), "need", need.String()), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
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
