package contracts_test

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/cors"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

const (
	shopTok   = "contract-shop-0123456789"
	appOrigin = "https://app.example.com"
)

// accessCluster runs brokers with tokens, a signing key, an anonymous
// prefix and one allowed origin, and a token limited to shop/.
func accessCluster(t *testing.T, o clusterharness.Options) *clusterharness.Cluster {
	keys := t.TempDir()
	if err := os.WriteFile(filepath.Join(keys, "2026-12"), []byte(strings.Repeat("K", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	o.ExtraFlags = append(o.ExtraFlags, "--url-signing-keys-dir", keys, "--anonymous-read-prefixes", "public/",
		"--cors-allowed-origins", appOrigin)
	c := clusterharness.Start(t, o)
	c.SetToken("shop", "read:shop/,write:shop/", shopTok)
	c.SetToken("admin", "admin", adminTok)
	for i := range o.Brokers {
		waitToken(t, c, i, shopTok, true)
		waitToken(t, c, i, adminTok, true)
	}
	return c
}

// TestAccessLoneBrokerH2C: a lone broker without TLS, spoken to over h2c.
func TestAccessLoneBrokerH2C(t *testing.T) {
	needBroker(t)
	c := accessCluster(t, clusterharness.Options{Brokers: 1, Security: &clusterharness.Security{Tokens: true}})
	checkAccess(t, c, 1, nil)
}

// TestAccessClusterTLS: three brokers with TLS, over h2: every check
// through every broker, so that requests are proxied to the streams'
// owners and a URL signed by one broker is read through the others.
func TestAccessClusterTLS(t *testing.T) {
	needCluster(t)
	o := options()
	o.Security = &clusterharness.Security{TLS: true, Tokens: true}
	c := accessCluster(t, o)
	checkAccess(t, c, 3, c.TLSConfig())
}

// checkAccess runs every access rule against brokers 0..n-1 of c: what a
// prefix-limited token may do and what it is refused (writing nothing),
// what a listing shows it, signed URLs (read, expired, tampered, used to
// write), anonymous reads and their cache headers, and CORS origins.
func checkAccess(t *testing.T, c *clusterharness.Cluster, n int, conf *tls.Config) {
	t.Helper()
	hc := h2Client(conf.Clone(), nil)
	defer hc.CloseIdleConnections()
	req := func(i int, method, path, token, body string, hdr ...string) (*http.Response, string) {
		t.Helper()
		if token != "" {
			hdr = append(hdr, "Authorization", "Bearer "+token)
		}
		if body != "" || method == "PUT" {
			hdr = append(hdr, "Content-Type", "text/plain")
		}
		return do(t, hc, method, c.URL(i)+path, body, hdr...)
	}
	expect := func(what string, resp *http.Response, body string, status int, code string) {
		t.Helper()
		if resp.StatusCode != status || (code != "" && !strings.Contains(body, `"`+code+`"`)) {
			t.Fatalf("%s: %s %s %s, want %d %s", what, resp.Proto, resp.Status, body, status, code)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s: answered over %s, want HTTP/2.0", what, resp.Proto)
		}
	}
	admin := func(i int, method, path, body string) (*http.Response, string) {
		return req(i, method, path, adminTok, body)
	}

	for i := range n {
		name := fmt.Sprintf("shop/orders-%d", i)
		resp, body := req(i, "PUT", "/v1/stream/"+name, shopTok, "")
		expect("a shop/ token creates "+name, resp, body, 201, "")
		resp, body = req(i, "POST", "/v1/stream/"+name, shopTok, "one\n")
		expect("a shop/ token appends", resp, body, 204, "")
		resp, body = req(i, "GET", "/v1/stream/"+name+"?offset=-1", shopTok, "")
		expect("a shop/ token reads", resp, body, 200, "")
		if body != "one\n" {
			t.Fatalf("read %q", body)
		}
		// Refused, and nothing written.
		for _, m := range []string{"PUT", "POST"} {
			resp, body = req(i, m, fmt.Sprintf("/v1/stream/billing/x-%d", i), shopTok, "x\n")
			expect(m+" outside the token's prefix", resp, body, 403, "FORBIDDEN")
		}
		resp, body = admin(i, "HEAD", fmt.Sprintf("/v1/stream/billing/x-%d", i), "")
		if resp.StatusCode != 404 {
			t.Fatalf("a refused create made billing/x-%d: %s", i, resp.Status)
		}
		resp, body = req(i, "DELETE", "/v1/stream/"+name, shopTok, "")
		expect("a shop/ token deletes", resp, body, 403, "FORBIDDEN")
		resp, body = req(i, "GET", "/v1/stream/shopping/x?offset=-1", shopTok, "")
		expect("a name that only starts like the prefix", resp, body, 403, "FORBIDDEN")
	}
	resp, body := admin(0, "PUT", "/v1/stream/billing/ledger", "")
	expect("admin creates billing/ledger", resp, body, 201, "")
	resp, body = admin(0, "PUT", "/v1/stream/public/feed", "")
	expect("admin creates public/feed", resp, body, 201, "")
	resp, body = admin(0, "POST", "/v1/stream/public/feed", "news\n")
	expect("admin appends to public/feed", resp, body, 204, "")
	// Closed: its answers never change, so a CDN may keep them.
	resp, body = req(0, "POST", "/v1/stream/public/feed", adminTok, "", "Stream-Closed", "true")
	expect("admin closes public/feed", resp, body, 204, "")

	// Forking a stream the token cannot read into its prefix is refused,
	// and makes nothing; forking one it can read works.
	for i := range n {
		fork := fmt.Sprintf("/v1/stream/shop/fork-%d", i)
		resp, body = req(i, "PUT", fork, shopTok, "", "Stream-Forked-From", "/v1/stream/billing/ledger")
		expect("a fork of billing/ledger by a shop/ token", resp, body, 403, "FORBIDDEN")
		resp, _ = admin(i, "HEAD", fork, "")
		if resp.StatusCode != 404 {
			t.Fatalf("a refused fork made %s: %s", fork, resp.Status)
		}
		resp, body = req(i, "PUT", fork, shopTok, "", "Stream-Forked-From", "/v1/stream/shop/orders-0")
		expect("a fork of shop/orders-0 by a shop/ token", resp, body, 201, "")
	}

	// The Go client with the limited token: its appends (one request for
	// several streams) within the prefix go, one outside is refused.
	var tconf *tls.Config
	if conf != nil {
		tconf = conf.Clone()
	}
	for i := range n {
		cl, err := client.New(c.URL(i), client.WithTLSConfig(tconf), client.WithToken(shopTok))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		s, err := cl.Stream(t.Context(), fmt.Sprintf("shop/orders-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(t.Context(), []stream.RecordValue{{Payload: []byte("sdk\n")}}); err != nil {
			t.Fatalf("SDK append within the prefix via broker-%d: %v", i, err)
		}
		if _, err := cl.Stream(t.Context(), "billing/ledger"); !errors.Is(err, auth.Forbidden) {
			t.Fatalf("SDK open outside the prefix: %v, want FORBIDDEN", err)
		}
		// A listing shows only shop/.
		list, err := cl.ListStreams(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			if !strings.HasPrefix(e.Name, "shop/") {
				t.Fatalf("a shop/ token's listing shows %s", e.Name)
			}
		}
		if len(list) != 2*n { // the orders and their forks
			t.Fatalf("a shop/ token's listing shows %d streams, want %d", len(list), 2*n)
		}
	}

	// Signed URLs: minted on broker 0, read through every broker.
	resp, body = req(0, "POST", wire.SignPath, shopTok, `{"stream":"shop/orders-0","expiresIn":"10m"}`, "Content-Type", "application/json")
	expect("sign", resp, body, 200, "")
	var signed wire.SignResponse
	if err := json.Unmarshal([]byte(body), &signed); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(signed.URL)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		resp, body = req(i, "GET", u.Path+"?"+u.RawQuery+"&offset=-1", "", "")
		expect("a signed URL read through broker "+fmt.Sprint(i), resp, body, 200, "")
		if body != "one\nsdk\n" || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "private") {
			t.Fatalf("signed read: %q, Cache-Control %q", body, resp.Header.Get("Cache-Control"))
		}
		resp, body = req(i, "POST", u.Path+"?"+u.RawQuery, "", "x\n")
		expect("a signed URL used to write", resp, body, 403, "SIGNED_URL_INVALID")
		resp, body = req(i, "GET", "/v1/stream/shop/orders-1?"+u.RawQuery+"&offset=-1", "", "")
		expect("a signed URL used for another stream", resp, body, 403, "SIGNED_URL_INVALID")
		tampered := strings.Replace(u.RawQuery, "picomq-scope=shop%2Forders-0", "picomq-scope=shop%2F", 1)
		resp, body = req(i, "GET", "/v1/stream/shop/orders-1?"+tampered+"&offset=-1", "", "")
		expect("a tampered signed URL", resp, body, 401, "SIGNED_URL_INVALID")
	}
	resp, body = req(0, "POST", wire.SignPath, shopTok, `{"stream":"billing/ledger"}`, "Content-Type", "application/json")
	expect("signing outside the token's prefix", resp, body, 403, "FORBIDDEN")
	resp, body = req(0, "POST", wire.SignPath, shopTok, `{"stream":"shop/orders-0","expiresIn":"1s"}`, "Content-Type", "application/json")
	expect("sign for 1s", resp, body, 200, "")
	var short wire.SignResponse
	_ = json.Unmarshal([]byte(body), &short)
	time.Sleep(time.Until(short.ExpiresAt) + 100*time.Millisecond)
	su, _ := url.Parse(short.URL)
	resp, body = req(n-1, "GET", su.Path+"?"+su.RawQuery+"&offset=-1", "", "")
	expect("an expired signed URL", resp, body, 401, "SIGNED_URL_EXPIRED")

	// Anonymous reads: public/ only, and cacheable by a CDN.
	for i := range n {
		resp, body = req(i, "GET", "/v1/stream/public/feed?offset=-1", "", "")
		expect("an anonymous read of public/", resp, body, 200, "")
		if body != "news\n" || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "public") {
			t.Fatalf("anonymous read: %q, Cache-Control %q", body, resp.Header.Get("Cache-Control"))
		}
		resp, body = req(i, "GET", "/v1/stream/shop/orders-0?offset=-1", "", "")
		expect("an anonymous read outside public/", resp, body, 401, "UNAUTHENTICATED")
		resp, body = req(i, "POST", "/v1/stream/public/feed", "", "x\n")
		expect("an anonymous write to public/", resp, body, 401, "UNAUTHENTICATED")
	}

	// CORS: the allowed origin is echoed once (also when proxied), another
	// refused, preflights included.
	for i := range n {
		resp, body = req(i, "GET", "/v1/stream/shop/orders-0?offset=-1", shopTok, "", "Origin", appOrigin)
		expect("a read from the allowed origin", resp, body, 200, "")
		if got := resp.Header.Values("Access-Control-Allow-Origin"); len(got) != 1 || got[0] != appOrigin {
			t.Fatalf("Access-Control-Allow-Origin %q via broker-%d, want exactly %s", got, i, appOrigin)
		}
		resp, body = req(i, "OPTIONS", "/v1/stream/shop/orders-0", "", "", "Origin", appOrigin,
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type,producer-id")
		expect("a preflight from the allowed origin", resp, body, 204, "")
		if !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
			t.Fatalf("preflight allows %q", resp.Header.Get("Access-Control-Allow-Headers"))
		}
		resp, body = req(i, "POST", "/v1/stream/shop/orders-0", shopTok, "evil\n", "Origin", "https://evil.example")
		expect("an append from another origin", resp, body, 403, cors.OriginNotAllowed.Name())
		resp, body = req(i, "OPTIONS", "/v1/stream/shop/orders-0", "", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
		expect("a preflight from another origin", resp, body, 403, cors.OriginNotAllowed.Name())
	}
	resp, body = req(0, "GET", "/v1/stream/shop/orders-0?offset=-1", shopTok, "")
	if body != "one\nsdk\n" {
		t.Fatalf("a refused origin's append was written: %q", body)
	}
}
