package auth

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/strictjson"
)

// DefaultSignedFor is a signed URL's life when the request names none.
const DefaultSignedFor = time.Hour

// SignHandler mints signed read URLs for a token whose write or admin
// grants cover the scope asked for: a producer hands its readers a URL
// for what it writes, never for more.
type SignHandler struct {
	Keys *SigningKeys // nil: 404-like refusal, no key configured
	Now  func() time.Time
	Log  *slog.Logger
	// DSPrefix is where streams are served (dsapi.Prefix).
	DSPrefix string
}

func (h SignHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	bad := func(reason string, kv ...any) {
		frontend.WriteProblem(w, r, log, wire.MalformedBody.With(append([]any{"reason", reason}, kv...)...), http.StatusBadRequest)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		frontend.WriteProblem(w, r, log, wire.MethodNotAllowed.With("method", r.Method, "allow", "POST"), http.StatusMethodNotAllowed)
		return
	}
	if h.Keys == nil || h.Keys.Len() == 0 {
		frontend.WriteProblem(w, r, log, SignedURLInvalid.With("reason", "this broker holds no signing key (--url-signing-keys-dir)"), http.StatusNotImplemented)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		bad("cannot read the body")
		return
	}
	if err := strictjson.Check(body); err != nil {
		bad(err.Error())
		return
	}
	var req wire.SignRequest
	if err := json.Unmarshal(body, &req); err != nil {
		bad(err.Error())
		return
	}
	scope := req.Stream
	switch {
	case (req.Stream == "") == (req.Prefix == ""):
		bad("name one of stream and prefix")
		return
	case req.Prefix != "":
		if !strings.HasSuffix(req.Prefix, "/") || CheckPrefix(req.Prefix) != nil {
			bad("prefix is a stream name ending in '/'", "prefix", req.Prefix)
			return
		}
		scope = req.Prefix
	case !validName(req.Stream):
		bad("stream is not a stream name", "stream", req.Stream)
		return
	}
	t := now()
	exp := t.Add(DefaultSignedFor)
	switch {
	case req.ExpiresIn != "" && req.ExpiresAt != nil:
		bad("give expiresIn or expiresAt, not both")
		return
	case req.ExpiresIn != "":
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			bad("expiresIn is a positive Go duration (10m, 1h)", "expiresIn", req.ExpiresIn)
			return
		}
		exp = t.Add(d)
	case req.ExpiresAt != nil:
		exp = *req.ExpiresAt
	}
	if !exp.After(t) || exp.Sub(t) > MaxSignedFor {
		bad("the expiry must be in the future, at most 7 days ahead", "expiresAt", exp.UTC().Format(time.RFC3339))
		return
	}
	grants := GrantsOf(r.Context())
	if grants != nil && !grantsCoverScope(grants, scope) {
		frontend.WriteProblem(w, r, log, Forbidden.With("scopes", grants.String(), "need", "write or admin over "+scope), http.StatusForbidden)
		return
	}
	q, _ := h.Keys.Sign(scope, exp)
	out := wire.SignResponse{Query: q.Encode(), Scope: scope, ExpiresAt: time.Unix(exp.Unix(), 0).UTC(), Key: q.Get(ParamKey)}
	if req.Stream != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		out.URL = scheme + "://" + r.Host + h.DSPrefix + req.Stream + "?" + out.Query
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

// grantsCoverScope reports whether a write or admin grant covers every
// stream scope covers.
func grantsCoverScope(gs Grants, scope string) bool {
	for _, g := range gs {
		if g.Scope&(Write|Admin) == 0 {
			continue
		}
		switch {
		case g.Prefix == "":
			return true
		case strings.HasSuffix(g.Prefix, "/") && strings.HasPrefix(scope, g.Prefix):
			return true
		case g.Prefix == scope:
			return true
		}
	}
	return false
}
