package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/picomq/picomq/broker/ownership"
	"github.com/picomq/picomq/devstack/stack"
	"github.com/picomq/picomq/internal/testwait"
	"github.com/picomq/picomq/test/workload"
)

// The tests share one stack and run in this order (the last one rolls
// every broker).

// TestSamplesAreReady: `picomq dev up` left the samples Ready, the
// brokers spread over the nodes with their claims bound, and the slot
// Leases held — what README's kubectl line shows.
func TestSamplesAreReady(t *testing.T) {
	ctx := context.Background()
	nodes := map[string]bool{}
	for _, p := range brokerPods(t) {
		if !podReady(&p) {
			t.Errorf("pod %s not ready: %+v", p.Name, p.Status.Conditions)
		}
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != env.state.Brokers {
		t.Errorf("brokers on %d nodes, want %d (topology spread)", len(nodes), env.state.Brokers)
	}
	pvcs, err := env.k.CoreV1().PersistentVolumeClaims(stack.SampleNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := 0
	for _, c := range pvcs.Items {
		if c.Status.Phase == "Bound" {
			bound++
		}
	}
	if bound < env.state.Brokers {
		t.Errorf("%d claims bound, want %d", bound, env.state.Brokers)
	}
	out := mustKubectl(t, "", "get", "streamclusters,streams,leases,pods")
	for _, want := range []string{"streamcluster.streams.picomq.io/demo", "stream.streams.picomq.io/app-events", "stream.streams.picomq.io/orders", "demo-slot-0", "demo-0"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get lacks %q:\n%s", want, out)
		}
	}
	for _, s := range []string{"app-events", "orders"} {
		if got := mustKubectl(t, "", "get", "stream", s, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); got != "True" {
			t.Errorf("stream %s Ready=%q", s, got)
		}
	}
	// A second up on the running stack only prints the exports.
	var out2, progress bytes.Buffer
	if err := stack.Up(ctx, env.opts, &out2, &progress); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "already running") || !strings.Contains(out2.String(), "export PICOMQ_URL="+env.state.URL) {
		t.Errorf("second up: %q %q", progress.String(), out2.String())
	}
	if s, ok, err := stack.ReadState(env.opts.StateDir); err != nil || !ok || s.PID != env.state.PID {
		t.Errorf("the second up replaced the supervisor: %+v %v %v", s, ok, err)
	}
}

// TestAppendAndReadThroughTheClientService drives the CLI against the
// client Service the stack serves on the host.
func TestAppendAndReadThroughTheClientService(t *testing.T) {
	out, code := cli(t, `{"n":1}`+"\n"+`{"n":2}`+"\n", "append", "app/events")
	if code != 0 {
		t.Fatalf("append: exit %d: %s", code, out)
	}
	out, code = cli(t, "", "read", "app/events", "--from", "0", "-o", "json")
	if code != 0 {
		t.Fatalf("read: exit %d: %s", code, out)
	}
	if !strings.Contains(out, `{\"n\":1}`) || !strings.Contains(out, `{\"n\":2}`) {
		t.Errorf("read back: %s", out)
	}
	out, code = cli(t, "", "streams", "ls")
	if code != 0 || !strings.Contains(out, "app/events") || !strings.Contains(out, "shop/orders") {
		t.Errorf("streams ls: exit %d: %s", code, out)
	}
	out, code = cli(t, "", "cluster", "status", "-o", "json")
	if code != 0 || !strings.Contains(out, "demo-0") {
		t.Errorf("cluster status: exit %d: %s", code, out)
	}
	// A stream that does not exist: the coded error's exit status.
	if out, code = cli(t, "", "read", "no/such/stream"); code == 0 || !strings.Contains(out, "STREAM_NOT_FOUND") {
		t.Errorf("a missing stream: exit %d: %s", code, out)
	}
}

// load runs the trials' workload against the brokers' pod addresses and
// checks its history at the end: nothing acknowledged lost or duplicated,
// offsets gap-free, reads monotonic, partitions linearizable.
type load struct {
	t       *testing.T
	urls    *brokerURLs
	streams []workload.StreamSpec
	w       *workload.Run
}

func startLoad(t *testing.T, name string) *load {
	loadsStarted.Lock()
	loadsStarted.n[name]++
	if n := loadsStarted.n[name]; n > 1 {
		// -count=N runs a test again on the same stack: its streams must
		// be new, or the checkers read the last run's records as this
		// one's duplicates.
		name = fmt.Sprintf("%s-%d", name, n)
	}
	loadsStarted.Unlock()
	l := &load{t: t, urls: &brokerURLs{}, streams: []workload.StreamSpec{{Name: name + "/one"}, {Name: name + "/four", Partitions: 4}}}
	cfg := workload.Config{URLs: l.urls.get, Streams: l.streams, Seed: uint64(time.Now().UnixNano()), RequestTimeout: 10 * time.Second}
	if err := workload.Setup(context.Background(), cfg, time.Minute); err != nil {
		t.Fatal(err)
	}
	l.w = workload.Start(context.Background(), cfg)
	l.waitAcked(30, time.Minute)
	return l
}

// loadsStarted counts startLoad's calls in this process, by name.
var loadsStarted = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

func (l *load) waitAcked(n int64, timeout time.Duration) {
	base := l.w.Acked()
	testwait.NoError(l.t, timeout, fmt.Sprintf("%d more appends acknowledged", n), func() error {
		if got := l.w.Acked() - base; got < n {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	})
}

func (l *load) stopAndCheck() {
	h := l.w.Stop()
	all := make([]int, env.state.Brokers)
	for i := range all {
		all[i] = i
	}
	final := workload.Snapshot(context.Background(), l.urls.get(), all, l.streams, 30*time.Second)
	r := workload.Check(h, final, workload.Options{})
	l.t.Logf("history: %v; linearizability: %v", r.Stats, r.Lin)
	if err := r.Err(); err != nil {
		l.t.Errorf("the checkers found:\n%v", err)
	}
	if r.Stats.Acked == 0 {
		l.t.Error("nothing was acknowledged")
	}
}

// TestBrokerPodDeletedAndKilledUnderLoad deletes a broker's pod, then
// kills another broker's process with SIGKILL, under load: each comes back
// on its claim and nothing acknowledged is lost.
func TestBrokerPodDeletedAndKilledUnderLoad(t *testing.T) {
	ctx := context.Background()
	l := startLoad(t, "e2e/faults")
	defer l.w.Stop()

	before, err := env.k.CoreV1().PersistentVolumeClaims(stack.SampleNamespace).Get(ctx, "data-demo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := brokerPods(t)[1]
	mustKubectl(t, "", "delete", "pod", "demo-1", "--wait=false")
	testwait.NoError(t, 2*time.Minute, "demo-1 recreated", func() error {
		// Not found for a moment: the StatefulSet recreates it once the
		// old one is gone.
		p, err := env.k.CoreV1().Pods(stack.SampleNamespace).Get(ctx, "demo-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("still the old pod")
		}
		return nil
	})
	waitClusterReady(t, 2*time.Minute)
	after, err := env.k.CoreV1().PersistentVolumeClaims(stack.SampleNamespace).Get(ctx, "data-demo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != before.UID || after.Spec.VolumeName != before.Spec.VolumeName {
		t.Errorf("demo-1 came back on another volume: %s → %s", before.Spec.VolumeName, after.Spec.VolumeName)
	}
	l.waitAcked(30, time.Minute)

	victim := brokerPods(t)[2]
	restarts := victim.Status.ContainerStatuses[0].RestartCount
	pid := containerPID(t, stack.SampleNamespace, victim.Name, "broker")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 2*time.Minute, "demo-2's broker restarted in place", func() error {
		p, err := env.k.CoreV1().Pods(stack.SampleNamespace).Get(ctx, "demo-2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != victim.UID {
			return fmt.Errorf("the pod was replaced, not restarted")
		}
		if p.Status.ContainerStatuses[0].RestartCount <= restarts {
			return fmt.Errorf("restart count %d", p.Status.ContainerStatuses[0].RestartCount)
		}
		return nil
	})
	p := brokerPods(t)[2]
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Errorf("last termination %+v, want exit 137 (SIGKILL)", last)
	}
	waitClusterReady(t, 2*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

// containerPID is the process of a pod's container, from the agent's files.
func containerPID(t *testing.T, namespace, pod, container string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(env.opts.StateDir, "agent", "pods", namespace+"_"+pod+"_*", container+".pid"))
	if len(files) != 1 {
		t.Fatalf("broker pid files of %s: %v", pod, files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(raw))[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestGitOpsReapplyChangesNothing applies the same manifests again, as a
// GitOps controller does on every sync: nothing changes, and the operator
// writes nothing in reaction.
func TestGitOpsReapplyChangesNothing(t *testing.T) {
	samples := filepath.Join(env.opts.StateDir, "samples")
	versions := func() map[string]string {
		out := mustKubectl(t, "", "get", "streamcluster,streams,statefulset,configmap,service,poddisruptionbudget", "-o",
			`jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(line, "=")
			m[k] = v
		}
		return m
	}
	waitClusterReady(t, 2*time.Minute)
	before := versions()
	out := mustKubectl(t, "", "apply", "-k", samples)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, " unchanged") {
			t.Errorf("re-apply changed something: %q", line)
		}
	}
	// Not a wait for a condition: a span in which a reconcile reacting to
	// the apply would have written (the operator reacts in milliseconds).
	time.Sleep(5 * time.Second)
	after := versions()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s was written after a re-apply that changed nothing (resourceVersion %s → %s)", k, v, after[k])
		}
	}
}

// TestBadManifestsAreRefused: manifests the API refuses, with the
// message that says why.
func TestBadManifestsAreRefused(t *testing.T) {
	for _, c := range []struct{ manifest, want string }{
		{`apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata: {name: bad-rf}
spec: {replicas: 1, replicationFactor: 3}
`, "replicationFactor cannot exceed replicas"},
		{`apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: bad-name}
spec: {clusterRef: {name: demo}, name: "a/../b"}
`, "name segments '.' and '..' are not allowed"},
		{`apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: bad-ttl}
spec: {clusterRef: {name: demo}, ttl: 1h, expiresAt: "2030-01-01T00:00:00Z"}
`, "set ttl or expiresAt, not both"},
	} {
		out, err := kubectl(t, c.manifest, "apply", "-f", "-")
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("apply of a bad manifest: err %v, output %q, want it to say %q", err, out, c.want)
		}
	}
	// A scale-down that would leave fewer brokers than the replication
	// factor is refused before any broker is asked to drain, and nothing
	// of the running cluster changes.
	gen := mustKubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", "jsonpath={.metadata.generation}")
	out, err := kubectl(t, "", "patch", "streamcluster", stack.SampleCluster, "--type=merge", "-p", `{"spec":{"replicationFactor":3,"replicas":2}}`)
	if err == nil || !strings.Contains(out, "replicationFactor cannot exceed replicas") {
		t.Errorf("a scale-down below the replication factor: err %v, output %q", err, out)
	}
	if now := mustKubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", "jsonpath={.metadata.generation}"); now != gen {
		t.Errorf("generation %s after a refused patch, was %s", now, gen)
	}
}

// TestStreamDeletionPolicies deletes a Stream with deletionPolicy Delete
// (its stream goes from the brokers) and one with Retain (it stays).
func TestStreamDeletionPolicies(t *testing.T) {
	manifest := func(name, policy string) string {
		return fmt.Sprintf(`apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: %s}
spec: {clusterRef: {name: demo}, name: e2e/%s, deletionPolicy: %s}
`, name, name, policy)
	}
	for _, c := range []struct {
		name, policy string
		kept         bool
	}{{"deleted", "Delete", false}, {"retained", "Retain", true}} {
		mustKubectl(t, manifest(c.name, c.policy), "apply", "-f", "-")
		mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=2m", "stream/"+c.name)
		if out, code := cli(t, "", "streams", "get", "e2e/"+c.name); code != 0 {
			t.Fatalf("stream e2e/%s on the brokers: exit %d: %s", c.name, code, out)
		}
		if out, code := cli(t, "x\n", "append", "e2e/"+c.name); code != 0 {
			t.Fatalf("append: exit %d: %s", code, out)
		}
		mustKubectl(t, "", "delete", "stream", c.name, "--timeout=2m")
		out, code := cli(t, "", "streams", "get", "e2e/"+c.name)
		switch {
		case c.kept && code != 0:
			t.Errorf("%s: the stream is gone from the brokers: exit %d: %s", c.policy, code, out)
		case !c.kept && (code == 0 || !strings.Contains(out, "STREAM_NOT_FOUND")):
			t.Errorf("%s: the stream stays on the brokers: exit %d: %s", c.policy, code, out)
		}
	}
}

// TestOperatorRestartResumes kills the operator's process (SIGKILL: no
// hand-off) the moment a Stream is applied: the container restarted in
// its pod wins the leader election anew and creates the stream.
func TestOperatorRestartResumes(t *testing.T) {
	ctx := context.Background()
	leader := func() string {
		l, err := env.k.CoordinationV1().Leases("picomq-system").Get(ctx, "operator.streams.picomq.io", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	pods, err := env.k.CoreV1().Pods("picomq-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("operator pods: %v %v", pods, err)
	}
	op := pods.Items[0]
	before := leader()
	if before == "" {
		t.Fatal("no operator leader")
	}
	pid := containerPID(t, "picomq-system", op.Name, "manager")
	mustKubectl(t, `apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: after-restart}
spec: {clusterRef: {name: demo}, name: e2e/after-restart, partitions: 2}
`, "apply", "-f", "-")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "", "wait", "--for=condition=Ready", "--timeout=3m", "stream/after-restart")
	testwait.NoError(t, 2*time.Minute, "a new operator process leads", func() error {
		if now := leader(); now == before || now == "" {
			return fmt.Errorf("leader %q", now)
		}
		return nil
	})
	out, code := cli(t, "", "streams", "get", "e2e/after-restart", "-o", "json")
	if code != 0 {
		t.Fatalf("stream on the brokers: exit %d: %s", code, out)
	}
	var info struct{ Partitions int }
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Partitions != 2 {
		t.Errorf("stream info %s: %v", out, err)
	}
}

// TestConfigurationChangeRollsWithNoLoss changes the brokers'
// configuration under load: the StatefulSet rolls the pods one at a time
// and nothing acknowledged is lost.
func TestConfigurationChangeRollsWithNoLoss(t *testing.T) {
	waitClusterReady(t, 2*time.Minute)
	l := startLoad(t, "e2e/roll")
	defer l.w.Stop()
	// The hashes of the pods there are (one may be between its deletion
	// and its replacement).
	hashes := func() map[string]bool {
		m := map[string]bool{}
		pods, err := env.k.CoreV1().Pods(stack.SampleNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + stack.SampleCluster})
		if err != nil {
			return map[string]bool{"?": true}
		}
		for _, p := range pods.Items {
			m[p.Annotations["streams.picomq.io/config-hash"]] = true
		}
		if len(pods.Items) != env.state.Brokers {
			m["?"] = true
		}
		return m
	}
	before := hashes()
	if len(before) != 1 {
		t.Fatalf("brokers on several configurations before the change: %v", before)
	}
	mustKubectl(t, "", "patch", "streamcluster", stack.SampleCluster, "--type=merge", "-p", `{"spec":{"broker":{"longPollTimeout":"15s"}}}`)
	testwait.NoError(t, 5*time.Minute, "every broker on the new configuration", func() error {
		h := hashes()
		if len(h) != 1 || h[firstKey(before)] {
			return fmt.Errorf("config hashes %v", h)
		}
		return nil
	})
	waitClusterReady(t, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// scaleTo patches the sample cluster's replicas.
func scaleTo(t *testing.T, n int) {
	t.Helper()
	mustKubectl(t, "", "patch", "streamcluster", stack.SampleCluster, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
}

// waitScaled waits until the StatefulSet runs n pods, each Ready, and the
// StreamCluster says Ready.
func waitScaled(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	testwait.NoError(t, timeout, fmt.Sprintf("the cluster Ready at %d brokers", n), func() error {
		sts, err := env.k.AppsV1().StatefulSets(stack.SampleNamespace).Get(ctx, stack.SampleCluster, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != n || int(sts.Status.ReadyReplicas) != n || int(sts.Status.Replicas) != n {
			return fmt.Errorf("StatefulSet replicas %v, status %d, ready %d", sts.Spec.Replicas, sts.Status.Replicas, sts.Status.ReadyReplicas)
		}
		out, err := kubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil || strings.TrimSpace(out) != "True" {
			return fmt.Errorf("Ready=%q %v", out, err)
		}
		return nil
	})
}

// waitBalancedAndReplicated waits until the slot Leases are shared evenly
// (within one) by the n brokers and the StreamCluster reports no object
// under-replicated.
func waitBalancedAndReplicated(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	defer func() {
		if t.Failed() {
			logRepairTrail(t)
		}
	}()
	ctx := context.Background()
	testwait.NoError(t, timeout, fmt.Sprintf("slots balanced over %d brokers, nothing under-replicated", n), func() error {
		leases, err := env.k.CoordinationV1().Leases(stack.SampleNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		held := map[string]int{}
		slots := 0
		for _, l := range leases.Items {
			if !strings.HasPrefix(l.Name, stack.SampleCluster+"-slot-") {
				continue
			}
			slots++
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				held[*l.Spec.HolderIdentity]++
			}
		}
		lo, hi, total := slots, 0, 0
		for _, k := range held {
			lo, hi, total = min(lo, k), max(hi, k), total+k
		}
		if len(held) != n || total != slots || hi-lo > 1 {
			return fmt.Errorf("%d slots held %v", slots, held)
		}
		out, err := kubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", "jsonpath={.status.underReplicated}")
		if err != nil || strings.TrimSpace(out) != "0" {
			return fmt.Errorf("under-replicated %q %v", out, err)
		}
		return nil
	})
}

// logRepairTrail logs, from every broker's log, the last lines about
// repairs, members and ensembles: what a wait for "nothing
// under-replicated" needs to be diagnosed from a CI run's output, where
// the stack's logs are gone and the run's final dump shows only its last
// warnings.
func logRepairTrail(t *testing.T) {
	logs, _ := filepath.Glob(filepath.Join(env.opts.StateDir, "agent", "logs", "*", "*", "broker.log"))
	for _, path := range logs {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var trail []string
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "repair") || strings.Contains(line, "member") && !strings.Contains(line, "renewals failed") || strings.Contains(line, "ensemble") {
				trail = append(trail, line)
			}
		}
		if len(trail) > 25 {
			trail = trail[len(trail)-25:]
		}
		t.Logf("%s: last lines about repairs, members and ensembles:\n%s", path, strings.Join(trail, "\n"))
	}
}

// TestScaleUpAndDownUnderLoad takes the cluster from 3 to 5 brokers and
// back to 3 under load: the new brokers join and take their share of the
// slots, the departing ones drain (their copies moved to the brokers that
// stay) before their pods go; nothing acknowledged is lost, the slots end
// balanced and every object at R copies.
func TestScaleUpAndDownUnderLoad(t *testing.T) {
	waitClusterReady(t, 2*time.Minute)
	l := startLoad(t, "e2e/scale")
	defer l.w.Stop()

	start := time.Now()
	scaleTo(t, 5)
	waitScaled(t, 5, 5*time.Minute)
	t.Logf("3 → 5 brokers: Ready in %s", time.Since(start).Round(100*time.Millisecond))
	waitBalancedAndReplicated(t, 5, 3*time.Minute)
	t.Logf("3 → 5 brokers: slots balanced, nothing under-replicated after %s", time.Since(start).Round(100*time.Millisecond))
	l.waitAcked(30, time.Minute)

	start = time.Now()
	scaleTo(t, 3)
	waitScaled(t, 3, 5*time.Minute)
	t.Logf("5 → 3 brokers: drained and Ready in %s", time.Since(start).Round(100*time.Millisecond))
	waitBalancedAndReplicated(t, 3, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

// waitScaleDownStarted waits until the operator drains the departing
// broker (Progressing says Draining) or already lowered the StatefulSet
// (a drain of little data may complete between two looks).
func waitScaleDownStarted(t *testing.T) {
	t.Helper()
	testwait.NoError(t, time.Minute, "the scale-down under way", func() error {
		out, err := kubectl(t, "", "get", "streamcluster,statefulset", stack.SampleCluster, "-o",
			`jsonpath={.items[0].status.conditions[?(@.type=="Progressing")].reason} {.items[1].spec.replicas}`)
		if err != nil {
			return err
		}
		if f := strings.Fields(out); len(f) == 2 && (f[0] == "Draining" || f[1] == "2") {
			return nil
		}
		return fmt.Errorf("Progressing reason and StatefulSet replicas %q", out)
	})
}

// TestScaleDownCancelledMidDrain lowers the cluster and sets the replicas
// back as soon as the departing broker drains: whether its drain was
// cancelled or had completed (then it joins again as a new member), the
// cluster ends Ready at 3 with nothing acknowledged lost.
func TestScaleDownCancelledMidDrain(t *testing.T) {
	waitClusterReady(t, 2*time.Minute)
	l := startLoad(t, "e2e/cancel")
	defer l.w.Stop()
	scaleTo(t, 2)
	waitScaleDownStarted(t)
	scaleTo(t, 3)
	waitScaled(t, 3, 5*time.Minute)
	waitBalancedAndReplicated(t, 3, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

// TestDrainingBrokerKilled SIGKILLs the departing broker's process as its
// drain starts: it restarts, the operator asks it to drain again, and the
// scale-down completes with nothing acknowledged lost.
func TestDrainingBrokerKilled(t *testing.T) {
	scaleDownThroughAFault(t, "e2e/killdrain", func() {
		victim := brokerPods(t)[2]
		if err := syscall.Kill(containerPID(t, stack.SampleNamespace, victim.Name, "broker"), syscall.SIGKILL); err != nil {
			t.Logf("the departing broker was gone already: %v", err)
		}
	})
}

// TestOperatorKilledMidDrain SIGKILLs the operator as a scale-down
// starts: the restarted operator finds the drain under way (the broker
// answers its progress again) and completes the scale-down.
func TestOperatorKilledMidDrain(t *testing.T) {
	pods, err := env.k.CoreV1().Pods("picomq-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("operator pods: %v", err)
	}
	pid := containerPID(t, "picomq-system", pods.Items[0].Name, "manager")
	scaleDownThroughAFault(t, "e2e/opdrain", func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
}

// scaleDownThroughAFault lowers the cluster from 3 to 2 brokers under
// load, runs fault as the drain starts, and waits for the scale-down to
// complete anyway — slots balanced, nothing under-replicated — then goes
// back to 3 the same way; nothing acknowledged is lost.
func scaleDownThroughAFault(t *testing.T, load string, fault func()) {
	t.Helper()
	waitClusterReady(t, 2*time.Minute)
	l := startLoad(t, load)
	defer l.w.Stop()
	scaleTo(t, 2)
	waitScaleDownStarted(t)
	fault()
	waitScaled(t, 2, 5*time.Minute)
	waitBalancedAndReplicated(t, 2, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	scaleTo(t, 3)
	waitScaled(t, 3, 5*time.Minute)
	waitBalancedAndReplicated(t, 3, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

// TestScaleDownRefusedWhileABrokerIsDown pauses a broker (SIGSTOP: its
// process holds its sockets and answers nothing, as a hung node does),
// then lowers the cluster: the departing broker refuses to drain, since
// the two that would stay would have no running majority, and the
// operator holds the scale-down with that reason in its conditions. With
// the broker running again, the scale-down completes; then back to 3.
func TestScaleDownRefusedWhileABrokerIsDown(t *testing.T) {
	waitClusterReady(t, 2*time.Minute)
	ctx := context.Background()
	paused := brokerPods(t)[1]
	pid := containerPID(t, stack.SampleNamespace, paused.Name, "broker")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := func() { _ = syscall.Kill(pid, syscall.SIGCONT) } // gone already once its liveness probe restarted it
	defer resume()
	// Its slot Leases, renewed with its member Lease, run out at the
	// same time: the others then hold every slot.
	testwait.NoError(t, time.Minute, "demo-1's Leases run out", func() error {
		leases, err := env.k.CoordinationV1().Leases(stack.SampleNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, stack.SampleCluster+"-slot-") && l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, paused.Name+"~") {
				return fmt.Errorf("%s still held by %s", l.Name, *l.Spec.HolderIdentity)
			}
		}
		return nil
	})
	scaleTo(t, 2)
	testwait.NoError(t, time.Minute, "the scale-down held", func() error {
		out, err := kubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o",
			`jsonpath={.status.conditions[?(@.type=="Progressing")].reason}|{.status.conditions[?(@.type=="Degraded")].message}`)
		if err != nil {
			return err
		}
		reason, msg, _ := strings.Cut(out, "|")
		if reason != "ScaleDownBlocked" || !strings.Contains(msg, "demo-2 refused to drain") || !strings.Contains(msg, "DRAIN_REFUSED") {
			return fmt.Errorf("Progressing %q, Degraded %q", reason, msg)
		}
		return nil
	})
	if got := mustKubectl(t, "", "get", "statefulset", stack.SampleCluster, "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Fatalf("StatefulSet replicas %s while the departing broker refuses to drain", got)
	}
	resume()
	waitScaled(t, 2, 5*time.Minute)
	scaleTo(t, 3)
	waitScaled(t, 3, 5*time.Minute)
	waitBalancedAndReplicated(t, 3, 3*time.Minute)
}

// TestBrokerLostWithItsDiskIsRepaired deletes a broker's pod and its
// claim under load: the broker comes back on a new, empty volume as a new
// member, the old one is removed, and the copies it held are made again
// until nothing is under-replicated; nothing acknowledged is lost.
func TestBrokerLostWithItsDiskIsRepaired(t *testing.T) {
	waitClusterReady(t, 2*time.Minute)
	l := startLoad(t, "e2e/lostdisk")
	defer l.w.Stop()
	ctx := context.Background()
	old, err := env.k.CoreV1().PersistentVolumeClaims(stack.SampleNamespace).Get(ctx, "data-demo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, "", "delete", "pvc", "data-demo-1", "--wait=false")
	mustKubectl(t, "", "delete", "pod", "demo-1", "--wait=false")
	testwait.NoError(t, 3*time.Minute, "demo-1 on a new claim", func() error {
		c, err := env.k.CoreV1().PersistentVolumeClaims(stack.SampleNamespace).Get(ctx, "data-demo-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.UID == old.UID {
			return fmt.Errorf("still the old claim")
		}
		return nil
	})
	waitClusterReady(t, 3*time.Minute)
	waitBalancedAndReplicated(t, 3, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

// TestUpAfterACrashRecovers kills the supervisor outright (SIGKILL: the
// machine lost the process tree's root), then runs up again: the stack
// comes back from its folder — same cluster, same data.
func TestUpAfterACrashRecovers(t *testing.T) {
	out, code := cli(t, `{"before":"crash"}`+"\n", "append", "app/events")
	if code != 0 {
		t.Fatalf("append: exit %d: %s", code, out)
	}
	id := mustKubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", "jsonpath={.status.clusterID}")
	if err := syscall.Kill(env.state.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 30*time.Second, "the supervisor gone", func() error {
		if _, ok, _ := stack.ReadState(env.opts.StateDir); ok {
			return fmt.Errorf("still running")
		}
		return nil
	})
	start := time.Now()
	var exports bytes.Buffer
	if err := stack.Up(context.Background(), env.opts, &exports, os.Stderr); err != nil {
		t.Fatal(err)
	}
	t.Logf("up after a crash: ready in %s", time.Since(start).Round(100*time.Millisecond))
	s, ok, err := stack.ReadState(env.opts.StateDir)
	if err != nil || !ok || s.PID == env.state.PID {
		t.Fatalf("state after the second up: %+v %v %v", s, ok, err)
	}
	env.state = s
	// The control plane came back on new ports: a client of the old
	// ones would reach nothing.
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if env.k, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got := mustKubectl(t, "", "get", "streamcluster", stack.SampleCluster, "-o", "jsonpath={.status.clusterID}"); got != id {
		t.Errorf("cluster id %q after the crash, want %q: the brokers formed a new cluster", got, id)
	}
	// Exit 75 is the CLI's "retry shortly" (a slot between holders): a
	// script retries it, and so does this one, for a bounded while — the
	// data must be there, and every refusal is logged.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, code = cli(t, "", "read", "app/events", "--from", "0", "-o", "json")
		if code != 75 || time.Now().After(deadline) {
			break
		}
		t.Logf("read after the crash: retriable refusal, retrying: %s", strings.TrimSpace(out))
		time.Sleep(500 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, `{\"before\":\"crash\"}`) {
		t.Errorf("read after the crash: exit %d: %s", code, out)
	}
}

// TestAPIServerStoppedUnderLoad stops the stack's kube-apiserver (SIGSTOP:
// every request to it hangs, as to a control plane that is down) for
// -e2e.outage, 60 s, with the workload running: the brokers cannot renew
// their member Leases and serve on failsafe rounds every member confirms,
// so appends go on throughout, and once the API server is back (SIGCONT)
// the cluster is Ready again and nothing acknowledged is lost.
func TestAPIServerStoppedUnderLoad(t *testing.T) {
	l := startLoad(t, "e2e/outage")
	defer l.w.Stop()
	pid := apiserverPID(t)
	waitRenewalsFresh(t, time.Minute)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resuming kube-apiserver: %v", err)
			}
		}
	}
	defer resume()
	began := time.Now()
	acked := l.w.Acked()
	for time.Since(began) < *outage {
		l.waitAcked(10, 15*time.Second)
	}
	t.Logf("kube-apiserver stopped for %v: %d appends acknowledged meanwhile", time.Since(began).Round(time.Second), l.w.Acked()-acked)
	resume()
	waitClusterReady(t, 3*time.Minute)
	l.waitAcked(30, time.Minute)
	l.stopAndCheck()
}

// waitRenewalsFresh waits until every broker's member Lease was renewed
// within the last 2 s (two retry periods at the defaults) and the API
// server answers the listing within 250 ms: the outage must begin with
// renewals going through. An API server already too slow to renew on lets slots
// lapse at their renew deadline before it stops, and a failsafe round
// extends only slots still served — a slow control plane, another case
// than the stopped one this test is about.
func waitRenewalsFresh(t *testing.T, timeout time.Duration) {
	t.Helper()
	sel := ownership.LabelCluster + "=" + stack.SampleCluster + "," + ownership.LabelRole + "=" + ownership.RoleMember
	testwait.NoError(t, timeout, "every member Lease renewed in the last 2 s, the API server answering within 250 ms", func() error {
		asked := time.Now()
		list, err := env.k.CoordinationV1().Leases(stack.SampleNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if took := time.Since(asked); took > 250*time.Millisecond {
			return fmt.Errorf("the listing took %v", took.Round(time.Millisecond))
		}
		byName := map[string]coordinationv1.Lease{}
		for _, l := range list.Items {
			byName[l.Name] = l
		}
		for i := range env.state.Brokers {
			// (A broker removed by an earlier test leaves its Lease.)
			name := ownership.MemberLeaseName(stack.SampleCluster, stack.SampleCluster+"-"+strconv.Itoa(i))
			l, ok := byName[name]
			if !ok {
				return fmt.Errorf("no member Lease %s", name)
			}
			if l.Spec.RenewTime == nil {
				return fmt.Errorf("%s never renewed", l.Name)
			}
			if age := asked.Sub(l.Spec.RenewTime.Time); age > 2*time.Second {
				return fmt.Errorf("%s last renewed %v ago", l.Name, age.Round(time.Millisecond))
			}
		}
		return nil
	})
}

// outage is how long TestAPIServerStoppedUnderLoad keeps the API server
// stopped.
var outage = flag.Duration("e2e.outage", 60*time.Second, "how long TestAPIServerStoppedUnderLoad stops kube-apiserver")

// apiserverPID is the stack's kube-apiserver process: the one whose
// command line names the stack's own files.
func apiserverPID(t *testing.T) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if filepath.Base(args[0]) == "kube-apiserver" && strings.Contains(string(raw), env.opts.StateDir) {
			pid, err := strconv.Atoi(filepath.Base(d))
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no kube-apiserver process names %s", env.opts.StateDir)
	return 0
}
