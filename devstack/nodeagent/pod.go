package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/picomq/picomq/devstack/podnet"
)

// Timings of a pod's worker.
const (
	setUpRetry         = 2 * time.Second
	volumeRefreshEvery = 30 * time.Second
	// shutdownGrace is what containers get when the agent stops (the
	// stack goes down), as the kubelet's graceful node shutdown gives:
	// SIGTERM without preStop (the pods are not deleted), SIGKILL after.
	shutdownGrace = 20 * time.Second
)

// podWorker owns one pod: one goroutine (run) sets up its sandbox, starts
// its containers, reports its status and tears it down; the containers'
// own goroutines tell it when their state changed.
type podWorker struct {
	a   *Agent
	uid types.UID

	updates            chan *corev1.Pod // the newest spec; older ones are dropped
	changed            chan struct{}    // a container's state changed
	goneCh             chan struct{}    // the pod was deleted at once
	stopCh             chan struct{}    // the agent is stopping
	goneOnce, stopOnce sync.Once
	done               chan struct{}

	// Owned by run.
	pod        *corev1.Pod
	net        podnet.Pod
	hasNet     bool
	dir        string
	startTime  time.Time
	volumes    map[string]string // volume name → host path
	containers []*container
	waiting    [2]string // reason, message while the sandbox is not ready
	reported   *corev1.PodStatus
}

func newPodWorker(a *Agent, pod *corev1.Pod) *podWorker {
	return &podWorker{
		a: a, uid: pod.UID,
		updates: make(chan *corev1.Pod, 1),
		changed: make(chan struct{}, 1),
		goneCh:  make(chan struct{}),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// update hands the worker the pod's newest version.
func (w *podWorker) update(pod *corev1.Pod) {
	for {
		select {
		case w.updates <- pod:
			return
		default:
		}
		select {
		case <-w.updates:
		default:
		}
	}
}

func (w *podWorker) gone()     { w.goneOnce.Do(func() { close(w.goneCh) }) }
func (w *podWorker) shutdown() { w.stopOnce.Do(func() { close(w.stopCh) }); <-w.done }

// notify tells the worker that a container's state changed.
func (w *podWorker) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWorker) log() []any {
	return []any{"pod", w.pod.Namespace + "/" + w.pod.Name, "uid", string(w.uid)}
}

func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	w.pod = <-w.updates
	w.startTime = time.Now()
	w.dir = filepath.Join(w.a.opts.Dir, "pods", w.pod.Namespace+"_"+w.pod.Name+"_"+podnet.PodID(string(w.uid)))
	w.a.log.Info("pod bound here", append(w.log(), "node", w.pod.Spec.NodeName)...)
	if w.pod.DeletionTimestamp != nil {
		// Deleted while no agent ran (the stack was down): nothing of it
		// runs here, so its deletion completes at once.
		w.finish(ctx, true)
		return
	}

	// The sandbox: address, network, volumes. Retried until it is ready
	// (a claim not yet bound, a ConfigMap not yet created).
	for {
		err := w.setUp(ctx)
		if err == nil {
			break
		}
		w.waiting = [2]string{"ContainerCreating", err.Error()}
		w.a.log.Info("pod not ready to start", append(w.log(), "why", err.Error())...)
		w.report(ctx)
		select {
		case p := <-w.updates:
			w.pod = p
			if p.DeletionTimestamp != nil {
				w.finish(ctx, true)
				return
			}
		case <-w.goneCh:
			w.finish(ctx, false)
			return
		case <-w.stopCh:
			w.finish(ctx, false)
			return
		case <-time.After(setUpRetry):
		}
	}
	w.waiting = [2]string{}
	if len(w.pod.Spec.InitContainers) > 0 {
		w.waiting = [2]string{"InitContainersUnsupported", "the local stack's node agent does not run init containers"}
		w.a.event(w.pod, corev1.EventTypeWarning, "Unsupported", "init containers are not run by the local stack's node agent")
	} else {
		for i := range w.pod.Spec.Containers {
			c := newContainer(w, w.pod.Spec.Containers[i])
			w.containers = append(w.containers, c)
			go c.run()
		}
	}
	refresh := time.NewTicker(volumeRefreshEvery)
	defer refresh.Stop()
	for {
		w.report(ctx)
		select {
		case p := <-w.updates:
			w.pod = p
			if p.DeletionTimestamp != nil {
				grace := time.Duration(ptr.Deref(p.DeletionGracePeriodSeconds, 30)) * time.Second
				w.a.log.Info("pod deleted: stopping its containers", append(w.log(), "grace", grace.String())...)
				w.stopContainers(grace, true)
				w.finish(ctx, true)
				return
			}
		case <-w.goneCh:
			w.stopContainers(0, false)
			w.finish(ctx, false)
			return
		case <-w.stopCh:
			w.stopContainers(shutdownGrace, false)
			w.finish(ctx, false)
			return
		case <-w.changed:
		case <-refresh.C:
			if err := w.refreshVolumes(ctx); err != nil {
				w.a.log.Error(err, "refresh volumes", w.log()...)
			}
		}
	}
}

// setUp gives the pod its address, network namespace, files and volumes.
func (w *podWorker) setUp(ctx context.Context) error {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	if !w.hasNet {
		ip, err := w.a.ips.get()
		if err != nil {
			return err
		}
		n := podnet.Pod{ID: podnet.PodID(string(w.uid)), IP: ip}
		if err := w.a.opts.AddPodNetwork(n); err != nil {
			w.a.ips.put(ip)
			return err
		}
		w.net, w.hasNet = n, true
	}
	if err := w.writeNameFiles(); err != nil {
		return err
	}
	vols, err := w.setUpVolumes(ctx)
	if err != nil {
		return err
	}
	w.volumes = vols
	return nil
}

// hostname is the pod's host name, as the kubelet sets it.
func (w *podWorker) hostname() string {
	if w.pod.Spec.Hostname != "" {
		return w.pod.Spec.Hostname
	}
	return w.pod.Name
}

// writeNameFiles writes the pod's /etc/hosts, /etc/resolv.conf and
// /etc/hostname.
func (w *podWorker) writeNameFiles() error {
	d := w.a.opts.ClusterDomain
	ns := w.pod.Namespace
	host := w.hostname()
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if sub := w.pod.Spec.Subdomain; sub != "" {
		hosts += fmt.Sprintf("%s\t%s.%s.%s.svc.%s\t%s\n", w.net.IP, host, sub, ns, d, host)
	} else {
		hosts += fmt.Sprintf("%s\t%s\n", w.net.IP, host)
	}
	resolv := fmt.Sprintf("nameserver %s\nsearch %s.svc.%s svc.%s %s\noptions ndots:5\n", w.a.opts.DNS, ns, d, d, d)
	for name, body := range map[string]string{"hosts": hosts, "resolv.conf": resolv, "hostname": host + "\n"} {
		if err := os.WriteFile(filepath.Join(w.dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// view is what podStatus reports.
func (w *podWorker) view() podView {
	v := podView{hostIP: w.a.opts.NodeIP, startTime: w.startTime, waitingReason: w.waiting[0], waitingMessage: w.waiting[1]}
	if w.hasNet {
		v.podIP = w.net.IP.String()
	}
	if len(w.containers) == 0 {
		for _, c := range w.pod.Spec.Containers {
			v.containers = append(v.containers, containerView{name: c.Name, image: c.Image})
		}
	}
	for _, c := range w.containers {
		v.containers = append(v.containers, c.snapshot())
	}
	return v
}

// report patches the pod's status when it changed since the last report.
func (w *podWorker) report(ctx context.Context) {
	st := podStatus(w.pod, w.view(), time.Now())
	if w.reported != nil && equality.Semantic.DeepEqual(*w.reported, st) {
		return
	}
	raw, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return
	}
	// A merge patch: no resourceVersion to conflict with the controllers'
	// writes of the pod's metadata.
	_, err = w.a.client.CoreV1().Pods(w.pod.Namespace).Patch(ctx, w.pod.Name, types.MergePatchType, raw, metav1.PatchOptions{}, "status")
	if err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			w.a.log.Error(err, "report pod status", w.log()...)
		}
		return
	}
	w.reported = &st
}

// stopContainers stops every container within grace.
func (w *podWorker) stopContainers(grace time.Duration, preStop bool) {
	var wg sync.WaitGroup
	for _, c := range w.containers {
		wg.Add(1)
		go func() { defer wg.Done(); c.terminate(grace, preStop) }()
	}
	wg.Wait()
}

// finish removes the pod's network and files (not its logs); when the pod
// was deleted gracefully, it completes the deletion as the kubelet does.
func (w *podWorker) finish(ctx context.Context, deletePod bool) {
	if w.hasNet {
		w.a.opts.RemovePodNetwork(w.net)
		w.a.ips.put(w.net.IP)
		w.hasNet = false
	}
	os.RemoveAll(w.dir)
	if !deletePod {
		return
	}
	err := w.a.client.CoreV1().Pods(w.pod.Namespace).Delete(ctx, w.pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &w.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		w.a.log.Error(err, "complete the pod's deletion", w.log()...)
		return
	}
	w.a.log.Info("pod stopped and deleted", w.log()...)
}

// logPath is a container's log file: kept across restarts and pod
// incarnations, under the pod's name (`picomq dev logs POD`).
func (w *podWorker) logPath(container string) string {
	return LogPath(w.a.opts.Dir, w.pod.Namespace, w.pod.Name, container)
}

// LogPath is where the agent with state folder dir keeps a container's log.
func LogPath(dir, namespace, pod, container string) string {
	return filepath.Join(dir, "logs", namespace, pod, container+".log")
}

// baseEnv is what the kubelet gives every container before the pod's own
// variables.
func (w *podWorker) baseEnv() map[string]string {
	return map[string]string{
		"PATH":                          "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME":                      w.hostname(),
		"KUBERNETES_SERVICE_HOST":       w.a.opts.APIServerHost,
		"KUBERNETES_SERVICE_PORT":       w.a.opts.APIServerPort,
		"KUBERNETES_SERVICE_PORT_HTTPS": w.a.opts.APIServerPort,
	}
}

// withStatus is the pod as the downward API sees it once the sandbox
// exists (its address is not in the informer's copy yet).
func (w *podWorker) withStatus() *corev1.Pod {
	p := w.pod.DeepCopy()
	p.Status.PodIP = w.net.IP.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
	p.Status.HostIP = w.a.opts.NodeIP
	p.Status.HostIPs = []corev1.HostIP{{IP: w.a.opts.NodeIP}}
	return p
}

// lookups reads the ConfigMaps and Secrets of the pod's namespace.
func (w *podWorker) lookups(ctx context.Context) lookups {
	ns := w.pod.Namespace
	return lookups{
		configMap: func(name string) (*corev1.ConfigMap, error) {
			cm, err := w.a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return cm, err
		},
		secret: func(name string) (*corev1.Secret, error) {
			s, err := w.a.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return s, err
		},
	}
}

// imageFolder is where the binaries of image live.
func (a *Agent) imageFolder(image string) (string, error) {
	repo := image
	if i := strings.Index(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if slash, colon := strings.LastIndex(repo, "/"), strings.LastIndex(repo, ":"); colon > slash {
		repo = repo[:colon]
	}
	if dir, ok := a.opts.Images[repo]; ok {
		return dir, nil
	}
	known := make([]string, 0, len(a.opts.Images))
	for k := range a.opts.Images {
		known = append(known, k)
	}
	return "", fmt.Errorf("image %q: the local stack runs only the images it builds from this checkout (%s)", image, strings.Join(known, ", "))
}
