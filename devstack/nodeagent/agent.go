// Package nodeagent stands in for the kubelet in the local stack
// (`picomq dev`): one process that registers K Nodes, keeps their Ready
// condition and node Leases renewed, and runs every Pod the scheduler
// binds to them as local processes — each pod in a network namespace of
// its own (devstack/podnet), each container through devstack/podinit in a
// mount namespace holding its volumes. It provisions the PersistentVolumes
// of the stack's default StorageClass as directories, runs probes,
// restarts containers with back-off, stops them with preStop, SIGTERM and
// SIGKILL after the grace period, and keeps their logs in files.
//
// It runs in the pod network's router namespace, where pod addresses are
// routed. What it does not do, and says so in pod status or events:
// init containers, exec probes, image pulls (an image maps to binaries
// built from this checkout), resource limits (no cgroups).
package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/picomq/picomq/devstack/clusterdns"
	"github.com/picomq/picomq/devstack/podnet"
)

// Options configure the agent.
type Options struct {
	Client kubernetes.Interface
	// Nodes are the names of the nodes it registers.
	Nodes []string
	// NodeIP is the address the nodes report (the router's).
	NodeIP string
	// Dir holds the pods' files (Dir/pods), the volumes (Dir/volumes)
	// and the containers' logs (Dir/logs/<namespace>/<pod>/<container>.log).
	Dir string
	// Images maps an image repository (no tag) to the folder holding its
	// binaries: a container's command /broker runs <folder>/broker.
	Images map[string]string
	// PodIPs is the range pod addresses come from.
	PodIPs netip.Prefix
	// DNS is the pods' name server, which the agent serves (clusterdns)
	// on DNS:53; ClusterDomain the cluster's domain.
	DNS           string
	ClusterDomain string
	// ImageUser is the user a container whose pod says runAsNonRoot but
	// names no user runs as: the image's USER (the Dockerfile's 65532).
	ImageUser int64
	// APIServerHost and APIServerPort are what the pods reach the API
	// server at (KUBERNETES_SERVICE_HOST/PORT: no kube-proxy serves the
	// kubernetes Service's ClusterIP here). Their CA reaches them in the
	// service-account volume (the kube-root-ca.crt ConfigMap).
	APIServerHost, APIServerPort string
	// Helper is the argv prefix that runs podinit.Main on a spec file.
	Helper []string
	// Network makes and removes pods' networks (podnet's functions; tests
	// replace them).
	AddPodNetwork    func(podnet.Pod) error
	RemovePodNetwork func(podnet.Pod)
	// AddServiceAddress makes a ClusterIP local to the agent's namespace
	// (podnet.AddLocalAddress in the stack; nil: do nothing).
	AddServiceAddress func(netip.Addr) error
	Logger            logr.Logger
}

// Agent is a running node agent.
type Agent struct {
	opts   Options
	client kubernetes.Interface
	log    logr.Logger
	events record.EventRecorder

	factory informers.SharedInformerFactory
	pvcs    cache.Indexer
	pvs     cache.Indexer

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	ips     *ipPool
	nodes   map[string]bool
}

// Run runs the agent until ctx ends; then it stops every pod's containers
// (SIGTERM, SIGKILL after five seconds: the stack is going down).
func Run(ctx context.Context, o Options) error {
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
	if o.AddPodNetwork == nil {
		o.AddPodNetwork, o.RemovePodNetwork = podnet.AddPod, podnet.RemovePod
	}
	for _, d := range []string{"pods", "volumes", "logs"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return err
		}
	}
	a := &Agent{
		opts: o, client: o.Client, log: o.Logger,
		workers: map[types.UID]*podWorker{},
		ips:     newIPPool(o.PodIPs),
		nodes:   map[string]bool{},
	}
	for _, n := range o.Nodes {
		a.nodes[n] = true
	}
	a.cleanUpEarlierRun()

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	a.events = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "picomq-dev-agent"})

	a.factory = informers.NewSharedInformerFactory(o.Client, 10*time.Minute)
	pods := a.factory.Core().V1().Pods().Informer()
	a.pvcs = a.factory.Core().V1().PersistentVolumeClaims().Informer().GetIndexer()
	a.pvs = a.factory.Core().V1().PersistentVolumes().Informer().GetIndexer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.podChanged(ctx, obj) },
		UpdateFunc: func(_, obj any) { a.podChanged(ctx, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.podGone(p.UID)
			}
		},
	})
	services := a.factory.Core().V1().Services().Informer()
	slices := a.factory.Discovery().V1().EndpointSlices().Informer()
	a.factory.Start(ctx.Done())
	a.factory.WaitForCacheSync(ctx.Done())
	if o.DNS != "" {
		dns := clusterdns.New(informerSource{pods: pods.GetIndexer(), services: services.GetIndexer()}, clusterdns.Options{Domain: o.ClusterDomain})
		if _, _, err := dns.Serve(ctx, net.JoinHostPort(o.DNS, "53")); err != nil {
			return fmt.Errorf("nodeagent: cluster DNS on %s: %w", o.DNS, err)
		}
	}

	var wg sync.WaitGroup
	for _, n := range o.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); a.runNode(ctx, n) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); a.runProvisioner(ctx) }()
	go func() { defer wg.Done(); a.runServices(ctx, services.GetIndexer(), slices.GetIndexer()) }()
	a.log.Info("node agent running", "nodes", o.Nodes, "podIPs", o.PodIPs.String())
	<-ctx.Done()
	a.factory.Shutdown()
	a.mu.Lock()
	workers := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		workers = append(workers, w)
	}
	a.mu.Unlock()
	for _, w := range workers {
		w.shutdown()
	}
	wg.Wait()
	return nil
}

// informerSource is what the cluster DNS answers from.
type informerSource struct{ pods, services cache.Indexer }

func (s informerSource) Pods() []*corev1.Pod {
	objs := s.pods.List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

func (s informerSource) Services() []*corev1.Service {
	objs := s.services.List()
	out := make([]*corev1.Service, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Service))
	}
	return out
}

// podChanged hands a pod bound to one of the agent's nodes to its worker,
// starting one for a pod it has not seen.
func (a *Agent) podChanged(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !a.nodes[pod.Spec.NodeName] {
		return
	}
	a.mu.Lock()
	w, ok := a.workers[pod.UID]
	if !ok {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			a.mu.Unlock()
			return
		}
		w = newPodWorker(a, pod)
		a.workers[pod.UID] = w
		go func() {
			w.run(ctx)
			a.mu.Lock()
			delete(a.workers, pod.UID)
			a.mu.Unlock()
		}()
	}
	a.mu.Unlock()
	w.update(pod)
}

// podGone stops a pod deleted without a grace period (or whose deletion
// the worker did not see).
func (a *Agent) podGone(uid types.UID) {
	a.mu.Lock()
	w := a.workers[uid]
	a.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

// cleanUpEarlierRun kills the containers an earlier agent left running
// (the stack crashed), removes their networks, and forgets their files
// but the logs: the pods are run again from their specs.
func (a *Agent) cleanUpEarlierRun() {
	KillEarlierContainers(a.opts.Dir)
	podnet.RemoveStalePods()
	entries, _ := os.ReadDir(filepath.Join(a.opts.Dir, "pods"))
	for _, e := range entries {
		os.RemoveAll(filepath.Join(a.opts.Dir, "pods", e.Name()))
	}
}

// KillEarlierContainers kills the containers the agent with state folder
// dir recorded and left running (it died, or was killed).
func KillEarlierContainers(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "pods", "*", "*.pid"))
	for _, f := range files {
		KillRecorded(f)
	}
}

// RecordPID writes a process's id and start time, so that a later agent
// (or supervisor) kills that process and no other that reused its id.
func RecordPID(path string, pid int) {
	if st := procStart(pid); st != "" {
		_ = os.WriteFile(path, []byte(strconv.Itoa(pid)+" "+st), 0o600)
	}
}

// KillRecorded kills the process group (and the process) RecordPID
// recorded in path, if that process still runs.
func KillRecorded(path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pidText, start, _ := strings.Cut(strings.TrimSpace(string(raw)), " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 1 || procStart(pid) != start {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// procStart is a process's start time in clock ticks since boot (field 22
// of /proc/<pid>/stat), "" when it is gone.
func procStart(pid int) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// memTotal is the machine's memory in bytes (0 when unknown).
func memTotal() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ipPool hands out pod addresses round robin, so that an address freed
// is the last one reused (a stale peer then reaches nobody rather than
// another pod).
type ipPool struct {
	mu     sync.Mutex
	prefix netip.Prefix
	next   netip.Addr
	used   map[netip.Addr]bool
}

func newIPPool(p netip.Prefix) *ipPool {
	return &ipPool{prefix: p.Masked(), next: p.Masked().Addr().Next(), used: map[netip.Addr]bool{}}
}

func (p *ipPool) get() (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.next
	for {
		ip := p.next
		p.next = p.next.Next()
		if !p.prefix.Contains(p.next) {
			p.next = p.prefix.Addr().Next()
		}
		if !p.used[ip] && p.prefix.Contains(ip) {
			p.used[ip] = true
			return ip, nil
		}
		if p.next == start {
			return netip.Addr{}, fmt.Errorf("no pod address left in %s", p.prefix)
		}
	}
}

func (p *ipPool) put(ip netip.Addr) {
	p.mu.Lock()
	delete(p.used, ip)
	p.mu.Unlock()
}

// event records an event on pod.
func (a *Agent) event(pod *corev1.Pod, kind, reason, format string, args ...any) {
	if a.events != nil {
		a.events.Eventf(pod, kind, reason, format, args...)
	}
}
