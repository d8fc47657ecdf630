package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/certreload/certgen"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/internal/syncbuf"
)

// TestTLSAndTokens runs a lone broker with a certificate and a tokens
// directory: plain HTTP and a client trusting another CA get nothing, and
// each token gets what its scope names.
func TestTLSAndTokens(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("picomq test CA")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.WriteFiles(dir, "broker", "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "auth")
	if err := os.Mkdir(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	const readTok, writeTok, adminTok = "read-token-0123456789", "write-token-0123456789", "admin-token-0123456789"
	for name, content := range map[string]string{"reader": "read:" + readTok, "writer": "write:" + writeTok, "admin": "admin:" + adminTok} {
		if err := os.WriteFile(filepath.Join(tokens, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	done := make(chan int, 1)
	var logs syncbuf.Buffer
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--log-level", "warn", "--data-dir", filepath.Join(dir, "data"),
			"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--auth-tokens-dir", tokens, "--metrics-auth", "token"},
			env(nil), &logs, func(addr string) { addrc <- addr })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-done:
		t.Fatalf("run exited with %d:\n%s", code, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("not listening within 30s")
	}
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not return within 30s")
		}
	}()
	base := "https://" + addr
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(base + "/readyz") // open: no token
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Plain HTTP to the TLS port gets no answer of the API.
	if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP answered %d", resp.StatusCode)
		}
	}
	// A client trusting another CA refuses the broker.
	other, err := certgen.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	wrong := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: other.Pool()}}}
	if resp, err := wrong.Get(base + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatal("a client trusting another CA connected")
	}

	call := func(method, path, token string, body []byte) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	steps := []struct {
		method, path, token string
		body                []byte
		want                int
		code                *errs.Error
	}{
		{"GET", "/metrics", "", nil, 401, auth.Unauthenticated},
		{"GET", "/metrics", readTok, nil, 200, nil},
		{"PUT", "/v1/admin/streams/s", "", []byte("{}"), 401, auth.Unauthenticated},
		{"PUT", "/v1/admin/streams/s", writeTok, []byte("{}"), 403, auth.Forbidden},
		{"GET", "/v1/admin/streams/s", readTok, nil, 404, nil}, // authorized; refused nothing was created
		{"PUT", "/v1/admin/streams/s", adminTok, []byte("{}"), 201, nil},
		{"POST", "/v1/log/s", readTok, []byte("x"), 403, auth.Forbidden},
		{"POST", "/v1/log/s", "wrong-token-0123456789", []byte("x"), 401, auth.Unauthenticated},
		{"POST", "/v1/log/s", writeTok, []byte("one"), 200, nil},
		{"GET", "/v1/log/s:bounds", writeTok, nil, 403, auth.Forbidden},
		{"GET", "/v1/log/s:bounds", readTok, nil, 200, nil},
		{"POST", "/v1/log/s:trim?before=1", writeTok, nil, 403, auth.Forbidden},
		{"DELETE", "/v1/admin/streams/s", readTok, nil, 403, auth.Forbidden},
	}
	for _, s := range steps {
		status, body := call(s.method, s.path, s.token, s.body)
		if status != s.want {
			t.Fatalf("%s %s: %d, want %d: %s", s.method, s.path, status, s.want, body)
		}
		if s.code != nil {
			got, err := errs.Unmarshal(body)
			if err != nil || !errors.Is(got, s.code) {
				t.Fatalf("%s %s: problem %v (%v), want %v", s.method, s.path, got, err, s.code)
			}
		}
	}
	// The certificate's expiry is exported, as its NotAfter.
	status, metrics := call("GET", "/metrics", readTok, nil)
	leaf, err := x509.ParseCertificate(func() []byte {
		pemBytes, _ := os.ReadFile(files.Cert)
		block, _ := pem.Decode(pemBytes)
		return block.Bytes
	}())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("picomq_tls_certificate_expiry_timestamp_seconds %g", float64(leaf.NotAfter.Unix())); status != 200 || !bytes.Contains(metrics, []byte(want)) {
		t.Fatalf("metrics lack %q", want)
	}
	// Only the one append was written.
	if status, body := call("GET", "/v1/log/s:bounds", readTok, nil); status != 200 || !bytes.Contains(body, []byte(`"next":1`)) {
		t.Fatalf("bounds after refused appends: %d %s", status, body)
	}
	for _, secret := range []string{readTok, writeTok, adminTok} {
		if bytes.Contains([]byte(logs.String()), []byte(secret)) {
			t.Fatal("a token reached the logs")
		}
	}
}
