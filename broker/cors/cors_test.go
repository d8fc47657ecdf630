package cors

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	served := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.WriteHeader(http.StatusTeapot)
	})
	listed, err := New([]string{"https://app.example.com", "http://127.0.0.1:8080"}, true)
	if err != nil {
		t.Fatal(err)
	}
	authNoList, _ := New(nil, true)
	openNoList, _ := New(nil, false)
	star, _ := New([]string{"*"}, true)
	type want struct {
		status int
		acao   string // Access-Control-Allow-Origin
		served bool
	}
	for _, c := range []struct {
		name   string
		p      *Policy
		method string
		origin string
		pre    bool // a preflight
		want   want
	}{
		{"listed origin", listed, "GET", "https://app.example.com", false, want{418, "https://app.example.com", true}},
		{"listed origin, any case", listed, "GET", "https://APP.example.com", false, want{418, "https://APP.example.com", true}},
		{"listed origin preflight", listed, "OPTIONS", "http://127.0.0.1:8080", true, want{204, "http://127.0.0.1:8080", false}},
		{"unlisted origin", listed, "GET", "https://evil.example", false, want{403, "", false}},
		{"unlisted origin preflight", listed, "OPTIONS", "https://evil.example", true, want{403, "", false}},
		{"unlisted port", listed, "POST", "http://127.0.0.1:8081", false, want{403, "", false}},
		{"null origin", listed, "GET", "null", false, want{403, "", false}},
		{"no origin", listed, "GET", "", false, want{418, "", true}},
		{"auth, no list", authNoList, "GET", "https://app.example.com", false, want{403, "", false}},
		{"auth, no list, no origin", authNoList, "GET", "", false, want{418, "", true}},
		{"no auth, no list", openNoList, "GET", "https://anything.example", false, want{418, "*", true}},
		{"star", star, "OPTIONS", "https://anything.example", true, want{204, "*", false}},
		{"plain OPTIONS passes", listed, "OPTIONS", "https://app.example.com", false, want{418, "https://app.example.com", true}},
	} {
		served = 0
		req := httptest.NewRequest(c.method, "/v1/stream/s", nil)
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.pre {
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		}
		rec := httptest.NewRecorder()
		c.p.Wrap(next).ServeHTTP(rec, req)
		h := rec.Header()
		if rec.Code != c.want.status || h.Get("Access-Control-Allow-Origin") != c.want.acao || (served == 1) != c.want.served {
			t.Errorf("%s: %d %q served=%d, want %+v", c.name, rec.Code, h.Get("Access-Control-Allow-Origin"), served, c.want)
			continue
		}
		if c.want.status == 403 && !strings.Contains(rec.Body.String(), "ORIGIN_NOT_ALLOWED") {
			t.Errorf("%s: refusal %s", c.name, rec.Body)
		}
		if c.want.acao != "" && c.want.acao != "*" && !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
			t.Errorf("%s: an echoed origin without Vary: Origin", c.name)
		}
		if c.pre && c.want.status == 204 {
			for _, hd := range []string{"Authorization", "Content-Type", "Producer-Id", "Stream-Seq"} {
				if !strings.Contains(h.Get("Access-Control-Allow-Headers"), hd) {
					t.Errorf("%s: preflight does not allow %s", c.name, hd)
				}
			}
		}
		if c.want.acao != "" {
			for _, hd := range []string{"Stream-Next-Offset", "Stream-Cursor", "Stream-Up-To-Date", "ETag", "WWW-Authenticate"} {
				if !strings.Contains(h.Get("Access-Control-Expose-Headers"), hd) {
					t.Errorf("%s: does not expose %s", c.name, hd)
				}
			}
		}
	}
}

func TestNewRefusesBadOrigins(t *testing.T) {
	for _, bad := range [][]string{
		{"app.example.com"}, {"https://app.example.com/path"}, {"ftp://x"}, {"https://u@x"}, {"*", "https://x"}, {"https://x?q=1"},
	} {
		if _, err := New(bad, true); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if p, err := New([]string{"https://App.Example.com/"}, true); err != nil || !p.origins["https://app.example.com"] {
		t.Errorf("a trailing slash and case: %v", err)
	}
}
