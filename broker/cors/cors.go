// Package cors answers browsers' cross-origin checks for the client port:
// which origins may call the brokers from a page, the preflights, and the
// headers a page's script may send and read.
//
// The rule (README "Browsers, CDNs and tenants"):
//   - an origin list given (--cors-allowed-origins): a request whose Origin
//     is listed is answered with that origin in Access-Control-Allow-Origin
//     (and Vary: Origin); one whose Origin is not is refused 403
//     ORIGIN_NOT_ALLOWED, preflights included, before any handler runs — a
//     refused request writes nothing. "*" alone allows every origin.
//   - no list: every origin ("*") while the brokers check no token (as a
//     development broker always has), none once they do: a page on a site
//     nobody listed cannot use a reader's token through the brokers.
//
// A request with no Origin (curl, the SDK, a CDN's fetch) is not a
// cross-origin request and passes as it is.
//
// The wildcard never comes with Allow-Credentials: the protocol carries
// tokens in Authorization (or a signed URL), not cookies, so a page's
// fetch never needs the credentials mode.
package cors

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
)

// What a page may send and read: every request header the Durable Streams
// protocol and the log API define, and every response header a client of
// them reads.
const (
	AllowMethods  = "GET, POST, PUT, DELETE, HEAD, OPTIONS"
	AllowHeaders  = "Content-Type, Authorization, If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset"
	ExposeHeaders = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, ETag, Content-Type, Location, Retry-After, WWW-Authenticate"
	// MaxAge is how long a browser may keep a preflight's answer (s).
	MaxAge = "600"
)

// OriginNotAllowed refuses a request from a page of an origin the brokers
// were not told to allow.
var OriginNotAllowed = errs.Static(0x00_10_09_03, "ORIGIN_NOT_ALLOWED",
	"The page's origin may not call this broker",
	"Browsers send the page's Origin; the brokers answer only the origins of --cors-allowed-origins (spec.cors.allowedOrigins on the StreamCluster). With tokens on and no list, no origin is allowed. Field origin is the one refused.",
	403, 77)

// Policy is the set of origins allowed.
type Policy struct {
	any     bool
	origins map[string]bool
	// Skip, when set, exempts a request from the policy: one routed here
	// by another broker, which answers its client's origin itself.
	Skip func(*http.Request) bool
	Log  *slog.Logger
}

// New is the policy of an origin list (--cors-allowed-origins) on brokers
// that check tokens (authOn) or not.
func New(origins []string, authOn bool) (*Policy, error) {
	p := &Policy{origins: map[string]bool{}}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o == "*" {
			p.any = true
			continue
		}
		norm, err := Normalize(o)
		if err != nil {
			return nil, err
		}
		p.origins[norm] = true
	}
	if p.any && len(p.origins) > 0 {
		return nil, fmt.Errorf(`"*" allows every origin: list it alone`)
	}
	if !p.any && len(p.origins) == 0 && !authOn {
		p.any = true
	}
	return p, nil
}

// Normalize checks an origin as a page sends it — scheme://host[:port],
// no path, query or user — and returns it lower-cased.
func Normalize(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("origin %q: want scheme://host[:port] (http or https, no path), or *", o)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// AllowsAny reports whether every origin is allowed.
func (p *Policy) AllowsAny() bool { return p.any }

// Wrap answers the policy in front of next.
func (p *Policy) Wrap(next http.Handler) http.Handler {
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Skip != nil && p.Skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		origin := r.Header.Get("Origin")
		switch {
		case p.any:
			h.Set("Access-Control-Allow-Origin", "*")
			// A page may read the timings of its requests (and their
			// protocol, Resource Timing's nextHopProtocol).
			h.Set("Timing-Allow-Origin", "*")
		case origin == "":
			h.Add("Vary", "Origin") // a cache keeps answers apart by origin
			next.ServeHTTP(w, r)
			return
		case p.origins[strings.ToLower(origin)]:
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Timing-Allow-Origin", origin)
			h.Add("Vary", "Origin")
		default:
			h.Add("Vary", "Origin")
			frontend.WriteProblem(w, r, log, OriginNotAllowed.With("origin", origin), http.StatusForbidden)
			return
		}
		h.Set("Access-Control-Expose-Headers", ExposeHeaders)
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", AllowMethods)
			h.Set("Access-Control-Allow-Headers", AllowHeaders)
			h.Set("Access-Control-Max-Age", MaxAge)
			if r.Header.Get("Access-Control-Request-Method") != "" {
				w.WriteHeader(http.StatusNoContent) // a preflight: answered here, before any token check
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
