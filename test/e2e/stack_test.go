// Package e2e runs the product end to end on the local stack (`picomq
// dev`, started by TestMain for the whole suite): kubectl and the picomq
// CLI against the operator and a 3-broker StreamCluster whose pods the
// stack's node agent runs, under faults a user meets (a pod deleted, a
// broker killed, the operator restarted, a configuration rolled), with the
// cluster trials' history checker on what was acknowledged.
package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/picomq/picomq/devstack/podnet"
	"github.com/picomq/picomq/devstack/stack"
	"github.com/picomq/picomq/internal/testwait"
)

// env is the stack the suite runs against.
var env struct {
	state   stack.State
	opts    stack.Options
	k       kubernetes.Interface
	picomq  string // the CLI the stack built
	started time.Duration
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped under -short (it starts the whole local stack)")
		os.Exit(0)
	}
	if os.Getenv("PICOMQ_E2E") == "" {
		// Its own step of make test, after the other packages: the stack's
		// load would slow the cluster trials running beside it.
		fmt.Println("e2e: skipped: PICOMQ_E2E unset (make test and make e2e run it)")
		os.Exit(0)
	}
	if os.Getenv("PICOMQ_CONTROLPLANE_ASSETS") == "" {
		if os.Getenv("CI") != "" {
			fmt.Println("e2e: PICOMQ_CONTROLPLANE_ASSETS is unset: make test sets it from hack/controlplane-assets.sh")
			os.Exit(1)
		}
		fmt.Println("e2e: skipped: PICOMQ_CONTROLPLANE_ASSETS unset (make test sets it)")
		os.Exit(0)
	}
	if err := podnet.Check(); err != nil {
		if os.Getenv("CI") != "" {
			fmt.Println("e2e:", err)
			os.Exit(1)
		}
		fmt.Println("e2e: skipped:", err)
		os.Exit(0)
	}
	if _, err := os.Stat(podnet.DefaultConfig().RouterPath()); err == nil {
		fmt.Println("e2e: a picomq dev stack runs on this machine (its network is up): stop it with `picomq dev down` first; the suite starts its own")
		os.Exit(1)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	checkout, err := filepath.Abs("../..")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	dir, err := os.MkdirTemp("", "picomq-e2e-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	env.opts = stack.Options{StateDir: dir, Checkout: checkout, Brokers: 3, Nodes: 3}
	ctx := context.Background()
	start := time.Now()
	var out bytes.Buffer
	err = stack.Up(ctx, env.opts, &out, os.Stderr)
	env.started = time.Since(start)
	defer func() {
		if err := stack.Down(env.opts, os.Stderr); err != nil {
			fmt.Println("e2e: down:", err)
		}
		if os.Getenv("PICOMQ_E2E_KEEP") == "" {
			os.RemoveAll(dir)
		}
	}()
	if err != nil {
		fmt.Println("e2e: the stack did not come up:", err)
		return 1
	}
	fmt.Printf("e2e: stack up in %s\n%s", env.started.Round(100*time.Millisecond), out.String())
	env.state, _, err = stack.ReadState(dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	env.picomq = filepath.Join(dir, "bin", "picomq")
	cfg, err := clientcmd.BuildConfigFromFlags("", env.state.Kubeconfig)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if env.k, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Println(err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		dumpLogs(dir)
	}
	return code
}

// dumpLogs prints the tail of every log of a failed run.
func dumpLogs(dir string) {
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		raw, _ := os.ReadFile(path)
		// A broker's tail is often a burst of routine lines: its warnings
		// and errors first, since they usually say what went wrong.
		var warned []string
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
				warned = append(warned, line)
			}
		}
		if len(warned) > 30 {
			warned = warned[len(warned)-30:]
		}
		if len(warned) > 0 {
			fmt.Printf("=== %s (last warnings and errors)\n%s\n", path, strings.Join(warned, "\n"))
		}
		if len(raw) > 3000 {
			raw = raw[len(raw)-3000:]
		}
		fmt.Printf("=== %s (tail)\n%s\n", path, raw)
		return nil
	})
}

// kubectl runs the stack's kubectl, returning its combined output.
func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(env.state.Kubectl, append([]string{"--kubeconfig", env.state.Kubeconfig}, args...)...)
	cmd.Dir = env.opts.Checkout
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// cli runs the stack's picomq CLI against the client Service; code is its
// exit status.
func cli(t *testing.T, stdin string, args ...string) (out string, code int) {
	t.Helper()
	cmd := exec.Command(env.picomq, args...)
	cmd.Env = append(os.Environ(), "PICOMQ_URL="+env.state.URL)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	raw, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(raw), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("picomq %s: %v", strings.Join(args, " "), err)
	}
	return string(raw), 0
}

// brokerPods are the sample cluster's pods, by ordinal.
func brokerPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods := make([]corev1.Pod, 0, env.state.Brokers)
	for i := range env.state.Brokers {
		p, err := env.k.CoreV1().Pods(stack.SampleNamespace).Get(context.Background(), stack.SampleCluster+"-"+strconv.Itoa(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, *p)
	}
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// waitClusterReady waits until every broker pod is Ready and the
// StreamCluster says Ready.
func waitClusterReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	testwait.NoError(t, timeout, "the StreamCluster Ready with every broker", func() error {
		for i := range env.state.Brokers {
			p, err := env.k.CoreV1().Pods(stack.SampleNamespace).Get(context.Background(), stack.SampleCluster+"-"+strconv.Itoa(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !podReady(p) {
				return fmt.Errorf("pod %s not ready", p.Name)
			}
		}
		out, err := kubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil || strings.TrimSpace(out) != "True" {
			return fmt.Errorf("Ready=%q %v", out, err)
		}
		return nil
	})
}

// brokerURLs are the brokers' own client URLs (pod addresses the host
// routes to), read afresh: a pod's address changes when it is recreated.
// Once known they are refreshed in the background, never while a request
// waits: with the API server stopped, a read hangs until its timeout, and
// the last addresses are kept.
type brokerURLs struct {
	mu         sync.Mutex
	at         time.Time
	urls       []string
	refreshing bool
}

func (b *brokerURLs) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.urls == nil:
		b.urls, b.at = b.read(nil), time.Now()
	case time.Since(b.at) >= time.Second && !b.refreshing:
		b.refreshing = true
		last := b.urls
		go func() {
			urls := b.read(last)
			b.mu.Lock()
			b.urls, b.at, b.refreshing = urls, time.Now(), false
			b.mu.Unlock()
		}()
	}
	return b.urls
}

// read looks the pods' addresses up, keeping last's where a lookup fails.
func (b *brokerURLs) read(last []string) []string {
	urls := make([]string, env.state.Brokers)
	for i := range urls {
		urls[i] = env.state.URL // until the pod has an address
		if i < len(last) {
			urls[i] = last[i]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		p, err := env.k.CoreV1().Pods(stack.SampleNamespace).Get(ctx, stack.SampleCluster+"-"+strconv.Itoa(i), metav1.GetOptions{})
		cancel()
		if err == nil && p.Status.PodIP != "" {
			urls[i] = "http://" + net.JoinHostPort(p.Status.PodIP, "4437")
		}
	}
	return urls
}
