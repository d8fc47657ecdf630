package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/picomq/picomq/internal/testwait"
)

// The kubectl plugin (issue 32), on a cluster of its own with spec.auth, so
// that the plugin has to find the operator's token and the bundle has
// tokens to redact.
const (
	pluginNS      = "plugin-e2e"
	pluginCluster = "plug"
	// pluginUserToken is a token of the cluster's auth Secret, also put in
	// an annotation of the StreamCluster, so that the bundle's copy of it
	// has a token to redact.
	pluginUserToken = "e2e-plugin-0123456789abcdef0123456789abcdef"
)

// TestKubectlPlugin runs the binary as kubectl-picomq through kubectl:
// cluster status, stream verbs, recover refused on a healthy cluster, a drain and undrain of one broker (checked on the
// broker's node status, and its slots back), and a debug bundle holding
// each broker's node status and metrics and the StreamCluster's status,
// with no token of the operator's Secret or the auth Secret in it.
func TestKubectlPlugin(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	mustKubectl(t, `apiVersion: v1
kind: Namespace
metadata: {name: `+pluginNS+`}
---
apiVersion: v1
kind: Secret
metadata: {name: plug-tokens, namespace: `+pluginNS+`}
stringData:
  e2e-admin: "admin:`+pluginUserToken+`"
---
apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata:
  name: `+pluginCluster+`
  namespace: `+pluginNS+`
  annotations: {e2e.picomq.io/not-a-place-for-tokens: "`+pluginUserToken+`"}
spec:
  replicas: 2
  storage: {size: 1Gi}
  auth: {secretName: plug-tokens}
`, "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(t, "", "delete", "namespace", pluginNS, "--wait=false")
	})
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=5m", "-n", pluginNS, "streamcluster/"+pluginCluster)
	t.Logf("cluster %s/%s Ready in %s", pluginNS, pluginCluster, time.Since(start).Round(100*time.Millisecond))

	// kubectl finds the plugin on $PATH: a link named kubectl-picomq.
	bin := t.TempDir()
	if err := os.Symlink(env.picomq, filepath.Join(bin, "kubectl-picomq")); err != nil {
		t.Fatal(err)
	}
	plugin := func(args ...string) (string, int, time.Duration) {
		t.Helper()
		cmd := exec.Command(env.state.Kubectl, append([]string{"picomq"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.state.Kubeconfig, "PICOMQ_URL=", "PICOMQ_TOKEN=")
		began := time.Now()
		raw, err := cmd.CombinedOutput()
		took := time.Since(began)
		if ee, ok := err.(*exec.ExitError); ok {
			return string(raw), ee.ExitCode(), took
		} else if err != nil {
			t.Fatalf("kubectl picomq %s: %v", strings.Join(args, " "), err)
		}
		return string(raw), 0, took
	}
	mustPlugin := func(args ...string) string {
		t.Helper()
		out, code, took := plugin(args...)
		if code != 0 {
			t.Fatalf("kubectl picomq %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		t.Logf("kubectl picomq %s: %s", strings.Join(args, " "), took.Round(time.Millisecond))
		return out
	}

	// The operator's token, which the plugin reads itself.
	sec, err := env.k.CoreV1().Secrets(pluginNS).Get(ctx, pluginCluster+"-operator-token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for key, v := range sec.Data {
		_, tok, _ := strings.Cut(string(v), ":")
		if tok == "" {
			tok = string(v)
		}
		if len(tok) < 16 {
			t.Fatalf("operator token Secret key %s: %d bytes", key, len(tok))
		}
		secrets = append(secrets, tok)
	}
	adminToken := strings.TrimPrefix(string(sec.Data["picomq-operator"]), "admin:")
	secrets = append(secrets, pluginUserToken)

	// cluster status through the client Service (the namespace's only
	// StreamCluster: no --cluster), the kubeconfig given as a flag too.
	out := mustPlugin("-n", pluginNS, "--kubeconfig", env.state.Kubeconfig, "cluster", "status")
	for _, want := range []string{"Broker:", "Ready:", "true", "Metadata leader:", "Voters:", pluginCluster + "-0~", pluginCluster + "-1~"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, out)
		}
	}
	mustPlugin("-n", pluginNS, "--cluster", pluginCluster, "streams", "create", "plugin/e2e")
	cmd := exec.Command(env.state.Kubectl, "picomq", "-n", pluginNS, "append", "plugin/e2e")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.state.Kubeconfig, "PICOMQ_URL=", "PICOMQ_TOKEN=")
	cmd.Stdin = strings.NewReader("one\ntwo\n")
	if raw, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl picomq append: %v\n%s", err, raw)
	}
	if out := mustPlugin("-n", pluginNS, "read", "plugin/e2e", "-o", "raw"); !strings.Contains(out, "one") || !strings.Contains(out, "two") {
		t.Errorf("read:\n%s", out)
	}
	if out := mustPlugin("-n", pluginNS, "streams", "ls"); !strings.Contains(out, "plugin/e2e") {
		t.Errorf("streams ls:\n%s", out)
	}

	// Through the API server's port-forward alone: the dev stack's node
	// agent may not forward, which the plugin must say (then it uses the
	// addresses, which this machine routes to).
	out, code, took := plugin("-n", pluginNS, "--port-forward", "cluster", "status")
	switch {
	case code == 0 && strings.Contains(out, "Voters:"):
		t.Logf("cluster status through a port-forward: %s", took.Round(time.Millisecond))
	case code == 69 && strings.Contains(out, "port-forward failed"):
		t.Logf("no port-forward on this stack, as the plugin says (%s): %s", took.Round(time.Millisecond), strings.TrimSpace(out))
	default:
		t.Errorf("cluster status --port-forward: exit %d\n%s", code, out)
	}

	// recover refuses while the log has a leader, before asking anyone.
	if out, code, _ := plugin("-n", pluginNS, "recover", "--voters", "0", "--yes"); code != 75 || !strings.Contains(out, "knows a metadata leader") {
		t.Errorf("recover on a healthy cluster: exit %d\n%s", code, out)
	}

	// drain 1 (the ordinal), seen on the broker's own node status.
	pod := pluginCluster + "-1"
	node := func() (nodeStatus, error) {
		p, err := env.k.CoreV1().Pods(pluginNS).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return nodeStatus{}, err
		}
		return getNode(t, "http://"+net.JoinHostPort(p.Status.PodIP, "4437"), adminToken)
	}
	out = mustPlugin("-n", pluginNS, "drain", "1", "-o", "json")
	var ds struct {
		Broker    string `json:"broker"`
		Phase     string `json:"phase"`
		SlotsHeld int    `json:"slotsHeld"`
	}
	if err := json.Unmarshal([]byte(out), &ds); err != nil || ds.Broker != pod || ds.Phase != "Draining" {
		t.Fatalf("drain 1: %v\n%s", err, out)
	}
	n, err := node()
	if err != nil {
		t.Fatal(err)
	}
	if n.Drain == nil || n.Drain.Phase != "Draining" {
		// The operator cancels the drain of a broker that stays at its
		// next reconcile: it cannot have come this soon after.
		t.Fatalf("node status of %s after drain: drain %+v", pod, n.Drain)
	}
	testwait.NoError(t, time.Minute, pod+" handing its slots off", func() error {
		n, err := node()
		switch {
		case err != nil:
			return err
		case n.Drain == nil:
			return fmt.Errorf("no longer draining (the operator cancelled it?)")
		case n.SlotsHeld == nil || *n.SlotsHeld != 0:
			return fmt.Errorf("slots held %v", n.SlotsHeld)
		}
		return nil
	})

	// undrain by pod name: not draining, and its slots back.
	out = mustPlugin("-n", pluginNS, "undrain", pod)
	if !strings.Contains(out, pod+": not draining") {
		t.Errorf("undrain:\n%s", out)
	}
	testwait.NoError(t, 2*time.Minute, pod+" taking its slots back", func() error {
		n, err := node()
		switch {
		case err != nil:
			return err
		case n.Drain != nil:
			return fmt.Errorf("draining: %+v", n.Drain)
		case n.SlotsHeld == nil || *n.SlotsHeld == 0:
			return fmt.Errorf("slots held %v", n.SlotsHeld)
		}
		return nil
	})

	// debug bundle: the archive, its files, and no token.
	archive := filepath.Join(t.TempDir(), "bundle.tar.gz")
	out = mustPlugin("-n", pluginNS, "debug", "bundle", "-o", archive, "--dev-state-dir", env.opts.StateDir)
	if strings.TrimSpace(out) != archive {
		t.Errorf("debug bundle printed %q", out)
	}
	files := readArchive(t, archive)
	root := "picomq-debug-" + pluginCluster + "/"
	var names []string
	for name, data := range files {
		names = append(names, name)
		for _, s := range secrets {
			if strings.Contains(string(data), s) {
				t.Errorf("%s holds a token (%s…)", name, s[:6])
			}
		}
	}
	t.Logf("bundle: %d files: %s\nnotes.txt:\n%s", len(files), strings.Join(names, " "), files[root+"notes.txt"])
	for _, b := range []string{pluginCluster + "-0", pluginCluster + "-1"} {
		var n nodeStatus
		if err := json.Unmarshal(files[root+"brokers/"+b+"/node.json"], &n); err != nil || !strings.HasPrefix(n.MemberID, b+"~") {
			t.Errorf("brokers/%s/node.json: %v %+v", b, err, n)
		}
		if !strings.Contains(string(files[root+"brokers/"+b+"/metrics.txt"]), "picomq_") {
			t.Errorf("brokers/%s/metrics.txt has no picomq_ metric", b)
		}
		if len(files[root+"brokers/"+b+"/log-broker.txt"]) == 0 {
			t.Errorf("brokers/%s/log-broker.txt missing or empty", b)
		}
	}
	sc := string(files[root+"cluster/streamcluster.yaml"])
	for _, want := range []string{"kind: StreamCluster", "status:", "conditions:", "not-a-place-for-tokens: <redacted>"} {
		if !strings.Contains(sc, want) {
			t.Errorf("cluster/streamcluster.yaml lacks %q:\n%s", want, sc)
		}
	}
	for _, want := range []string{"cluster/pods.yaml", "cluster/leases.yaml", "cluster/events.yaml", "cluster/streams.yaml"} {
		if _, ok := files[root+want]; !ok {
			t.Errorf("no %s in the bundle", want)
		}
	}
	var operatorMetrics bool
	for name, data := range files {
		if strings.HasPrefix(name, root+"operator/") && strings.HasSuffix(name, "/metrics.txt") && strings.Contains(string(data), "controller_runtime_") {
			operatorMetrics = true
		}
	}
	if !operatorMetrics {
		t.Error("no operator metrics in the bundle")
	}
}

type nodeStatus struct {
	MemberID  string `json:"memberId"`
	SlotsHeld *int   `json:"slotsHeld"`
	Drain     *struct {
		Phase string `json:"phase"`
	} `json:"drain"`
}

func getNode(t *testing.T, url, token string) (nodeStatus, error) {
	t.Helper()
	var n nodeStatus
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/admin/node", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return n, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("%d %s", resp.StatusCode, data)
	}
	return n, json.Unmarshal(data, &n)
}

// readArchive is a tar.gz's regular files by name.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}
