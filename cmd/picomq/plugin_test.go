package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

func TestPluginModeFromArgv0(t *testing.T) {
	for argv0, want := range map[string]bool{
		"kubectl-picomq":                  true,
		"/usr/local/bin/kubectl-picomq":   true,
		"./kubectl-picomq":                true,
		`C:\bin\kubectl-picomq.exe`:       true,
		"picomq":                          false,
		"/usr/bin/picomq":                 false,
		"kubectl-picomq-old":              false,
		"/home/me/kubectl-picomq/picomq":  false,
		"picomq.test":                     false,
		"kubectl":                         false,
		"/tmp/go-build1/b001/exe/kubectl": false,
	} {
		if got := pluginMode(argv0); got != want {
			t.Errorf("pluginMode(%q) = %v, want %v", argv0, got, want)
		}
	}
}

func TestBrokerPodName(t *testing.T) {
	for arg, want := range map[string]string{
		"1":       "demo-1",
		"0":       "demo-0",
		"12":      "demo-12",
		"demo-2":  "demo-2",
		"demo-10": "demo-10",
	} {
		got, err := brokerPodName("demo", arg)
		if err != nil || got != want {
			t.Errorf("brokerPodName(demo, %q) = %q, %v; want %q", arg, got, err, want)
		}
	}
	for _, arg := range []string{"-1", "other-1", "demo", "demo-", "demo-x", "demo-01", "demo-1a", ""} {
		if got, err := brokerPodName("demo", arg); err == nil {
			t.Errorf("brokerPodName(demo, %q) = %q: want a usage error", arg, got)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("brokerPodName(demo, %q): %v is not a usage error", arg, err)
		}
	}
	// A cluster whose name ends in a number still takes ordinals.
	if got, _ := brokerPodName("web-2", "web-2-1"); got != "web-2-1" {
		t.Errorf("brokerPodName(web-2, web-2-1) = %q", got)
	}
	if brokerOrdinal("web-2-11") != 11 || brokerOrdinal("demo") != -1 {
		t.Error("brokerOrdinal")
	}
}

const (
	adminToken  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	metricToken = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	userToken   = "shop-app-token-0001"
)

func testRedactor() *redactor {
	r := &redactor{}
	r.add("admin:"+adminToken, "read:"+metricToken, metricToken)        // the operator token Secret
	r.add("read:shop/,write:shop/orders:" + userToken + "\n")           // the auth Secret
	r.add("read", "", "w:abc")                                          // too short to look for
	r.add("read,write:access-token-for-a-tenant", "access-token-2-xyz") // the access Secret, a StreamAccess Secret
	return r
}

func TestRedactionReplacesEveryTokenValue(t *testing.T) {
	r := testRedactor()
	in := strings.Join([]string{
		`{"msg":"request","authorization":"Bearer ` + adminToken + `"}`,
		"picomq-operator: admin:" + adminToken,
		"metrics " + metricToken + metricToken,
		"read:shop/,write:shop/orders:" + userToken,
		"token=" + userToken + "&x=1",
		"tenant access-token-for-a-tenant and access-token-2-xyz",
		"a read of w:abc stays", // values shorter than 8 bytes are not secrets to look for
	}, "\n")
	out := string(r.redact([]byte(in)))
	for _, tok := range []string{adminToken, metricToken, userToken, "access-token-for-a-tenant", "access-token-2-xyz"} {
		if strings.Contains(out, tok) {
			t.Errorf("token %q left in:\n%s", tok, out)
		}
	}
	for _, kept := range []string{"Bearer " + Redacted, "picomq-operator: " + Redacted, "token=" + Redacted + "&x=1", "a read of w:abc stays"} {
		if !strings.Contains(out, kept) {
			t.Errorf("want %q in:\n%s", kept, out)
		}
	}
}

func TestBundleRedactsEveryFile(t *testing.T) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	b := &bundle{tw: tar.NewWriter(gz), r: testRedactor(), root: "picomq-debug-demo", now: time.Now()}
	for name, text := range map[string]string{
		"brokers/demo-0/log-broker.txt": "auth failed for Bearer " + adminToken,
		"cluster/events.yaml":           "message: token " + userToken,
		"brokers/demo-0/node.json":      `{"nodeId":"demo-0"}`,
	} {
		if err := b.file(name, []byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.tw.Close(); err != nil {
		t.Fatal(err)
	}
	gz.Close()
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files++
		if !strings.HasPrefix(h.Name, "picomq-debug-demo/") {
			t.Errorf("%s is not under the bundle's folder", h.Name)
		}
		data, _ := io.ReadAll(tr)
		if bytes.Contains(data, []byte(adminToken)) || bytes.Contains(data, []byte(userToken)) {
			t.Errorf("%s holds a token: %s", h.Name, data)
		}
		if int64(len(data)) != h.Size {
			t.Errorf("%s: %d bytes, header says %d", h.Name, len(data), h.Size)
		}
	}
	if files != 3 {
		t.Errorf("%d files, want 3", files)
	}
}

func TestRecoveryPlanChecks(t *testing.T) {
	voters := []string{"demo-0~a", "demo-1~b", "demo-2~c"}
	lost := func(id string) wire.NodeInfo {
		return wire.NodeInfo{NodeID: id, ClusterID: "c1", RaftState: "Candidate", Voters: voters}
	}
	nodes := map[string]wire.NodeInfo{"demo-0": lost("demo-0")}
	unreached := map[string]string{"demo-1": "connection refused", "demo-2": "pod is Pending"}
	remove, err := recoveryPlan([]string{"demo-0"}, nodes, unreached)
	if err != nil || strings.Join(remove, ",") != "demo-1~b,demo-2~c" {
		t.Fatalf("plan = %v, %v", remove, err)
	}

	refusals := map[string]struct {
		survivors []string
		nodes     map[string]wire.NodeInfo
		want      string
	}{
		"a leader": {[]string{"demo-0"}, map[string]wire.NodeInfo{
			"demo-0": lost("demo-0"),
			"demo-1": {NodeID: "demo-1", Leader: "demo-1~b", Voters: voters, ClusterID: "c1"},
		}, "knows a metadata leader"},
		"a survivor that does not answer": {[]string{"demo-0", "demo-1"}, nodes, "did not answer (connection refused)"},
		"a name twice":                    {[]string{"demo-0", "demo-0"}, nodes, "twice"},
		"not a voter": {[]string{"demo-3"}, map[string]wire.NodeInfo{
			"demo-3": lost("demo-3"),
		}, "not a voter"},
		"removed": {[]string{"demo-0"}, map[string]wire.NodeInfo{
			"demo-0": {NodeID: "demo-0", ClusterID: "c1", Removed: true, Voters: voters},
		}, "was removed"},
		"a lone broker": {[]string{"demo-0"}, map[string]wire.NodeInfo{
			"demo-0": {NodeID: "demo-0"},
		}, "lone broker"},
	}
	for name, c := range refusals {
		if _, err := recoveryPlan(c.survivors, c.nodes, unreached); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestPluginVerbsNeedACluster(t *testing.T) {
	for _, args := range [][]string{{"drain", "1"}, {"undrain", "demo-1"}, {"recover", "--voters", "0"}, {"debug", "bundle"}} {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), "--cluster") {
			t.Errorf("%v: exit %d, %s", args, code, errOut.String())
		}
	}
}

// An endpoint reached at an address verifies the broker's certificate
// for the DNS name it stands for (the pod's or the Service's), with the
// cluster's CA, and sends the token.
func TestEndpointVerifiesTheNameItStandsFor(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+adminToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"nodeId":"demo-0"}`)
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate()) // httptest's certificate covers example.com
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	e := endpoint{URL: srv.URL, Name: "example.com", tls: conf, token: adminToken}
	status, body, err := e.do(t.Context(), http.MethodGet, wire.NodePath, nil)
	if err != nil || status != http.StatusOK || !strings.Contains(string(body), "demo-0") {
		t.Fatalf("the right name: %d %s %v", status, body, err)
	}
	e.Name = "demo-0.demo-headless.ns.svc"
	if _, _, err := e.do(t.Context(), http.MethodGet, wire.NodePath, nil); err == nil {
		t.Fatal("a certificate for another name was accepted")
	}
	e.Name, e.token = "example.com", ""
	if status, _, err := e.do(t.Context(), http.MethodGet, wire.NodePath, nil); err != nil || status != http.StatusUnauthorized {
		t.Fatalf("no token: %d %v", status, err)
	}
	if conf.ServerName != "" {
		t.Error("the cluster's TLS configuration was changed")
	}
}
