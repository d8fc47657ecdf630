package dsapi

import (
	"net/http"

	"github.com/picomq/picomq/broker/frontend"
	"strings"
	"testing"
)

// sharedMayStore applies RFC 9111's storage rules for a shared cache (a
// CDN, a proxy) to one exchange: §3 (what may be stored at all) and §3.5
// (a request that carried Authorization). It reports whether the answer
// may be stored, and why not.
func sharedMayStore(method string, req http.Header, status int, h http.Header) (bool, string) {
	if method != http.MethodGet && method != http.MethodHead {
		return false, "method"
	}
	cc := map[string]bool{}
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(strings.ToLower(d)), "=")
			cc[name] = true
		}
	}
	switch {
	case cc["no-store"]:
		return false, "no-store"
	case cc["private"]:
		return false, "private" // §3: a shared cache never stores it
	case req.Get("Authorization") != "" && !cc["must-revalidate"] && !cc["public"] && !cc["s-maxage"]:
		return false, "authorization" // §3.5
	}
	// §3: explicit freshness, public, or a status cacheable by default
	// (RFC 9110 §15.1), heuristically fresh.
	heuristic := map[int]bool{200: true, 203: true, 204: true, 206: true, 300: true, 301: true, 308: true, 404: true, 405: true, 410: true, 414: true, 501: true}
	if cc["public"] || cc["max-age"] || cc["s-maxage"] || h.Get("Expires") != "" || heuristic[status] {
		return true, ""
	}
	return false, "not cacheable"
}

// TestSharedCacheStorageRules reads every kind of read answer — history,
// the tail, offset=now, HEAD, a long-poll with data and one timing out,
// SSE, a revalidation (304), a closed stream, a missing stream — three
// ways: anonymously, with a bearer token, and with a signed URL. A shared
// cache applying RFC 9111 may store none of the credentialed answers;
// anonymous history and closed answers stay storable, with an ETag to
// revalidate by.
func TestSharedCacheStorageRules(t *testing.T) {
	s := start(t, t.TempDir(), nil)
	s.want(s.do("PUT", "c/open", "", "Content-Type", "application/json"), 201, "create")
	big := `["` + strings.Repeat("x", 700<<10) + `"]`
	for _, body := range []string{big, big, `[3]`} {
		s.want(s.do("POST", "c/open", body, "Content-Type", "application/json"), 204, "append")
	}
	s.want(s.do("PUT", "c/closed", "", "Content-Type", "text/plain"), 201, "create")
	s.want(s.do("POST", "c/closed", "done\n", "Content-Type", "text/plain", "Stream-Closed", "true"), 204, "append and close")
	etag := s.do("GET", "c/open?offset="+formatOffset(0), "").h.Get("ETag")
	if etag == "" {
		t.Fatal("history has no ETag")
	}
	type read struct {
		what, method, path string
		headers            []string
		status             int
		anonStorable       bool // whether an anonymous answer must be storable
	}
	reads := []read{
		{"history", "GET", "c/open?offset=" + formatOffset(0), nil, 200, true},
		{"the tail", "GET", "c/open?offset=-1", nil, 200, false},
		{"offset=now", "GET", "c/open?offset=now", nil, 200, false},
		{"HEAD", "HEAD", "c/open", nil, 200, false},
		{"a long-poll with data", "GET", "c/open?live=long-poll&offset=" + formatOffset(2), nil, 200, false},
		{"a long-poll timing out", "GET", "c/open?live=long-poll&offset=" + formatOffset(3), nil, 204, false},
		{"SSE of a closed stream", "GET", "c/closed?live=sse&offset=-1", nil, 200, false},
		{"a revalidation", "GET", "c/open?offset=" + formatOffset(0), []string{"If-None-Match", etag}, 304, true},
		{"a closed stream", "GET", "c/closed?offset=-1", nil, 200, true},
		{"a missing stream", "GET", "c/none?offset=-1", nil, 404, false},
	}
	for _, r := range reads {
		for _, cred := range []string{"anonymous", "token", "signed URL"} {
			path, headers := r.path, append([]string(nil), r.headers...)
			reqH := http.Header{}
			switch cred {
			case "token":
				headers = append(headers, "Authorization", "Bearer reader-0123456789")
			case "signed URL":
				sep := "?"
				if strings.Contains(path, "?") {
					sep = "&"
				}
				path += sep + "picomq-scope=c%2F&picomq-exp=1&picomq-key=k&" + frontend.SignatureParam + "=abc"
			}
			for i := 0; i+1 < len(headers); i += 2 {
				reqH.Set(headers[i], headers[i+1])
			}
			res := s.do(r.method, path, "", headers...)
			if res.status != r.status {
				t.Fatalf("%s, %s: status %d, want %d (%s)", r.what, cred, res.status, r.status, res.body)
			}
			stored, why := sharedMayStore(r.method, reqH, res.status, res.h)
			switch {
			case cred != "anonymous" && stored:
				t.Errorf("%s, %s: a shared cache may store it (Cache-Control %q)", r.what, cred, res.h.Values("Cache-Control"))
			case cred == "anonymous" && r.anonStorable && !stored:
				t.Errorf("%s, anonymous: a shared cache may not store it (%s; Cache-Control %q)", r.what, why, res.h.Values("Cache-Control"))
			case cred == "anonymous" && r.anonStorable && res.h.Get("ETag") == "":
				t.Errorf("%s, anonymous: no ETag to revalidate by", r.what)
			case cred == "token" && stored == false && res.status == 200 && r.anonStorable && !strings.Contains(strings.Join(res.h.Values("Vary"), ","), "Authorization"):
				t.Errorf("%s, token: no Vary: Authorization", r.what)
			}
		}
	}
}
