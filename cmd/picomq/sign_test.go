package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/dsapi"
	"github.com/picomq/picomq/broker/httpapi"
)

// TestSign: `picomq sign` prints a URL that reads the stream with no
// token; a prefix prints the signing query; a read token may not sign.
func TestSign(t *testing.T) {
	t.Parallel()
	dir, keys := t.TempDir(), t.TempDir()
	const readTok, shopTok = "cli-read-0123456789", "cli-shop-0123456789"
	for name, content := range map[string]string{"reader": "read:" + readTok, "shop": "read:shop/,write:shop/:" + shopTok} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(keys, "k1"), []byte(strings.Repeat("s", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	signing, err := auth.LoadSigningKeys(keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.Open(core.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(b, nil, httpapi.Options{})
	api.Handle(dsapi.Prefix, dsapi.New(b, dsapi.Options{}))
	api.Handle(auth.SignPath, auth.SignHandler{Keys: signing, DSPrefix: dsapi.Prefix})
	srv := httptest.NewServer(auth.Middleware{Tokens: tokens, Keys: signing}.Wrap(api))
	t.Cleanup(func() {
		srv.Close()
		_ = b.Close()
	})
	cli := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"--server", srv.URL}, args...), func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/stream/shop/orders", strings.NewReader("hello"))
	req.Header.Set("Authorization", "Bearer "+shopTok)
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 201 {
		t.Fatalf("create with the shop token: %v %v", resp, err)
	}
	code, out := cli("--token", shopTok, "sign", "shop/orders", "--expires", "10m")
	if code != 0 || !strings.HasPrefix(out, srv.URL+"/v1/stream/shop/orders?") {
		t.Fatalf("sign: exit %d: %s", code, out)
	}
	resp, err := http.Get(strings.TrimSpace(out) + "&offset=-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "private") {
		t.Fatalf("read by the signed URL: %s %q %q", resp.Status, body, resp.Header.Get("Cache-Control"))
	}
	if code, out := cli("--token", shopTok, "sign", "shop/"); code != 0 || !strings.Contains(out, "picomq-scope=shop%2F") || strings.Contains(out, "http") {
		t.Fatalf("sign a prefix: exit %d: %s", code, out)
	}
	if code, out := cli("--token", shopTok, "sign", "billing/x"); code != 77 {
		t.Fatalf("sign outside the token's prefix: exit %d: %s", code, out)
	}
	if code, out := cli("--token", readTok, "sign", "shop/orders"); code != 77 {
		t.Fatalf("sign with a read token: exit %d: %s", code, out)
	}
}
