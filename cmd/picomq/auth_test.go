package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/certreload/certgen"
	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/httpapi"
)

// TestTokenAndCA: the CLI reaches an https:// broker checking tokens with
// --ca and --token (or their variables), and a refused token exits 77
// saying why.
func TestTokenAndCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const readTok, adminTok = "cli-read-0123456789", "cli-admin-0123456789"
	for name, content := range map[string]string{"reader": "read:" + readTok, "admin": "admin:" + adminTok} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokens, err := auth.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.Open(core.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(auth.Middleware{Tokens: tokens}.Wrap(httpapi.New(b, nil, httpapi.Options{})))
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		_ = b.Close()
	})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	var pemBuf bytes.Buffer
	if err := writeCertPEM(&pemBuf, srv.Certificate().Raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, pemBuf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := func(env map[string]string, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	url := srv.URL
	if code, out := cli(nil, "--server", url, "--ca", caFile, "--token", adminTok, "streams", "create", "s"); code != 0 {
		t.Fatalf("create with the admin token: exit %d: %s", code, out)
	}
	if code, out := cli(map[string]string{"PICOMQ_URL": url, "PICOMQ_CA_FILE": caFile, "PICOMQ_TOKEN": readTok}, "streams", "ls"); code != 0 || !strings.Contains(out, "s") {
		t.Fatalf("list with the read token from the environment: exit %d: %s", code, out)
	}
	if code, out := cli(nil, "--server", url, "--ca", caFile, "streams", "ls"); code != 77 || !strings.Contains(out, "--token") {
		t.Fatalf("no token: exit %d: %s", code, out)
	}
	if code, out := cli(nil, "--server", url, "--ca", caFile, "--token", readTok, "streams", "delete", "s"); code != 77 || !strings.Contains(out, "scope") {
		t.Fatalf("read token deleting: exit %d: %s", code, out)
	}
	other, err := certgen.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(wrongCA, other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := cli(nil, "--server", url, "--ca", wrongCA, "--token", readTok, "streams", "ls"); code == 0 {
		t.Fatal("a broker not signed by --ca was trusted")
	}
}

func writeCertPEM(w *bytes.Buffer, der []byte) error {
	return pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: der})
}
