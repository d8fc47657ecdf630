package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/picomq/picomq/internal/testwait"
)

// Access as a resource (issue 31), on a cluster of its own with spec.auth
// — the sample cluster checks no token — in namespace streams, admitting
// the namespaces labelled picomq-access=true: shop is, billing is not.

const (
	accessClusterNS = "streams"
	accessCluster   = "secure"
	// accessAdminToken is the test's own admin token (the cluster's
	// spec.auth Secret), to create streams outside any prefix.
	accessAdminToken = "e2e-admin-0123456789abcdef0123456789abcdef"
	// revocationBound is how soon a deleted StreamAccess's token must be
	// refused: the README's "within about 2 minutes" (the kubelet's Secret
	// sync), here the stack agent's 30 s refresh plus the brokers' 1 s
	// re-read, with room for a loaded machine.
	revocationBound = 2 * time.Minute
)

// TestStreamAccessOnASecureCluster: a StreamAccess in namespace shop gives
// a token that reads and writes shop/… through the client Service and is
// refused (403) on billing/…; deleted, its token is refused (401) within
// the documented time. A Stream of shop (admitted) becomes Ready, one of
// billing does not (NamespaceNotAllowed). The cluster's anonymous prefix
// and URL signing keys work as rendered.
func TestStreamAccessOnASecureCluster(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	mustKubectl(t, `apiVersion: v1
kind: Namespace
metadata: {name: streams}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {picomq-access: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: billing}
---
apiVersion: v1
kind: Secret
metadata: {name: secure-tokens, namespace: streams}
stringData:
  e2e-admin: "admin:`+accessAdminToken+`"
---
apiVersion: v1
kind: Secret
metadata: {name: secure-url-keys, namespace: streams}
stringData:
  "2026-01": "e2e-url-signing-key-0123456789abcdef"
---
apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata: {name: secure, namespace: streams}
spec:
  replicas: 1
  storage: {size: 1Gi}
  auth:
    secretName: secure-tokens
    anonymousReadPrefixes: [public/]
    urlSigning: {secretName: secure-url-keys}
  allowedNamespaces:
    from: Selector
    selector: {matchLabels: {picomq-access: "true"}}
`, "apply", "-f", "-")
	t.Cleanup(func() {
		// The broker pod and the namespaces go in the background: the
		// other tests run on the sample cluster.
		_, _ = kubectl(t, "", "delete", "namespace", "shop", "billing", accessClusterNS, "--wait=false")
	})
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=5m", "-n", accessClusterNS, "streamcluster/"+accessCluster)
	t.Logf("cluster %s/%s Ready in %s", accessClusterNS, accessCluster, time.Since(start).Round(100*time.Millisecond))

	svc, err := env.k.CoreV1().Services(accessClusterNS).Get(ctx, accessCluster, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))

	// The StreamAccess, and what its Secret holds.
	granted := time.Now()
	mustKubectl(t, `apiVersion: streams.picomq.io/v1alpha1
kind: StreamAccess
metadata: {name: orders-app, namespace: shop}
spec:
  clusterRef: {name: secure, namespace: streams}
  scopes: [read, write]
  prefixes: [shop/]
`, "apply", "-f", "-")
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=1m", "-n", "shop", "streamaccess/orders-app")
	sec, err := env.k.CoreV1().Secrets("shop").Get(ctx, "orders-app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := string(sec.Data["token"])
	if got := string(sec.Data["scopes"]); got != "read:shop/,write:shop/" {
		t.Errorf("Secret scopes %q", got)
	}
	if got := string(sec.Data["url"]); got != "http://secure.streams.svc:4437" {
		t.Errorf("Secret url %q", got)
	}
	out := mustKubectl(t, "", "get", "streamaccess", "-n", "shop")
	for _, want := range []string{"CLUSTER", "SCOPES", "PREFIXES", "READY", "orders-app", "secure", "shop/", "True"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get streamaccess lacks %q:\n%s", want, out)
		}
	}

	// The token reaches the brokers with the volume's sync.
	testwait.NoError(t, revocationBound+30*time.Second, "the StreamAccess's token accepted", func() error {
		if code, body := call(t, url, token, "PUT", "/v1/stream/shop/orders", "text/plain", ""); code != http.StatusCreated && code != http.StatusOK {
			return fmt.Errorf("create shop/orders: %d %s", code, body)
		}
		return nil
	})
	t.Logf("token accepted by the brokers %s after the StreamAccess was applied", time.Since(granted).Round(time.Second))
	if code, body := call(t, url, token, "POST", "/v1/stream/shop/orders", "text/plain", "hello\n"); code != http.StatusNoContent {
		t.Errorf("append to shop/orders: %d %s", code, body)
	}
	if code, body := call(t, url, token, "GET", "/v1/stream/shop/orders", "", ""); code != http.StatusOK || !strings.Contains(body, "hello") {
		t.Errorf("read shop/orders: %d %s", code, body)
	}
	// Outside its prefix: 403, and nothing written.
	if code, body := call(t, url, accessAdminToken, "PUT", "/v1/stream/billing/invoices", "text/plain", ""); code != http.StatusCreated {
		t.Fatalf("admin create billing/invoices: %d %s", code, body)
	}
	for _, m := range []string{"GET", "POST"} {
		if code, body := call(t, url, token, m, "/v1/stream/billing/invoices", "text/plain", "x\n"); code != http.StatusForbidden || !strings.Contains(body, "FORBIDDEN") {
			t.Errorf("%s billing/invoices with the shop token: %d %s, want 403 FORBIDDEN", m, code, body)
		}
	}
	if code, body := call(t, url, token, "PUT", "/v1/stream/billing/new", "text/plain", ""); code != http.StatusForbidden {
		t.Errorf("create billing/new with the shop token: %d %s, want 403", code, body)
	}

	// spec.auth.urlSigning: the token signs a read URL for its stream,
	// which reads without a token.
	code, body := call(t, url, token, "POST", "/v1/sign", "application/json", `{"stream": "shop/orders", "expiresIn": "5m"}`)
	var signed struct{ Query string }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &signed) != nil || signed.Query == "" {
		t.Errorf("sign shop/orders: %d %s", code, body)
	} else if code, body := call(t, url, "", "GET", "/v1/stream/shop/orders?"+signed.Query, "", ""); code != http.StatusOK || !strings.Contains(body, "hello") {
		t.Errorf("read through the signed URL: %d %s", code, body)
	}
	// spec.auth.anonymousReadPrefixes: public/ reads without a token;
	// shop/ does not.
	if code, body := call(t, url, accessAdminToken, "PUT", "/v1/stream/public/feed", "text/plain", "news\n"); code != http.StatusCreated {
		t.Fatalf("admin create public/feed: %d %s", code, body)
	}
	if code, body := call(t, url, "", "GET", "/v1/stream/public/feed", "", ""); code != http.StatusOK || !strings.Contains(body, "news") {
		t.Errorf("anonymous read of public/feed: %d %s", code, body)
	}
	if code, _ := call(t, url, "", "GET", "/v1/stream/shop/orders", "", ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous read of shop/orders: %d, want 401", code)
	}

	// Streams of an admitted namespace and of one that is not.
	mustKubectl(t, `apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: events, namespace: shop}
spec: {clusterRef: {name: secure, namespace: streams}, name: shop/events}
---
apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: events, namespace: billing}
spec: {clusterRef: {name: secure, namespace: streams}, name: billing/events}
`, "apply", "-f", "-")
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=2m", "-n", "shop", "stream/events")
	testwait.NoError(t, time.Minute, "billing's Stream refused", func() error {
		out, err := kubectl(t, "", "get", "stream", "events", "-n", "billing", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}`)
		if err != nil || out != "False/NamespaceNotAllowed" {
			return fmt.Errorf("Ready %q %v", out, err)
		}
		return nil
	})
	if code, _ := call(t, url, accessAdminToken, "GET", "/v1/stream/billing/events", "", ""); code != http.StatusNotFound {
		t.Errorf("billing/events on the brokers: %d, want 404 (a Stream not admitted creates nothing)", code)
	}
	if code, body := call(t, url, token, "POST", "/v1/stream/shop/events", "application/octet-stream", "x"); code != http.StatusNoContent {
		t.Errorf("append to shop/events (the Stream's broker stream) with the shop token: %d %s", code, body)
	}

	// Deleted: the token is refused within the documented time.
	revoked := time.Now()
	mustKubectl(t, "", "delete", "streamaccess", "orders-app", "-n", "shop", "--timeout=1m")
	testwait.NoError(t, revocationBound, "the deleted StreamAccess's token refused", func() error {
		if code, body := call(t, url, token, "GET", "/v1/stream/shop/orders", "", ""); code != http.StatusUnauthorized {
			return fmt.Errorf("read with the revoked token: %d %s", code, body)
		}
		return nil
	})
	t.Logf("token refused (401) %s after the StreamAccess was deleted", time.Since(revoked).Round(time.Second))
	t.Logf("whole test: %s", time.Since(start).Round(time.Second))
}

// call sends one request to the broker at base with token (none: ""),
// returning the status and the body (its first 512 bytes).
func call(t *testing.T, base, token, method, path, contentType, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	return res.StatusCode, string(raw)
}
