package clusterharness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

func TestMain(m *testing.M) {
	flag.Parse()
	Main(m)
}

// skipShort is why the process tests skip under -short.
const skipShort = "process tier: skipped under -short (it builds the broker binary and runs it); go test without -short runs it"

func needProcesses(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip(skipShort)
	}
}

// appendOne appends payload to a one-partition stream on url and returns
// its offset.
func appendOne(t *testing.T, url, name, payload string) stream.Offset {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Open(ctx, name, client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte(payload)}})
	if err != nil {
		t.Fatal(err)
	}
	return v.First
}

// readAt reads the record at off, or returns the error.
func readAt(url, name string, off stream.Offset) (string, error) {
	ctx := context.Background()
	c, err := client.New(url)
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := c.Stream(ctx, name)
	if err != nil {
		return "", err
	}
	es, err := s.Read(ctx, 0, off, 1)
	if err != nil {
		return "", err
	}
	if len(es) != 1 {
		return "", fmt.Errorf("no record at %d", off)
	}
	return string(es[0].Record.Payload), nil
}

// TestSingleBrokerLifecycle drives every broker operation of the harness
// on one broker without cluster flags: what runs today.
func TestSingleBrokerLifecycle(t *testing.T) {
	needProcesses(t)
	c := Start(t, Options{})
	n, err := c.Node(0)
	if err != nil {
		t.Fatal(err)
	}
	if n.NodeID != "broker-0" || !n.Ready {
		t.Fatalf("node: %s", n.Raw)
	}
	url := c.URL(0)
	off := appendOne(t, url, "h/one", "first")

	c.Kill(0)
	if c.Broker(0).Running() {
		t.Fatal("running after Kill")
	}
	if err := Ready(context.Background(), url); err == nil {
		t.Fatal("a killed broker answers /readyz")
	}
	c.StartBroker(0)
	if got, err := readAt(url, "h/one", off); err != nil || got != "first" {
		t.Fatalf("after kill and start: %q, %v", got, err)
	}

	c.Restart(0)
	if got, err := readAt(url, "h/one", off); err != nil || got != "first" {
		t.Fatalf("after restart: %q, %v", got, err)
	}

	c.Stop(0)
	// Measuring that nothing answers for a period: the probe's own 2s
	// timeout.
	if err := Ready(context.Background(), url); err == nil {
		t.Fatal("a SIGSTOPped broker answers /readyz")
	}
	c.Cont(0)
	if err := c.WaitReady(); err != nil {
		t.Fatal(err)
	}

	oldURL := url
	c.RestartAll()
	url = c.URL(0)
	if url == oldURL {
		t.Fatalf("RestartAll kept the address %s", url)
	}
	if got, err := readAt(url, "h/one", off); err != nil || got != "first" {
		t.Fatalf("after RestartAll on new addresses: %q, %v", got, err)
	}

	pid := c.Broker(0).Pid()
	c.Wipe(0)
	if c.Broker(0).Pid() == pid {
		t.Fatal("Wipe did not start a new process")
	}
	if _, err := readAt(url, "h/one", off); !errors.Is(err, node.StreamNotFound) {
		t.Fatalf("after Wipe the stream is still there: %v", err)
	}
}

// children lists the processes whose parent is this test process.
func children(t *testing.T) []string {
	t.Helper()
	me := os.Getpid()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the
		// last parenthesis.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(me) {
			out = append(out, fmt.Sprintf("%d %s", pid, s[:strings.LastIndexByte(s, ')')+1]))
		}
	}
	return out
}

// TestNoProcessLeftBehind runs a cluster of independent brokers, kills
// one, pauses another, and checks that the cleanup left no child at all,
// zombies included.
func TestNoProcessLeftBehind(t *testing.T) {
	needProcesses(t)
	if _, err := Binary(); err != nil { // build before counting
		t.Fatal(err)
	}
	before := children(t)
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{Brokers: 3})
		if got := len(children(t)) - len(before); got != 3 {
			t.Fatalf("%d new children with 3 brokers running", got)
		}
		c.Kill(0)
		c.Stop(1) // left paused: the cleanup must still end it
	})
	if after := children(t); len(after) > len(before) {
		t.Fatalf("processes left behind: %q (before: %q)", after, before)
	}
}

// TestAPIServerThroughProxies: each broker's kubeconfig reaches envtest's
// apiserver through its own proxy, so one broker can be cut from the
// apiserver while the others keep it.
func TestAPIServerThroughProxies(t *testing.T) {
	needProcesses(t)
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set (make test sets it): export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)")
	}
	a := StartAPIServer(t, 2)
	clients := make([]*kubernetes.Clientset, 2)
	for i := range clients {
		cfg, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig(i))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 2 * time.Second
		if clients[i], err = kubernetes.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	create := func(i int, name string) error {
		_, err := clients[i].CoordinationV1().Leases("default").Create(ctx,
			&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	if err := create(0, "l-0"); err != nil {
		t.Fatalf("through broker-0's proxy: %v", err)
	}
	a.Link(0).Cut()
	if err := create(0, "l-cut"); err == nil {
		t.Fatal("a cut link reached the apiserver")
	}
	if err := create(1, "l-1"); err != nil {
		t.Fatalf("broker-1's link while broker-0's is cut: %v", err)
	}
	a.Link(0).Blackhole()
	if err := create(0, "l-hole"); err == nil {
		t.Fatal("a blackholed link reached the apiserver")
	}
	a.Link(0).Heal()
	if err := Poll(ctx, 10*time.Second, "broker-0's link healed", func(context.Context) error { return create(0, "l-healed") }); err != nil {
		t.Fatal(err)
	}
	// The Lease made while blackholed may have landed after the heal:
	// held bytes flow on. The direct client sees every Lease.
	ls, err := a.Client().CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range ls.Items {
		names[l.Name] = true
	}
	for _, n := range []string{"l-0", "l-1", "l-healed"} {
		if !names[n] {
			t.Errorf("lease %s missing: %v", n, names)
		}
	}
	if names["l-cut"] {
		t.Error("the lease created through a cut link exists")
	}
}
