package controllers

// The envtest suite: a real kube-apiserver and etcd (no kubelet, no
// controller-manager: the tests patch StatefulSet status themselves), a
// manager per test restricted to the test's namespace, fakes at the edges
// (BrokerAdmin), and a real broker (cmd/broker, built here) for the Stream
// controller.
//
// Under -short none of that starts: the tests that need it skip (see
// needsEnvtest), the unit tests run alone, on a machine with no control
// plane. Without -short, a missing KUBEBUILDER_ASSETS fails the package.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	brokerclient "github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/controllers/brokeradmin"
)

var (
	restCfg   *rest.Config
	k8s       client.Client
	scheme    = k8sruntime.NewScheme()
	brokerBin string // the broker binary built by TestMain
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(streamsv1alpha1.AddToScheme(scheme))
}

func TestMain(m *testing.M) {
	flag.Parse()
	// Quiet unless PICOMQ_TEST_LOG is set: some tests make reconciles fail
	// on purpose.
	logOut := io.Discard
	if os.Getenv("PICOMQ_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	logf.SetLogger(zap.New(zap.WriteTo(logOut), zap.UseDevMode(true)))
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(runSuite(m))
}

// needsEnvtest skips a test that needs the apiserver (or the broker built
// by TestMain) under -short, where TestMain starts neither.
func needsEnvtest(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest: skipped under -short")
	}
}

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh); `go test -short` runs the unit tests alone")
		return 1
	}
	tmp, err := os.MkdirTemp("", "picomq-controllers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	brokerBin = filepath.Join(tmp, "broker")
	build := exec.Command("go", "build", "-o", brokerBin, "./cmd/broker")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cmd/broker:", err)
		return 1
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	restCfg, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		stopSharedBroker()
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	// Many managers and a thousand Streams: lift client-go's default 5 qps.
	restCfg.QPS, restCfg.Burst = 500, 1000
	k8s, err = client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// ---------------------------------------------------------------------------
// Per-test namespace and manager.

// newNamespace creates a namespace for one test. envtest runs no namespace
// controller, so it is left Terminating at the end; names never repeat.
func newNamespace(t *testing.T) string {
	t.Helper()
	needsEnvtest(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + strings.ToLower(rand.String(8))}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// harness is one running manager with both controllers, watching one
// namespace.
type harness struct {
	t      *testing.T
	ns     string
	opts   Options
	events *captureRecorder
	counts *reconcileCounter
	admin  *fakeAdmin
	mgr    ctrl.Manager
}

// startManager runs a manager for namespace ns. opts may set anything;
// the harness fills in the fake BrokerAdmin (unless opts has one), the
// event capture and the reconcile counter.
func startManager(t *testing.T, ns string, opts Options) *harness {
	t.Helper()
	return startManagerWith(t, ns, restCfg, opts)
}

// startManagerWith is startManager with the manager's own REST config
// (client rate limits, say).
func startManagerWith(t *testing.T, ns string, cfg *rest.Config, opts Options) *harness {
	t.Helper()
	return startManagerLogging(t, ns, cfg, opts, logf.Log.WithName(ns))
}

// startManagerLogging is startManagerWith logging to log.
func startManagerLogging(t *testing.T, ns string, cfg *rest.Config, opts Options, log logr.Logger) *harness {
	t.Helper()
	return startManagerIn(t, []string{ns}, cfg, opts, log)
}

// startManagerIn runs a manager watching namespaces (the operator's
// --namespaces), for the tests of Streams whose cluster is in another
// namespace; the harness's ns is the first.
func startManagerIn(t *testing.T, namespaces []string, cfg *rest.Config, opts Options, log logr.Logger) *harness {
	t.Helper()
	h := &harness{t: t, ns: namespaces[0], events: &captureRecorder{}, counts: &reconcileCounter{}}
	if opts.BrokerAdmin == nil {
		h.admin = newFakeAdmin()
		opts.BrokerAdmin = h.admin
	}
	if opts.ErrorBackoffBase == 0 {
		opts.ErrorBackoffBase = 100 * time.Millisecond
	}
	if opts.ErrorBackoffMax == 0 {
		opts.ErrorBackoffMax = 5 * time.Second
	}
	if opts.BrokerCallTimeout == 0 {
		opts.BrokerCallTimeout = 3 * time.Second
	}
	opts.SkipNameValidation = true
	opts.observe = h.counts.observe
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(namespaces),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 log,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.events.inner = mgr.GetEventRecorder(EventSource)
	opts.recorder = h.events
	ctx, cancel := context.WithCancel(context.Background())
	if err := Setup(ctx, mgr, opts); err != nil {
		cancel()
		t.Fatal(err)
	}
	h.opts = opts.withDefaults()
	h.mgr = mgr
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return h
}

// reconcileCounter counts reconciles per controller and object.
type reconcileCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *reconcileCounter) observe(controller, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[controller+"/"+key]++
}

func (c *reconcileCounter) get(controller, ns, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[controller+"/"+ns+"/"+name]
}

// captureRecorder records events in memory and passes them on to the
// manager's events.k8s.io recorder.
type captureRecorder struct {
	inner events.EventRecorder
	mu    sync.Mutex
	list  []capturedEvent
}

type capturedEvent struct {
	Object, Type, Reason, Note string
}

func (r *captureRecorder) Eventf(regarding, related k8sruntime.Object, eventtype, reason, action, note string, args ...any) {
	name := ""
	if o, ok := regarding.(metav1.Object); ok {
		name = o.GetName()
	}
	r.mu.Lock()
	r.list = append(r.list, capturedEvent{Object: name, Type: eventtype, Reason: reason, Note: fmt.Sprintf(note, args...)})
	r.mu.Unlock()
	if r.inner != nil {
		r.inner.Eventf(regarding, related, eventtype, reason, action, note, args...)
	}
}

// find returns the events about object with reason.
func (r *captureRecorder) find(object, reason string) []capturedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []capturedEvent
	for _, e := range r.list {
		if e.Object == object && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func (r *captureRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.list {
		fmt.Fprintf(&b, "  %s %s %s: %s\n", e.Object, e.Type, e.Reason, e.Note)
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Fake BrokerAdmin.

// fakeAdmin answers the StreamCluster controller's broker calls from
// tables the test sets.
type fakeAdmin struct {
	mu       sync.Mutex
	leader   string                                            // every broker's answer; "" for none
	slots    map[string]int32                                  // pod -> slots held (absent: not reported)
	cluster  string                                            // every broker's cluster id ("" : none reported)
	clusters map[string]string                                 // pod -> cluster id, over cluster
	voters   []string                                          // the metadata log's voters, as every broker reports them
	under    map[string]int32                                  // pod -> under-replicated objects (absent: not reported)
	down     map[string]bool                                   // pods that do not answer
	removed  map[string]string                                 // pod -> problem: removed from the cluster for good
	drain    func(pod string) (brokeradmin.DrainStatus, error) // nil: ErrNotSupported
	draining map[string]brokeradmin.DrainStatus                // what Status reports
	calls    []string                                          // "Drain demo-2", "CancelDrain demo-2", ...
	tier     map[string]wire.TierStatus                        // pod -> GET /v1/admin/tier (absent: 404)
}

func newFakeAdmin() *fakeAdmin {
	return &fakeAdmin{slots: map[string]int32{}, clusters: map[string]string{}, under: map[string]int32{},
		down: map[string]bool{}, removed: map[string]string{}, draining: map[string]brokeradmin.DrainStatus{}, tier: map[string]wire.TierStatus{}}
}

func (f *fakeAdmin) Status(_ context.Context, b brokeradmin.Broker) (brokeradmin.NodeStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[b.Pod] {
		// What brokeradmin.HTTP returns for a pod whose name does not
		// resolve.
		dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: strings.TrimPrefix(b.URL, "http://"), IsNotFound: true}}
		return brokeradmin.NodeStatus{}, fmt.Errorf("broker %s: %w", b, brokerclient.BrokerUnreachable.Wrap(dns, "endpoint", b.URL))
	}
	if problem, ok := f.removed[b.Pod]; ok {
		// What cmd/broker's serveRemoved answers: nothing of a member.
		return brokeradmin.NodeStatus{NodeID: b.Pod, RaftState: "Removed", ClusterID: f.cluster, MemberID: b.Pod + "~old",
			Removed: true, Problem: problem}, nil
	}
	st := brokeradmin.NodeStatus{NodeID: b.Pod, Leader: f.leader, Ready: f.leader != "", RaftState: "Follower", Drain: f.draining[b.Pod]}
	if f.leader == b.Pod {
		st.RaftState = "Leader"
	}
	if n, ok := f.slots[b.Pod]; ok {
		st.SlotsHeld = &n
	}
	st.ClusterID = f.cluster
	if id, ok := f.clusters[b.Pod]; ok {
		st.ClusterID = id
	}
	st.Voters = slices.Clone(f.voters)
	if n, ok := f.under[b.Pod]; ok {
		st.UnderReplicated = &n
	}
	return st, nil
}

func (f *fakeAdmin) Drain(_ context.Context, b brokeradmin.Broker) (brokeradmin.DrainStatus, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "Drain "+b.Pod)
	fn := f.drain
	f.mu.Unlock()
	if fn == nil {
		return brokeradmin.DrainStatus{}, fmt.Errorf("broker %s: POST %s answered 404: %w", b, brokeradmin.DrainPath, brokeradmin.ErrNotSupported)
	}
	ds, err := fn(b.Pod)
	if err == nil {
		f.mu.Lock()
		f.draining[b.Pod] = ds
		f.mu.Unlock()
	}
	return ds, err
}

func (f *fakeAdmin) CancelDrain(_ context.Context, b brokeradmin.Broker) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "CancelDrain "+b.Pod)
	delete(f.draining, b.Pod)
	return nil
}

// Tier implements brokeradmin.TierAdmin.
func (f *fakeAdmin) Tier(_ context.Context, b brokeradmin.Broker) (wire.TierStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Tier "+b.Pod)
	t, ok := f.tier[b.Pod]
	if !ok {
		return wire.TierStatus{}, fmt.Errorf("broker %s: GET %s answered 404: %w", b, brokeradmin.TierPath, brokeradmin.ErrNotSupported)
	}
	return t, nil
}

func (f *fakeAdmin) set(fn func(f *fakeAdmin)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeAdmin) called(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == call {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------
// A real broker.

// brokerProc is a cmd/broker process on a loopback port.
type brokerProc struct {
	URL string
	cmd *exec.Cmd
	dir string
}

var (
	sharedOnce   sync.Once
	sharedBroker *brokerProc
	sharedErr    error
)

// shared returns the broker the Stream tests share (each uses its own
// stream names), started on first use.
func shared(t *testing.T) *brokerProc {
	t.Helper()
	needsEnvtest(t)
	sharedOnce.Do(func() { sharedBroker, sharedErr = startBroker() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedBroker
}

func stopSharedBroker() {
	if sharedBroker != nil {
		sharedBroker.stop()
	}
}

// startBroker runs the broker built by TestMain on a free loopback port
// with a fresh data directory and waits until it is ready.
func startBroker() (*brokerProc, error) {
	dir, err := os.MkdirTemp("", "picomq-broker-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(brokerBin, "--data-dir", filepath.Join(dir, "data"), "--listen", addr, "--node-id", "broker-0", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &brokerProc{URL: "http://" + addr, cmd: cmd, dir: dir}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get(b.URL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		b.stop()
		return nil, errors.New("the broker did not become ready in 30s")
	}
	return b, nil
}

func (b *brokerProc) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(b.dir)
}

// closedURL is an http URL on which nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// logLines is a logger that keeps every line, for tests that count what
// the controllers log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 0})
}

// count is how many lines hold every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if containsAll(line, subs...) {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------
// Waiting.

// consistently checks cond every 25ms for d and fails the test at its
// first error: for what a test measures does not happen for a period.
func consistently(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	var failed error
	_ = wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, d, true, func(context.Context) (bool, error) {
		failed = cond()
		return failed != nil, nil
	})
	if failed != nil {
		_, file, line, _ := runtime.Caller(1)
		t.Fatalf("%s:%d: not true for %s: %v", filepath.Base(file), line, d, failed)
	}
}

// settle waits until count stops changing for a window (at most 10s): the
// reconciles that earlier changes enqueued have run.
func settle(t *testing.T, window time.Duration, count func() int) {
	t.Helper()
	last := count()
	if err := wait.PollUntilContextTimeout(context.Background(), window, 10*time.Second, false, func(context.Context) (bool, error) {
		now := count()
		done := now == last
		last = now
		return done, nil
	}); err != nil {
		t.Fatalf("still changing after 10s (%d)", last)
	}
}

// get reads obj fresh from the apiserver.
func get(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// condition returns the condition typ of conds, or a zero one.
func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// expectEvents waits until n events with reason (and type typ, unless "")
// were recorded about object, then checks that no more follow shortly: an
// event is recorded after the status write it reports, so a test that saw
// the status may not see the event yet.
func (h *harness) expectEvents(object, reason, typ string, n int) {
	h.t.Helper()
	count := func() int {
		k := 0
		for _, e := range h.events.find(object, reason) {
			if typ == "" || e.Type == typ {
				k++
			}
		}
		return k
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return count() >= n, nil
	})
	// No more follow for a while (a duplicate would come right after).
	_ = wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, 150*time.Millisecond, false, func(context.Context) (bool, error) {
		return count() > n, nil
	})
	if got := count(); got != n {
		h.t.Errorf("%d %s %s events about %s, want %d; events:\n%s", got, typ, reason, object, n, h.events)
	}
}
