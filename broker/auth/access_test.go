package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

func TestTokenFileForms(t *testing.T) {
	for _, c := range []struct {
		content, grants, token string
	}{
		{"read:tok-0123456789abcdef", "read", "tok-0123456789abcdef"},
		{"read,write:tok-0123456789abcdef", "read,write", "tok-0123456789abcdef"},
		{"read:shop/:tok-0123456789abcdef", "read:shop/", "tok-0123456789abcdef"},
		{"read:shop/,write:shop/orders:tok-0123456789abcdef", "read:shop/,write:shop/orders", "tok-0123456789abcdef"},
		{"admin,read:shop/:tok-0123456789abcdef", "admin,read:shop/", "tok-0123456789abcdef"},
	} {
		gs, tok, err := splitTokenFile(c.content)
		if err == nil {
			err = checkMixed(gs)
		}
		if err != nil || gs.String() != c.grants || tok != c.token {
			t.Errorf("%q: %q %q %v, want %q %q", c.content, gs.String(), tok, err, c.grants, c.token)
		}
	}
	for _, bad := range []string{
		"tok-0123456789abcdef",                    // no scope
		"admin:shop/:tok-0123456789abcdef",        // admin limited
		"read:../x/:tok-0123456789abcdef",         // not a name
		"read:shop//:tok-0123456789abcdef",        // empty segment
		"read:shop/,bogus:tok-0123456789abcdef",   // unknown scope
		"tok-0123456789abcdef:read",               // the wrong way round
		"read,write:shop/:tok-0123456789abcdef",   // read everywhere beside a limited write
		"read:shop/,write:tok-0123456789abcdef",   // write everywhere beside a limited read
		"write:a/b/c/,read:tok-0123456789abcdef",  // read everywhere beside a limited write
		"read:sh op/:tok-0123456789abcdef",        // space in a prefix
		"read:shop/,write:shop/x,tok-0123456789a", // no token after the last item
	} {
		gs, tok, err := splitTokenFile(bad)
		if err == nil {
			err = checkMixed(gs)
		}
		if err == nil && len(tok) >= MinTokenBytes {
			t.Errorf("%q accepted: %q %q", bad, gs, tok)
		} else if err != nil && strings.Contains(err.Error(), "tok-") {
			t.Errorf("%q: the error quotes the file: %v", bad, err)
		}
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		prefix, name string
		want         bool
	}{
		{"", "anything", true},
		{"shop/", "shop/orders", true},
		{"shop/", "shop/eu/orders", true},
		{"shop/", "shop", false},
		{"shop/", "shopping/x", false},
		{"shop/", "shop/../billing/x", false},
		{"shop/", "shop//x", false},
		{"shop/orders", "shop/orders", true},
		{"shop/orders", "shop/orders-eu", false},
		{"shop/orders", "shop/orders/x", false},
	} {
		if got := Covers(c.prefix, c.name); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.prefix, c.name, got, c.want)
		}
	}
}

const (
	shopTok  = "shop-token-0123456789"
	adminTk2 = "admin-token-0123456789"
)

// accessHandler is a middleware with a prefix-limited token, an admin
// token, an anonymous prefix and two signing keys, in front of a handler
// that records what it served and lists streams as httpapi does.
func accessHandler(t *testing.T, now *time.Time) (http.Handler, *SigningKeys, *[]string) {
	t.Helper()
	dir, kdir := t.TempDir(), t.TempDir()
	writeFile(t, dir, "shop", "read:shop/,write:shop/:"+shopTok)
	writeFile(t, dir, "admin", "admin:"+adminTk2)
	tk, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, kdir, "2026-11", strings.Repeat("k", 32))
	writeFile(t, kdir, "2026-12", strings.Repeat("n", 40))
	keys, err := LoadSigningKeys(kdir, nil)
	if err != nil || keys.Len() != 2 {
		t.Fatalf("keys: %d %v", keys.Len(), err)
	}
	var served []string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == wire.StreamsPath {
			var names []string
			for _, n := range []string{"shop/a", "shop/b", "billing/x", "public/feed"} {
				if frontend.Visible(r.Context(), n) {
					names = append(names, n)
				}
			}
			_ = json.NewEncoder(w).Encode(names)
		}
		body, _ := io.ReadAll(r.Body)
		served = append(served, r.Method+" "+r.URL.Path+" "+string(body))
		w.WriteHeader(http.StatusTeapot)
	})
	mw := Middleware{Tokens: tk, AnonymousRead: []string{"public/"}, Keys: keys, Now: func() time.Time { return *now }}
	return mw.Wrap(next), keys, &served
}

func TestPrefixLimitedTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, _, served := accessHandler(t, &now)
	appends := wire.AppendItemTo(wire.AppendItemTo(nil, "shop/a", -1, []byte("x")), "shop/b", -1, []byte("y"))
	mixed := wire.AppendItemTo(wire.AppendItemTo(nil, "shop/a", -1, []byte("x")), "billing/x", -1, []byte("y"))
	// A fork copies its source: forking a stream the token cannot read
	// into one it can is refused, whatever form the source is named in.
	for _, c := range []struct {
		src  string
		want int
	}{
		{"/v1/stream/billing/secret", 403},
		{"https://elsewhere.example/v1/stream/billing/secret", 403},
		{"/v1/stream/billing%2Fsecret", 403},
		{"/v1/stream/shop/../billing/secret", 403},
		{"/v1/stream/shop/a", 418},
	} {
		*served = nil
		req := httptest.NewRequest("PUT", "/v1/stream/shop/fork", nil)
		req.Header.Set("Authorization", "Bearer "+shopTok)
		req.Header.Set(wire.ForkedFromHeader, c.src)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want || (c.want == 403) != (len(*served) == 0) {
			t.Errorf("fork of %s into shop/fork: %d (served %d), want %d", c.src, rec.Code, len(*served), c.want)
		}
	}
	for _, c := range []struct {
		method, path, token string
		body                []byte
		want                int
	}{
		{"GET", "/v1/stream/shop/orders", shopTok, nil, 418},
		{"PUT", "/v1/stream/shop/orders", shopTok, nil, 418},
		{"POST", "/v1/stream/shop/orders", shopTok, []byte("x"), 418},
		{"DELETE", "/v1/stream/shop/orders", shopTok, nil, 403}, // admin's
		{"GET", "/v1/stream/billing/x", shopTok, nil, 403},
		{"POST", "/v1/stream/billing/x", shopTok, []byte("x"), 403},
		{"PUT", "/v1/stream/billing/x", shopTok, nil, 403},
		{"GET", "/v1/stream/shopping/x", shopTok, nil, 403},
		{"POST", "/v1/log/shop/a", shopTok, []byte("x"), 418},
		{"GET", "/v1/log/shop/a:bounds", shopTok, nil, 418},
		{"GET", "/v1/log/billing/x:bounds", shopTok, nil, 403},
		{"POST", "/v1/log/billing/x:commit", shopTok, nil, 403},
		{"GET", "/v1/admin/streams/billing/x", shopTok, nil, 403},
		{"GET", wire.NodePath, shopTok, nil, 418},
		{"POST", wire.DrainPath, shopTok, nil, 403},
		{"GET", "/debug/pprof/", shopTok, nil, 403},
		{"POST", wire.AppendsPath, shopTok, appends, 418},
		{"POST", wire.AppendsPath, shopTok, mixed, 403}, // refused whole
		{"POST", wire.AppendsPath, adminTk2, mixed, 418},
		{"GET", "/v1/stream/billing/x", adminTk2, nil, 418},
	} {
		*served = nil
		req := httptest.NewRequest(c.method, c.path, bytes.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %s (%s): %d, want %d: %s", c.method, c.path, c.token[:4], rec.Code, c.want, rec.Body)
			continue
		}
		if (c.want == 418) != (len(*served) == 1) {
			t.Errorf("%s %s: the handler ran %d times", c.method, c.path, len(*served))
		}
		if c.want == 418 && c.body != nil && !strings.HasSuffix((*served)[0], string(c.body)) {
			t.Errorf("%s %s: the handler read %q, want the whole body", c.method, c.path, (*served)[0])
		}
		if c.want == 403 {
			assertCoded(t, rec.Body.Bytes(), Forbidden)
		}
	}
	// A listing shows only what the token may read.
	req := httptest.NewRequest("GET", wire.StreamsPath, nil)
	req.Header.Set("Authorization", "Bearer "+shopTok)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := strings.TrimSpace(rec.Body.String()); got != `["shop/a","shop/b"]` {
		t.Errorf("listing with a shop/ token: %s", got)
	}
	req.Header.Set("Authorization", "Bearer "+adminTk2)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := strings.TrimSpace(rec.Body.String()); got != `["shop/a","shop/b","billing/x","public/feed"]` {
		t.Errorf("listing with an admin token: %s", got)
	}
}

func TestAnonymousPrefixes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, _, _ := accessHandler(t, &now)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/stream/public/feed", 418},
		{"HEAD", "/v1/stream/public/feed", 418},
		{"GET", "/v1/log/public/feed:bounds", 418},
		{"POST", "/v1/stream/public/feed", 401},
		{"PUT", "/v1/stream/public/feed", 401},
		{"GET", "/v1/stream/public", 401},
		{"GET", "/v1/stream/shop/a", 401},
		{"GET", wire.StreamsPath, 401},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.want {
			t.Errorf("anonymous %s %s: %d, want %d", c.method, c.path, rec.Code, c.want)
		}
	}
}

func TestSignedURLs(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, keys, served := accessHandler(t, &now)
	get := func(method, path string, q url.Values) *httptest.ResponseRecorder {
		*served = nil
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path+"?"+q.Encode()+"&offset=-1&live=long-poll", nil))
		return rec
	}
	q, ok := keys.Sign("shop/orders", now.Add(10*time.Minute))
	if !ok || q.Get(ParamKey) != "2026-12" {
		t.Fatalf("signed with %q, want the last key by name", q.Get(ParamKey))
	}
	if rec := get("GET", "/v1/stream/shop/orders", q); rec.Code != 418 || len(*served) != 1 {
		t.Fatalf("a signed URL: %d %s", rec.Code, rec.Body)
	}
	if rec := get("HEAD", "/v1/stream/shop/orders", q); rec.Code != 418 {
		t.Fatalf("HEAD by a signed URL: %d", rec.Code)
	}
	for _, c := range []struct {
		name, method, path string
		q                  func() url.Values
		status             int
		code               string
	}{
		{"another stream", "GET", "/v1/stream/shop/orders-eu", func() url.Values { return q }, 403, "SIGNED_URL_INVALID"},
		{"a write", "POST", "/v1/stream/shop/orders", func() url.Values { return q }, 403, "SIGNED_URL_INVALID"},
		{"a create", "PUT", "/v1/stream/shop/orders", func() url.Values { return q }, 403, "SIGNED_URL_INVALID"},
		{"scope changed", "GET", "/v1/stream/billing/x", func() url.Values {
			o := url.Values{}
			for k, v := range q {
				o[k] = v
			}
			o.Set(ParamScope, "billing/x")
			return o
		}, 401, "SIGNED_URL_INVALID"},
		{"expiry changed", "GET", "/v1/stream/shop/orders", func() url.Values {
			o := url.Values{}
			for k, v := range q {
				o[k] = v
			}
			o.Set(ParamExp, "1900000000")
			return o
		}, 401, "SIGNED_URL_INVALID"},
		{"unknown key", "GET", "/v1/stream/shop/orders", func() url.Values {
			o := url.Values{}
			for k, v := range q {
				o[k] = v
			}
			o.Set(ParamKey, "2025-01")
			return o
		}, 401, "SIGNED_URL_INVALID"},
		{"no signature's fellows", "GET", "/v1/stream/shop/orders", func() url.Values { return url.Values{ParamSig: {q.Get(ParamSig)}} }, 401, "SIGNED_URL_INVALID"},
	} {
		rec := get(c.method, c.path, c.q())
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.code) || len(*served) != 0 {
			t.Errorf("%s: %d %s (served %d), want %d %s", c.name, rec.Code, rec.Body, len(*served), c.status, c.code)
		}
	}
	// A prefix URL covers the names under it.
	pq, _ := keys.Sign("shop/", now.Add(time.Minute))
	if rec := get("GET", "/v1/stream/shop/eu/orders", pq); rec.Code != 418 {
		t.Fatalf("a prefix URL: %d %s", rec.Code, rec.Body)
	}
	// Expired: told so, by its own code.
	now = now.Add(11 * time.Minute)
	if rec := get("GET", "/v1/stream/shop/orders", q); rec.Code != 401 || !strings.Contains(rec.Body.String(), "SIGNED_URL_EXPIRED") {
		t.Fatalf("an expired URL: %d %s", rec.Code, rec.Body)
	}
	// Rotation: a URL signed with the old key verifies while it stays, not
	// once it is removed.
	old := url.Values{ParamScope: {"shop/orders"}, ParamExp: {"1800009999"}, ParamKey: {"2026-11"}, ParamSig: {mac([]byte(strings.Repeat("k", 32)), "shop/orders", 1800009999)}}
	if rec := get("GET", "/v1/stream/shop/orders", old); rec.Code != 418 {
		t.Fatalf("a URL of the older key: %d %s", rec.Code, rec.Body)
	}
	if err := os.Remove(filepath.Join(keys.dir, "2026-11")); err != nil {
		t.Fatal(err)
	}
	if changed, err := keys.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if rec := get("GET", "/v1/stream/shop/orders", old); rec.Code != 401 {
		t.Fatalf("a URL of a removed key: %d %s", rec.Code, rec.Body)
	}
}

func TestSignHandler(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	_, keys, _ := accessHandler(t, &now)
	sh := SignHandler{Keys: keys, Now: func() time.Time { return now }, DSPrefix: "/v1/stream/"}
	sign := func(grants Grants, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", SignPath, strings.NewReader(body))
		req = req.WithContext(context.WithValue(req.Context(), grantsKey{}, grants))
		rec := httptest.NewRecorder()
		sh.ServeHTTP(rec, req)
		return rec
	}
	shop, _ := ParseGrants("read:shop/,write:shop/")
	rec := sign(shop, `{"stream":"shop/orders","expiresIn":"10m"}`)
	var out wire.SignResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil {
		t.Fatalf("sign: %d %s", rec.Code, rec.Body)
	}
	u, err := url.Parse(out.URL)
	if err != nil || u.Path != "/v1/stream/shop/orders" || !out.ExpiresAt.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("signed %+v", out)
	}
	if scope, coded := keys.Verify(u.Query(), now); coded != nil || scope != "shop/orders" {
		t.Fatalf("the URL signed does not verify: %q %v", scope, coded)
	}
	readOnly, _ := ParseGrants("read")
	for _, c := range []struct {
		grants Grants
		body   string
		want   int
	}{
		{shop, `{"prefix":"shop/"}`, 200},
		{shop, `{"prefix":"shop/eu/"}`, 200},
		{shop, `{"stream":"billing/x"}`, 403},
		{shop, `{"prefix":"sho"}`, 400},
		{readOnly, `{"stream":"shop/orders"}`, 403},
		{shop, `{"stream":"shop/orders","expiresIn":"200h"}`, 400},
		{shop, `{"stream":"shop/orders","expiresIn":"-1m"}`, 400},
		{shop, `{"stream":"shop/orders","prefix":"shop/"}`, 400},
		{shop, `{"stream":"shop/orders","stream":"billing/x"}`, 400},
	} {
		if rec := sign(c.grants, c.body); rec.Code != c.want {
			t.Errorf("sign %s with %s: %d, want %d: %s", c.body, c.grants, rec.Code, c.want, rec.Body)
		}
	}
}
