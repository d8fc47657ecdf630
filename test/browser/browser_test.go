// Package browser_test runs the Durable Streams client of npm
// (@durable-streams/client, from test/conformance's lock file) in a real
// headless Chromium against a real broker process served over TLS, HTTP/2
// and bearer tokens, from a page of another origin (issue 31).
//
// One browser, one broker; the page (page/app.js) offers scenarios that the
// test starts one at a time through the DevTools protocol (chromedp) and
// whose results it reads back as JSON. On a failure it keeps a screenshot,
// the page's results, its console and the broker's log (see artefacts).
//
// The prefix-scoped tokens, the CORS allow-list and signed read URLs are
// tested against the broker's interface as specified for them; while the
// broker binary does not offer one yet (a probe says so), its subtests skip
// with "pending: …" and start running once it does.
package browser_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/picomq/picomq/test/clusterharness"
)

func TestMain(m *testing.M) { clusterharness.Main(m) }

//go:embed page
var pageFiles embed.FS

// clientModule is the npm package's ES module, installed by `make
// conformance-deps` (npm ci from test/conformance/package-lock.json).
const clientModule = "../conformance/node_modules/@durable-streams/client/dist/index.js"

// Environment.
const (
	// ChromiumEnv names the browser binary (default: the first of
	// chromium, chromium-browser, google-chrome on PATH).
	ChromiumEnv = "PICOMQ_CHROMIUM"
	// RequireEnv=1 (as CI=true) fails the test, instead of skipping it,
	// when Chromium or the npm package is missing.
	RequireEnv = "PICOMQ_REQUIRE_BROWSER"
	// ArtefactsEnv names a folder for a failed run's screenshot, page
	// results, console and broker log (default: a new picomq-browser-*
	// folder under the system's temporary directory, kept on failure).
	ArtefactsEnv = "PICOMQ_BROWSER_ARTIFACTS"
)

// Tokens (each at least 16 bytes, as the broker requires).
const (
	adminTok  = "browser-admin-0123456789abcdef"
	rwTok     = "browser-readwrite-0123456789abcdef"
	readTok   = "browser-read-0123456789abcdef"
	prefixTok = "browser-shop-prefix-0123456789abcdef" // read:shop/,write:shop/
	exactTok  = "browser-shop-orders-0123456789abcdef" // read:shop/orders
	// lastTok is written after every other token: once it is in force,
	// so are they (the broker reads the directory whole).
	lastTok = "browser-last-0123456789abcdef"
)

const streamName = "shop/orders"

func required() bool { return os.Getenv("CI") == "true" || os.Getenv(RequireEnv) == "1" }

// missing skips t, or fails it where the browser test must run (CI).
func missing(t *testing.T, what string) {
	t.Helper()
	if required() {
		t.Fatalf("%s (CI=true or %s=1: the browser test must run, not skip)", what, RequireEnv)
	}
	t.Skipf("%s: skipped (CI=true or %s=1 makes this a failure)", what, RequireEnv)
}

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(ChromiumEnv); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			missing(t, fmt.Sprintf("%s=%s: %v", ChromiumEnv, p, err))
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, "no Chromium found (apt-get install chromium, or set "+ChromiumEnv+")")
	return ""
}

// TestBrowser is the whole browser tier: one broker, one Chromium, one page
// origin allowed and one not.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser tier: skipped under -short (runs Chromium and a broker process); go test without -short runs it")
	}
	chromium := chromiumPath(t)
	module, err := os.ReadFile(clientModule)
	if err != nil {
		missing(t, fmt.Sprintf("the npm package @durable-streams/client is not installed (%v): run make conformance-deps", err))
	}

	start := time.Now()
	e := newEnv(t, chromium, module)
	t.Logf("broker %s, page %s, disallowed origin %s; features: prefix tokens %v, CORS allow-list %v, signed URLs %v; set up in %v",
		e.broker, e.originA, e.originB, e.prefixTokens, e.cors, e.signing, time.Since(start).Round(time.Millisecond))
	streamURL := e.broker + "/v1/stream/" + streamName

	t.Run("readwrite-tail", func(t *testing.T) {
		// Created with the admin token, appended to with read,write.
		records := []map[string]any{{"n": 1, "from": "page"}, {"n": 2, "from": "page"}, {"n": 3, "from": "page"}}
		var got struct{ Items []map[string]any }
		e.runOK(t, "produce", "produce", map[string]any{"url": streamURL, "createToken": adminTok, "writeToken": rwTok, "records": records}, &got)
		if len(got.Items) != 3 || !sameRecords(got.Items, records) {
			t.Fatalf("read back %v, want %v", got.Items, records)
		}
		// Two live tails from the start, one long-polling, one on SSE;
		// once both hold the three records, this test appends a fourth.
		for _, live := range []string{"long-poll", "sse"} {
			e.start(t, "tail-"+live, "tail", map[string]any{"url": streamURL, "token": rwTok, "live": live, "want": 4})
		}
		for _, live := range []string{"long-poll", "sse"} {
			e.waitProgress(t, "tail-"+live, 3)
		}
		fourth := map[string]any{"n": 4, "from": "go"}
		e.appendRecord(t, streamName, rwTok, fourth)
		want := append(slices.Clone(records), fourth)
		for _, live := range []string{"long-poll", "sse"} {
			var tail struct{ Items []map[string]any }
			e.wait(t, "tail-"+live, &tail)
			if !sameRecords(tail.Items, want) {
				t.Errorf("%s tail saw %v, want %v", live, tail.Items, want)
			}
		}
		// The tails really were live reads of each kind.
		for _, live := range []string{"long-poll", "sse"} {
			if n := e.net.count(func(r netResponse) bool { return strings.Contains(r.URL, "live="+live) && r.Status == 200 }); n == 0 {
				t.Errorf("no live=%s request answered 200 seen by the browser: %v", live, e.net.urls())
			}
		}
	})

	t.Run("prefix-token", func(t *testing.T) {
		if !e.prefixTokens {
			t.Skip("pending: prefix-scoped tokens (the broker does not accept a token file \"read:shop/,write:shop/:<token>\": its token is refused as unknown)")
		}
		// PUT (the stream exists with this configuration: 200), POST and GET
		// on a stream under the prefix.
		e.clientOK(t, "prefix-create", map[string]any{"op": "create", "url": streamURL, "token": prefixTok})
		rec := map[string]any{"n": 5, "from": "prefix-token"}
		e.clientOK(t, "prefix-append", map[string]any{"op": "append", "url": streamURL, "token": prefixTok, "record": rec})
		for key, tok := range map[string]string{"prefix-read": prefixTok, "exact-read": exactTok} {
			var read struct{ Items []map[string]any }
			e.runOK(t, key, "client", map[string]any{"op": "read", "url": streamURL, "token": tok}, &read)
			if len(read.Items) == 0 || !sameRecords(read.Items[len(read.Items)-1:], []map[string]any{rec}) {
				t.Errorf("%s: %v, want it to end with %v", key, read.Items, rec)
			}
		}
		t.Run("name-without-slash", func(t *testing.T) {
			// A prefix not ending in '/' covers that one name (auth.Covers):
			// not the names under it ("shop/orders/eu"), nor a name it
			// merely begins ("shop/orders-archive", in outside-prefix).
			e.direct(t, http.MethodGet, e.broker+"/v1/stream/shop/orders/eu?offset=-1", exactTok, "", "", http.StatusForbidden)
		})
	})

	t.Run("signed-url", func(t *testing.T) {
		if !e.signing {
			t.Skip("pending: signed read URLs (the broker has no --url-signing-keys-dir flag)")
		}
		signed := e.sign(t, "sign", map[string]any{"stream": streamName, "expiresIn": "10m"}, rwTok)
		if exp := time.Until(signed.ExpiresAt); exp < 9*time.Minute || exp > 11*time.Minute {
			t.Errorf("expiresAt %v is %v from now, want about 10m", signed.ExpiresAt, exp.Round(time.Second))
		}
		// The page tails the signed URL with no Authorization header, long-
		// polling and on SSE; this test appends one record once both hold
		// what the stream has.
		have := len(e.readAll(t, streamName))
		for _, live := range []string{"long-poll", "sse"} {
			e.start(t, "signed-tail-"+live, "tail", map[string]any{"url": signed.URL, "live": live, "want": have + 1})
		}
		for _, live := range []string{"long-poll", "sse"} {
			e.waitProgress(t, "signed-tail-"+live, have)
		}
		rec := map[string]any{"n": 6, "from": "go", "via": "signed-url"}
		e.appendRecord(t, streamName, rwTok, rec)
		for _, live := range []string{"long-poll", "sse"} {
			var tail struct{ Items []map[string]any }
			e.wait(t, "signed-tail-"+live, &tail)
			if len(tail.Items) != have+1 || !sameRecords(tail.Items[have:], []map[string]any{rec}) {
				t.Errorf("%s tail of the signed URL saw %v, want %d items ending with %v", live, tail.Items, have+1, rec)
			}
		}
		// A prefix may be signed too: its query reads any stream under it,
		// and nothing else.
		var p signAnswer
		e.runOK(t, "sign-prefix", "sign", map[string]any{"broker": e.broker, "token": rwTok, "request": map[string]any{"prefix": "shop/", "expiresIn": "10m"}}, &p)
		query := p.Body.Query
		if u, err := url.Parse(p.Body.URL); query == "" && err == nil {
			query = u.RawQuery
		}
		if p.Status != http.StatusOK || !strings.Contains(query, "picomq-sig=") {
			t.Fatalf("signing the prefix shop/: %+v", p)
		}
		var in, out probeAnswer
		e.runOK(t, "prefix-signed-read", "probe", map[string]any{"url": streamURL + "?offset=-1&" + query}, &in)
		if !in.Fetched || in.Status != http.StatusOK {
			t.Errorf("reading %s with the prefix's signed query: %+v", streamName, in)
		}
		e.runOK(t, "prefix-signed-outside", "probe", map[string]any{"url": e.broker + "/v1/stream/billing/x?offset=-1&" + query}, &out)
		if !out.Fetched || (out.Status != http.StatusUnauthorized && out.Status != http.StatusForbidden) {
			t.Errorf("reading billing/x with shop/'s signed query: %+v, want 401 or 403", out)
		}
	})

	t.Run("http2", func(t *testing.T) {
		// Every answer from the broker the browser received came over
		// HTTP/2 (ALPN h2), as the DevTools network log says. (A request
		// the client ended after its answer shows as canceled, with the
		// answer's status and protocol.)
		answered := e.net.filter(func(r netResponse) bool { return strings.HasPrefix(r.URL, e.broker) && r.Status > 0 })
		if len(answered) == 0 {
			t.Fatal("the browser received no answer from the broker")
		}
		for _, r := range answered {
			if r.Protocol != "h2" {
				t.Errorf("%s %s answered over %q, want h2", r.Method, r.URL, r.Protocol)
			}
		}
		// What the page itself can see: Resource Timing's nextHopProtocol
		// (the broker answers an allowed origin with Timing-Allow-Origin;
		// without it the field is empty for a cross-origin resource).
		entries, err := chromedp.Run(e.ctx, chromedp.Evaluate[[]struct{ Name, NextHopProtocol string }](fmt.Sprintf("window.protocols(%q)", e.broker)))
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, en := range entries {
			if en.NextHopProtocol != "" {
				seen++
				if en.NextHopProtocol != "h2" {
					t.Errorf("the page's resource timing says %s went over %q, want h2", en.Name, en.NextHopProtocol)
				}
			}
		}
		if seen == 0 {
			t.Errorf("no resource timing entry of the broker's (%d) shows its protocol: Timing-Allow-Origin missing?", len(entries))
		}
		t.Logf("%d broker answers over h2 (DevTools); resource timing: %d entries, %d with nextHopProtocol", len(answered), len(entries), seen)
	})

	t.Run("refusals", func(t *testing.T) {
		t.Run("scope", func(t *testing.T) {
			// A read token appending, no token at all: the broker's
			// answer, and what the page sees of it.
			e.direct(t, http.MethodPost, streamURL, readTok, "", `{"n":0}`, http.StatusForbidden)
			e.direct(t, http.MethodGet, streamURL+"?offset=-1", "", "", "", http.StatusUnauthorized)
			if !e.cors {
				// Before it, the token check's refusals carry no CORS
				// headers: a page sees a network error, not 401 or 403.
				t.Skip("pending: the CORS allow-list (the broker has no --cors-allowed-origins flag), which lets a page see a refusal's status; the broker's own statuses were checked")
			}
			e.clientRefused(t, "scope-read-appends", map[string]any{"op": "append", "url": streamURL, "token": readTok, "record": map[string]any{"n": 0}}, http.StatusForbidden)
			e.clientRefused(t, "scope-no-token", map[string]any{"op": "read", "url": streamURL}, http.StatusUnauthorized)
		})
		t.Run("outside-prefix", func(t *testing.T) {
			if !e.prefixTokens {
				t.Skip("pending: prefix-scoped tokens")
			}
			other := e.broker + "/v1/stream/billing/x"
			e.direct(t, http.MethodPut, other, prefixTok, "application/json", "", http.StatusForbidden)
			e.direct(t, http.MethodPost, other, prefixTok, "", `{"n":0}`, http.StatusForbidden)
			e.direct(t, http.MethodGet, other+"?offset=-1", prefixTok, "", "", http.StatusForbidden)
			// A prefix without '/' covers the name and the names under it,
			// not a name it merely begins.
			e.direct(t, http.MethodGet, e.broker+"/v1/stream/shop/orders-archive?offset=-1", exactTok, "", "", http.StatusForbidden)
			if !e.cors {
				t.Skip("pending: the CORS allow-list, which lets a page see a refusal's status; the broker's own statuses were checked")
			}
			for _, op := range []string{"create", "append", "head", "read"} {
				e.clientRefused(t, "outside-prefix-"+op, map[string]any{"op": op, "url": other, "token": prefixTok, "record": map[string]any{"n": 0}}, http.StatusForbidden)
			}
		})
		t.Run("expired-signed-url", func(t *testing.T) {
			if !e.signing {
				t.Skip("pending: signed read URLs (the broker has no --url-signing-keys-dir flag)")
			}
			signed := e.sign(t, "sign-short", map[string]any{"stream": streamName, "expiresIn": "1s"}, rwTok)
			time.Sleep(time.Until(signed.ExpiresAt) + 1100*time.Millisecond)
			var p probeAnswer
			e.runOK(t, "expired-probe", "probe", map[string]any{"url": signed.URL + "&offset=-1"}, &p)
			if !p.Fetched || p.Status != http.StatusUnauthorized {
				t.Fatalf("an expired signed URL, fetched by the page: %+v, want 401", p)
			}
			if !strings.HasPrefix(p.ContentType, "application/problem+json") || p.problem().Name == "" || p.problem().Code == "" {
				t.Errorf("the expired URL's 401 is not a coded problem: %s %v", p.ContentType, p.Body)
			}
			t.Logf("expired signed URL: %d %s", p.Status, p.problem().Name)
		})
		t.Run("no-allow-list", func(t *testing.T) {
			if !e.cors {
				t.Skip("pending: the CORS allow-list (the broker has no --cors-allowed-origins flag)")
			}
			// Tokens on and no list: no origin is allowed, this page's
			// neither (checked from Go: a second browser trust is not
			// worth it for two statuses).
			c := clusterharness.Start(t, clusterharness.Options{Brokers: 1, Security: &clusterharness.Security{TLS: true, Tokens: true}})
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: c.TLSConfig(), ForceAttemptHTTP2: true}}
			defer hc.CloseIdleConnections()
			u := c.URL(0) + "/v1/stream/" + streamName
			for _, method := range []string{http.MethodOptions, http.MethodGet} {
				req, _ := http.NewRequest(method, u+"?offset=-1", nil)
				req.Header.Set("Origin", e.originA)
				if method == http.MethodOptions {
					req.Header.Set("Access-Control-Request-Method", http.MethodGet)
					req.Header.Set("Access-Control-Request-Headers", "authorization")
				} else {
					req.Header.Set("Authorization", "Bearer "+c.HarnessToken())
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s from %s to a broker with tokens and no allow-list: %d, want 403", method, e.originA, resp.StatusCode)
				}
			}
		})
		t.Run("disallowed-origin", func(t *testing.T) {
			if !e.cors {
				t.Skip("pending: the CORS allow-list (the broker has no --cors-allowed-origins flag)")
			}
			// The broker refuses the origin outright, preflight included.
			e.directOrigin(t, http.MethodOptions, streamURL, e.originB, http.StatusForbidden)
			e.directOrigin(t, http.MethodGet, streamURL+"?offset=-1", e.originB, http.StatusForbidden)
			e.directOrigin(t, http.MethodOptions, streamURL, e.originA, http.StatusNoContent)
			// The page on the other origin sees a CORS failure: no status,
			// a TypeError, and the browser's network log says CORS.
			e.navigate(t, e.originB)
			var p probeAnswer
			e.runOK(t, "other-origin-get", "probe", map[string]any{"url": streamURL + "?offset=-1", "token": rwTok}, &p)
			if p.Fetched || p.Error == nil || !p.Error.TypeError {
				t.Fatalf("a page of a disallowed origin read the stream: %+v", p)
			}
			if n := e.net.count(func(r netResponse) bool { return r.Failed && r.CORS != "" && strings.HasPrefix(r.URL, streamURL) }); n == 0 {
				t.Errorf("the browser reported no CORS failure for %s: %v", streamURL, e.net.all())
			}
		})
	})
}

// env is the test's world: the broker, the page servers, the browser.
type env struct {
	t                *testing.T
	cluster          *clusterharness.Cluster
	broker           string // https://127.0.0.1:port
	originA, originB string // the page's origins: allowed, and not
	http             *http.Client

	prefixTokens, cors, signing bool

	ctx      context.Context // the browser tab
	net      *netLog
	console  *lines
	outcomes sync.Map // key -> outcome: every scenario's end, for the artefacts (a navigation loses the page's)
}

func newEnv(t *testing.T, chromium string, module []byte) *env {
	e := &env{t: t, net: &netLog{byID: map[network.RequestID]*netResponse{}}, console: &lines{}}
	page, err := fs.Sub(pageFiles, "page")
	if err != nil {
		t.Fatal(err)
	}
	e.originA = servePage(t, page, module)
	e.originB = servePage(t, page, module)

	// The broker's features, from its --help.
	bin, err := clusterharness.Binary()
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	e.cors = hasFlag(string(help), "cors-allowed-origins")
	e.signing = hasFlag(string(help), "url-signing-keys-dir")
	var flags []string
	if e.cors {
		flags = append(flags, "--cors-allowed-origins", e.originA)
	}
	if e.signing {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "browser-key-1"), []byte(hex.EncodeToString(randomBytes(32))), 0o600); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, "--url-signing-keys-dir", dir)
	}
	e.cluster = clusterharness.Start(t, clusterharness.Options{Brokers: 1, ExtraFlags: flags,
		Security: &clusterharness.Security{TLS: true, Tokens: true}})
	e.broker = e.cluster.URL(0)
	e.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: e.cluster.TLSConfig(), ForceAttemptHTTP2: true}}
	t.Cleanup(e.http.CloseIdleConnections)
	e.cluster.SetToken("browser-admin", "admin", adminTok)
	e.cluster.SetToken("browser-readwrite", "read,write", rwTok)
	e.cluster.SetToken("browser-read", "read", readTok)
	e.cluster.SetToken("browser-shop-prefix", "read:shop/,write:shop/", prefixTok)
	e.cluster.SetToken("browser-shop-orders", "read:shop/orders", exactTok)
	e.cluster.SetToken("browser-last", "read", lastTok)
	e.waitToken(lastTok)
	// A prefix-scoped token reads a missing stream under its prefix (404);
	// a broker that does not know prefixes has read the file as something
	// else, and refuses the token as unknown (401).
	status := e.status(http.MethodHead, e.broker+"/v1/stream/shop/probe", prefixTok)
	e.prefixTokens = status != http.StatusUnauthorized

	spki := e.serverSPKI()
	e.startBrowser(chromium, spki)
	e.navigate(t, e.originA)
	return e
}

// servePage serves the page, its script and the client module on a new
// loopback port: an origin of its own.
func servePage(t *testing.T, page fs.FS, module []byte) string {
	mux := http.NewServeMux()
	file := func(name, ctype string, body []byte) {
		mux.HandleFunc(name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.Header().Set("Cache-Control", "no-store")
			_, _ = w.Write(body)
		})
	}
	read := func(name string) []byte {
		b, err := fs.ReadFile(page, name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	file("/{$}", "text/html; charset=utf-8", read("index.html"))
	file("/app.js", "text/javascript; charset=utf-8", read("app.js"))
	file("/vendor/durable-streams-client.js", "text/javascript; charset=utf-8", module)
	mux.HandleFunc("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// serverSPKI is the base64 SHA-256 of the broker certificate's public key,
// as Chromium's --ignore-certificate-errors-spki-list takes it.
func (e *env) serverSPKI() string {
	conn, err := tls.Dial("tcp", strings.TrimPrefix(e.broker, "https://"), e.cluster.TLSConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "" {
		e.t.Logf("the broker's ALPN offer taken by Go: %s", p)
	}
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// startBrowser launches headless Chromium (one for the whole test) and
// arranges for a failure's artefacts.
//
// Trust: --ignore-certificate-errors-spki-list names the broker's own key,
// so Chromium accepts that one certificate (and no other bad one) without
// a CA import: an NSS database would need certutil (libnss3-tools) and a
// HOME of the test's own, and would trust whatever the test CA signs. The
// flag is honoured only with --user-data-dir, which is set.
func (e *env) startBrowser(chromium, spki string) {
	t := e.t
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.WindowSize(1280, 1024),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root with its sandbox
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx,
		chromedp.WithErrorf(func(f string, a ...any) { e.console.add("chromedp: " + fmt.Sprintf(f, a...)) }),
		chromedp.WithLogf(func(f string, a ...any) { e.console.add("chromedp: " + fmt.Sprintf(f, a...)) }))
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	e.ctx = ctx
	if err := chromedp.Listen(ctx, e.listen); err != nil {
		t.Fatal(err)
	}
	// Registered last, so it runs first: the tab is still open.
	t.Cleanup(e.artefacts)
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[string]("navigator.userAgent")); err == nil {
		t.Logf("browser: %s", v)
	}
}

// listen records the browser's network answers and failures and the
// page's console: it runs on chromedp's reading goroutine, so it only
// stores.
func (e *env) listen(ev any) {
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		e.net.request(ev.RequestID, ev.Request.Method, ev.Request.URL)
	case *network.EventResponseReceived:
		e.net.response(ev.RequestID, ev.Response.URL, ev.Response.Protocol, int(ev.Response.Status))
	case *network.EventLoadingFailed:
		cors := ""
		if ev.CorsErrorStatus != nil {
			cors = string(ev.CorsErrorStatus.CorsError)
		}
		e.net.failed(ev.RequestID, ev.ErrorText, cors, ev.Canceled)
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		e.console.add(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		e.console.add("exception: " + msg)
	}
}

func (e *env) navigate(t *testing.T, origin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/")); err != nil {
		t.Fatalf("loading the page %s: %v", origin, err)
	}
	for {
		ready, _ := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.ready === true"))
		if ready {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the page %s did not load its module (console: %v)", origin, e.console.get())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// start starts a scenario of the page under key.
func (e *env) start(t *testing.T, key, scenario string, cfg any) {
	t.Helper()
	c, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(e.ctx, chromedp.Evaluate[bool](fmt.Sprintf("window.start(%q, %q, %s)", key, scenario, c))); err != nil {
		t.Fatalf("starting %s: %v", key, err)
	}
}

// outcome is window.results[key].
type outcome struct {
	State string          `json:"state"`
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error *jsError        `json:"error"`
}

type jsError struct {
	Name      string `json:"name"`
	Message   string `json:"message"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Body      any    `json:"body"`
	TypeError bool   `json:"typeError"`
}

// wait waits for key's scenario to end, fails t if it threw, and decodes
// its value into v.
func (e *env) wait(t *testing.T, key string, v any) {
	t.Helper()
	o := e.poll(t, key, 30*time.Second)
	if !o.OK {
		t.Fatalf("%s failed in the page: %+v", key, o.Error)
	}
	if v != nil {
		if err := json.Unmarshal(o.Value, v); err != nil {
			t.Fatalf("%s: %v in %s", key, err, o.Value)
		}
	}
}

func (e *env) poll(t *testing.T, key string, timeout time.Duration) outcome {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		raw, err := chromedp.Run(e.ctx, chromedp.Evaluate[[]byte](fmt.Sprintf("window.results[%q]", key)))
		if err != nil {
			t.Fatalf("reading %s: %v", key, err)
		}
		var o outcome
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatalf("reading %s: %v in %s", key, err, raw)
		}
		if o.State == "done" {
			e.outcomes.Store(key, o)
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %q after %v (progress %s)", key, o.State, timeout, e.progress(key))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) progress(key string) string {
	raw, _ := chromedp.Run(e.ctx, chromedp.Evaluate[[]byte](fmt.Sprintf("window.progress[%q] ?? null", key)))
	return string(raw)
}

// waitProgress waits until key's live tail holds n items and is up to
// date (its live requests begin).
func (e *env) waitProgress(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var p struct {
			Items    int  `json:"items"`
			UpToDate bool `json:"upToDate"`
		}
		_ = json.Unmarshal([]byte(e.progress(key)), &p)
		if p.Items >= n && p.UpToDate {
			return
		}
		raw, _ := chromedp.Run(e.ctx, chromedp.Evaluate[[]byte](fmt.Sprintf("window.results[%q]", key)))
		var o outcome
		if json.Unmarshal(raw, &o) == nil && o.State == "done" && !o.OK {
			t.Fatalf("%s failed before holding %d items: %+v", key, n, o.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %+v, not %d items up to date, after 20s", key, p, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) runOK(t *testing.T, key, scenario string, cfg, v any) {
	t.Helper()
	e.start(t, key, scenario, cfg)
	e.wait(t, key, v)
}

// clientOK runs one client call that must succeed.
func (e *env) clientOK(t *testing.T, key string, cfg map[string]any) {
	t.Helper()
	var r struct {
		OK    bool     `json:"ok"`
		Error *jsError `json:"error"`
	}
	e.runOK(t, key, "client", cfg, &r)
	if !r.OK {
		t.Errorf("%s %s: refused in the page: %+v", cfg["op"], cfg["url"], r.Error)
	}
}

// clientRefused runs one client call that the broker must refuse with
// status, visibly to the page (not hidden as a CORS failure).
func (e *env) clientRefused(t *testing.T, key string, cfg map[string]any, status int) {
	t.Helper()
	var r struct {
		OK    bool     `json:"ok"`
		Error *jsError `json:"error"`
	}
	e.runOK(t, key, "client", cfg, &r)
	switch {
	case r.OK:
		t.Errorf("%s %s: served, want %d", cfg["op"], cfg["url"], status)
	case r.Error.TypeError:
		t.Errorf("%s %s: the page saw a network/CORS failure (%s), not the broker's %d: the refusal carries no CORS headers", cfg["op"], cfg["url"], r.Error.Message, status)
	case r.Error.Status != status:
		t.Errorf("%s %s: the page saw %d (%s), want %d", cfg["op"], cfg["url"], r.Error.Status, r.Error.Message, status)
	}
}

type signAnswer struct {
	Status int `json:"status"`
	Body   struct {
		URL       string    `json:"url"`
		Query     string    `json:"query"` // the broker's own addition: the signing query alone (a prefix has no one URL)
		ExpiresAt time.Time `json:"expiresAt"`
	} `json:"body"`
}

type signedURL struct {
	URL       string
	ExpiresAt time.Time
}

// sign has the page mint a signed URL for request and checks its shape.
func (e *env) sign(t *testing.T, key string, request map[string]any, token string) signedURL {
	t.Helper()
	var a signAnswer
	e.runOK(t, key, "sign", map[string]any{"broker": e.broker, "token": token, "request": request}, &a)
	if a.Status != http.StatusOK {
		t.Fatalf("POST /v1/sign %v: %d %+v", request, a.Status, a.Body)
	}
	u, err := url.Parse(a.Body.URL)
	if err != nil || !strings.HasPrefix(a.Body.URL, e.broker+"/v1/stream/") {
		t.Fatalf("signed URL %q: not an absolute URL of the broker's stream (%v)", a.Body.URL, err)
	}
	for _, p := range []string{"picomq-exp", "picomq-key", "picomq-scope", "picomq-sig"} {
		if u.Query().Get(p) == "" {
			t.Errorf("signed URL %q has no %s", a.Body.URL, p)
		}
	}
	if a.Body.ExpiresAt.IsZero() {
		t.Fatalf("signed URL without expiresAt: %+v", a.Body)
	}
	return signedURL{URL: a.Body.URL, ExpiresAt: a.Body.ExpiresAt}
}

type probeAnswer struct {
	Fetched     bool     `json:"fetched"`
	Status      int      `json:"status"`
	ContentType string   `json:"contentType"`
	Body        any      `json:"body"`
	Error       *jsError `json:"error"`
}

type problemBody struct {
	Code string `json:"code"` // dotted: "0.16.9.4"
	Name string `json:"name"`
}

func (p probeAnswer) problem() problemBody {
	var pb problemBody
	if b, err := json.Marshal(p.Body); err == nil {
		_ = json.Unmarshal(b, &pb)
	}
	return pb
}

// direct sends one request from Go and checks the broker's status.
func (e *env) direct(t *testing.T, method, u, token, ctype, body string, want ...int) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype == "" && body != "" {
		ctype = "application/json"
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	e.expect(t, req, want...)
}

// directOrigin sends a request (or a CORS preflight) from origin with the
// read,write token and checks the broker's status.
func (e *env) directOrigin(t *testing.T, method, u, origin string, want int) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	if method == http.MethodOptions {
		req.Header.Set("Access-Control-Request-Method", http.MethodGet)
		req.Header.Set("Access-Control-Request-Headers", "authorization")
	} else {
		req.Header.Set("Authorization", "Bearer "+rwTok)
	}
	e.expect(t, req, want)
}

func (e *env) expect(t *testing.T, req *http.Request, want ...int) {
	t.Helper()
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		t.Errorf("%s %s (Origin %q): %d %s, want %v", req.Method, req.URL, req.Header.Get("Origin"), resp.StatusCode, bytes.TrimSpace(body), want)
	}
}

func (e *env) status(method, u, token string) int {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, u, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitToken waits until the broker knows token (the tokens directory is
// re-read every second or so).
func (e *env) waitToken(token string) {
	deadline := time.Now().Add(20 * time.Second)
	for e.status(http.MethodGet, e.broker+"/v1/stream/shop/none?offset=-1", token) == http.StatusUnauthorized {
		if time.Now().After(deadline) {
			e.t.Fatal("the broker did not take up the test's tokens within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// appendRecord appends one JSON record from Go (HTTP/2, the read,write
// token).
func (e *env) appendRecord(t *testing.T, name, token string, rec any) {
	t.Helper()
	b, _ := json.Marshal(rec)
	e.direct(t, http.MethodPost, e.broker+"/v1/stream/"+name, token, "application/json", string(b), http.StatusNoContent, http.StatusOK)
}

// readAll reads a JSON stream from its start (catch-up, the admin token).
func (e *env) readAll(t *testing.T, name string) []any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.broker+"/v1/stream/"+name+"?offset=-1", nil)
	req.Header.Set("Authorization", "Bearer "+adminTok)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var items []any
	if err := json.NewDecoder(resp.Body).Decode(&items); err != nil || resp.StatusCode != 200 {
		t.Fatalf("reading %s: %d %v", name, resp.StatusCode, err)
	}
	return items
}

// artefacts keeps, when the test failed, a screenshot of the page, its
// results and console, the browser's network log and the broker's log.
func (e *env) artefacts() {
	t := e.t
	if !t.Failed() {
		return
	}
	dir := os.Getenv(ArtefactsEnv)
	var err error
	if dir != "" {
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", "picomq-browser-")
	}
	if err != nil {
		t.Logf("no artefacts: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, 15*time.Second)
	defer cancel()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Logf("artefact %s: %v", name, err)
		}
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		write("screenshot.png", png)
	} else {
		t.Logf("no screenshot: %v", err)
	}
	if raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte]("({origin: location.origin, results: window.results, progress: window.progress})")); err == nil {
		var buf bytes.Buffer
		_ = json.Indent(&buf, raw, "", "  ")
		write("results.json", buf.Bytes())
	}
	all := map[string]outcome{}
	e.outcomes.Range(func(k, v any) bool { all[k.(string)] = v.(outcome); return true })
	if b, err := json.MarshalIndent(all, "", "  "); err == nil {
		write("outcomes.json", b)
	}
	write("console.txt", []byte(strings.Join(e.console.get(), "\n")+"\n"))
	nl, _ := json.MarshalIndent(e.net.all(), "", "  ")
	write("network.json", nl)
	if raw, err := os.ReadFile(e.cluster.Broker(0).LogPath); err == nil {
		write("broker.log", raw)
	}
	t.Logf("browser test artefacts (screenshot.png, results.json: the page shown, outcomes.json: every scenario, console.txt, network.json, broker.log) kept in %s", dir)
}

// netLog is what the browser's network domain reported.
type netLog struct {
	mu    sync.Mutex
	order []network.RequestID
	byID  map[network.RequestID]*netResponse
}

type netResponse struct {
	Method, URL string
	Protocol    string `json:",omitempty"`
	Status      int    `json:",omitempty"`
	Failed      bool   `json:",omitempty"`
	Error       string `json:",omitempty"`
	CORS        string `json:",omitempty"`
	Canceled    bool   `json:",omitempty"`
}

func (n *netLog) entry(id network.RequestID) *netResponse {
	r := n.byID[id]
	if r == nil {
		r = &netResponse{}
		n.byID[id] = r
		n.order = append(n.order, id)
	}
	return r
}

func (n *netLog) request(id network.RequestID, method, u string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.entry(id)
	r.Method, r.URL = method, u
}

func (n *netLog) response(id network.RequestID, u, proto string, status int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.entry(id)
	r.URL, r.Protocol, r.Status = u, proto, status
}

func (n *netLog) failed(id network.RequestID, text, cors string, canceled bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.entry(id)
	r.Failed, r.Error, r.CORS, r.Canceled = true, text, cors, canceled
}

func (n *netLog) all() []netResponse {
	return n.filter(func(netResponse) bool { return true })
}

func (n *netLog) filter(keep func(netResponse) bool) []netResponse {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []netResponse
	for _, id := range n.order {
		if r := *n.byID[id]; keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func (n *netLog) count(keep func(netResponse) bool) int { return len(n.filter(keep)) }

func (n *netLog) urls() []string {
	var out []string
	for _, r := range n.all() {
		out = append(out, fmt.Sprintf("%s %s %d %s", r.Method, r.URL, r.Status, r.Protocol))
	}
	return out
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.l = append(l.l, s); l.mu.Unlock() }
func (l *lines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.l)
}

// sameRecords compares JSON records as JSON.
func sameRecords(got []map[string]any, want []map[string]any) bool {
	g, err1 := json.Marshal(got)
	w, err2 := json.Marshal(want)
	return errors.Join(err1, err2) == nil && bytes.Equal(g, w)
}

// hasFlag finds "--name" as a whole flag in a usage text.
func hasFlag(help, name string) bool {
	for _, f := range strings.Fields(help) {
		if strings.TrimRight(f, ",=") == "--"+name {
			return true
		}
	}
	return false
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
