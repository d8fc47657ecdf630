package auth

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/dsapi"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/membership"
)

// TestClassify covers every route of the partitioned-log API, the admin
// API and the Durable Streams protocol (wire/doc.go and dsapi), and what
// is not a route.
func TestClassify(t *testing.T) {
	if dsPrefix != dsapi.Prefix {
		t.Fatalf("dsPrefix %q, dsapi.Prefix %q", dsPrefix, dsapi.Prefix)
	}
	cases := []struct {
		method, path string
		want         Need
	}{
		{"GET", "/healthz", Open},
		{"GET", "/readyz", Open},
		// partitioned-log API
		{"POST", "/v1/log/logs/api", NeedWrite},
		{"GET", "/v1/log/logs/api", NeedRead},
		{"HEAD", "/v1/log/logs/api", NeedRead},
		{"GET", "/v1/log/a:bounds", NeedRead},
		{"GET", "/v1/log/a:seek", NeedRead},
		{"GET", "/v1/log/a:committed", NeedRead},
		{"POST", "/v1/log/a:commit", NeedWrite},
		{"POST", "/v1/log/a:trim", NeedAdmin},
		{"POST", "/v1/log/a:compact", NeedAdmin},
		{"PUT", "/v1/log/a", NeedAdmin},
		{"DELETE", "/v1/log/a", NeedAdmin},
		{"POST", "/v1/log/a:bounds", NeedAdmin},
		{"GET", "/v1/log/a:commit", NeedAdmin},
		{"GET", "/v1/log/a:unknown", NeedAdmin},
		{"POST", "/v1/log/a:commit:trim", NeedAdmin},
		{"POST", wire.AppendsPath, NeedWrite},
		{"GET", wire.AppendsPath, NeedAdmin},
		// admin API
		{"GET", wire.StreamsPath, NeedRead},
		{"POST", wire.StreamsPath, NeedAdmin},
		{"GET", "/v1/admin/streams/a/b", NeedRead},
		{"PUT", "/v1/admin/streams/a/b", NeedAdmin},
		{"PATCH", "/v1/admin/streams/a/b", NeedAdmin},
		{"DELETE", "/v1/admin/streams/a/b", NeedAdmin},
		{"GET", wire.NodePath, NeedRead},
		{"GET", wire.DrainPath, NeedRead},
		{"POST", wire.DrainPath, NeedAdmin},
		{"DELETE", wire.DrainPath, NeedAdmin},
		{"GET", wire.ClockPath, NeedRead},
		{"PUT", wire.ClockPath, NeedAdmin},
		{"POST", membership.RecoverPath, NeedAdmin},
		{"GET", "/debug/pprof/", NeedAdmin},
		{"GET", "/nothing", NeedAdmin},
		// Durable Streams
		{"GET", "/v1/stream/s", NeedRead},
		{"HEAD", "/v1/stream/s", NeedRead},
		{"POST", "/v1/stream/s", NeedWrite},
		{"PUT", "/v1/stream/s", NeedWrite},
		{"DELETE", "/v1/stream/s", NeedAdmin},
		{"OPTIONS", "/v1/stream/s", Open},
		{"PATCH", "/v1/stream/s", NeedAdmin},
	}
	for _, c := range cases {
		if got := Classify(c.method, c.path, true); got != c.want {
			t.Errorf("%s %s: need %v, want %v", c.method, c.path, got, c.want)
		}
	}
	if got := Classify("GET", "/metrics", true); got != Open {
		t.Errorf("/metrics open: %v", got)
	}
	if got := Classify("GET", "/metrics", false); got != AnyToken {
		t.Errorf("/metrics token: %v", got)
	}
}

func TestAllows(t *testing.T) {
	for _, c := range []struct {
		s    Scope
		need Need
		want bool
	}{
		{Read, NeedRead, true}, {Read, NeedWrite, false}, {Read, NeedAdmin, false},
		{Write, NeedRead, false}, {Write, NeedWrite, true}, {Write, NeedAdmin, false},
		{Admin, NeedRead, true}, {Admin, NeedWrite, true}, {Admin, NeedAdmin, true},
		{Read | Write, NeedWrite, true}, {Read | Write, NeedAdmin, false},
		{Read, AnyToken, true}, {0, NeedRead, false},
	} {
		if got := c.s.Allows(c.need); got != c.want {
			t.Errorf("%v allows %v: %v, want %v", c.s, c.need, got, c.want)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	// Through a rename, as a Secret volume updates: a reader sees the old
	// file or the new one.
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

const (
	readTok  = "r-0123456789abcdef"
	writeTok = "w-0123456789abcdef"
	adminTok = "a-0123456789abcdef"
)

func TestLoadSkipsBadFilesWithoutLoggingTokens(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "reader", "read:"+readTok+"\n")
	writeFile(t, dir, "writer", "write:"+writeTok)
	writeFile(t, dir, "both", "read,write:"+adminTok+"x")
	writeFile(t, dir, "short", "read:short-secret-1")
	writeFile(t, dir, "noscope", "s3cr3t-token-value-1234")
	writeFile(t, dir, "badscope", "superuser:s3cr3t-token-value-5678")
	writeFile(t, dir, "swapped", "s3cr3t-token-value-9abc:read")
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	tk, err := Load(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Len() != 3 {
		t.Fatalf("%d tokens, want 3; logs:\n%s", tk.Len(), logs.String())
	}
	for _, bad := range []string{"short", "noscope", "badscope", "swapped"} {
		if !strings.Contains(logs.String(), "file="+bad) {
			t.Errorf("no log line names %s:\n%s", bad, logs.String())
		}
	}
	for _, secret := range []string{readTok, writeTok, "short-secret", "s3cr3t"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("logs hold a token (%s):\n%s", secret, logs.String())
		}
	}
	name, s, ok := tk.Lookup(readTok)
	if !ok || name != "reader" || s.String() != "read" {
		t.Errorf("Lookup(read) = %q %v %v", name, s, ok)
	}
	if name, s, ok := tk.Lookup(adminTok + "x"); !ok || name != "both" || s.Scopes() != Read|Write {
		t.Errorf("Lookup(both) = %q %v %v", name, s, ok)
	}
	for _, wrong := range []string{"", readTok[:len(readTok)-1], readTok + "0", "short-secret-1"} {
		if _, _, ok := tk.Lookup(wrong); ok {
			t.Errorf("Lookup(%q) matched", wrong)
		}
	}
}

func TestLoadRefusesMissingDirectory(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "absent"), nil); err == nil {
		t.Fatal("a missing directory loaded")
	}
}

func TestReloadSeesAddedChangedAndRemovedTokens(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "reader", "read:"+readTok)
	tk, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := tk.Reload(); err != nil || changed {
		t.Fatalf("Reload of an unchanged directory: %v %v", changed, err)
	}
	writeFile(t, dir, "writer", "write:"+writeTok)
	if changed, err := tk.Reload(); err != nil || !changed {
		t.Fatalf("Reload after an add: %v %v", changed, err)
	}
	if _, _, ok := tk.Lookup(writeTok); !ok {
		t.Fatal("added token not found")
	}
	if err := os.Remove(filepath.Join(dir, "reader")); err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := tk.Lookup(readTok); ok {
		t.Fatal("removed token still works")
	}
	// A changed scope of the same size: the modification time tells.
	old := time.Now().Add(-time.Hour)
	writeFile(t, dir, "writer", "admin:"+writeTok)
	_ = os.Chtimes(filepath.Join(dir, "writer"), old, old)
	if _, err := tk.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, s, _ := tk.Lookup(writeTok); s.Scopes() != Admin {
		t.Fatalf("scope after the change: %v", s)
	}
}

func TestRunReloads(t *testing.T) {
	dir := t.TempDir()
	tk, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go tk.Run(ctx, 10*time.Millisecond)
	writeFile(t, dir, "reader", "read:"+readTok)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, _, ok := tk.Lookup(readTok); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("token added not seen within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMiddleware(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "reader", "read:"+readTok)
	writeFile(t, dir, "writer", "write:"+writeTok)
	writeFile(t, dir, "admin", "admin:"+adminTok)
	tk, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := Middleware{Tokens: tk}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.WriteHeader(http.StatusTeapot)
	}))
	cases := []struct {
		method, path, authz string
		want                int
	}{
		{"GET", "/healthz", "", http.StatusTeapot},
		{"GET", "/readyz", "Bearer nonsense", http.StatusTeapot},
		{"GET", "/metrics", "", http.StatusUnauthorized},
		{"GET", "/metrics", "Bearer " + readTok, http.StatusTeapot},
		{"GET", "/v1/log/a", "", http.StatusUnauthorized},
		{"GET", "/v1/log/a", "Basic " + readTok, http.StatusUnauthorized},
		{"GET", "/v1/log/a", "Bearer " + readTok + "x", http.StatusUnauthorized},
		{"GET", "/v1/log/a", "Bearer " + readTok, http.StatusTeapot},
		{"GET", "/v1/log/a", "bearer " + readTok, http.StatusTeapot},
		{"GET", "/v1/log/a", "Bearer " + writeTok, http.StatusForbidden},
		{"POST", "/v1/log/a", "Bearer " + readTok, http.StatusForbidden},
		{"POST", "/v1/log/a", "Bearer " + writeTok, http.StatusTeapot},
		{"PUT", "/v1/admin/streams/a", "Bearer " + writeTok, http.StatusForbidden},
		{"PUT", "/v1/admin/streams/a", "Bearer " + adminTok, http.StatusTeapot},
		{"POST", "/v1/stream/s", "Bearer " + adminTok, http.StatusTeapot},
		{"OPTIONS", "/v1/stream/s", "", http.StatusTeapot},
	}
	for _, c := range cases {
		served = 0
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.authz != "" {
			req.Header.Set("Authorization", c.authz)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %s %q: %d, want %d", c.method, c.path, c.authz, rec.Code, c.want)
			continue
		}
		if (c.want == http.StatusTeapot) != (served == 1) {
			t.Errorf("%s %s: handler ran %d times", c.method, c.path, served)
		}
		body, _ := io.ReadAll(rec.Body)
		if strings.Contains(string(body), "0123456789abcdef") {
			t.Errorf("%s %s: answer holds a token: %s", c.method, c.path, body)
		}
		switch c.want {
		case http.StatusUnauthorized:
			if rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", c.method, c.path)
			}
			assertCoded(t, body, Unauthenticated)
		case http.StatusForbidden:
			assertCoded(t, body, Forbidden)
		}
	}
}

func assertCoded(t *testing.T, body []byte, want *errs.Error) {
	t.Helper()
	got, err := errs.Unmarshal(body)
	if err != nil {
		t.Fatalf("not a problem: %v: %s", err, body)
	}
	if !errors.Is(got, want) {
		t.Fatalf("problem %v, want %v", got, want)
	}
}

// BenchmarkLookup is the token check's cost per request with 16 tokens.
func BenchmarkLookup(b *testing.B) {
	dir := b.TempDir()
	for i := range 16 {
		if err := os.WriteFile(filepath.Join(dir, "t"+string(rune('a'+i))), []byte("read:"+strings.Repeat(string(rune('a'+i)), 64)), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	tk, err := Load(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	tok := strings.Repeat("p", 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := tk.Lookup(tok); !ok {
			b.Fatal("not found")
		}
	}
}
