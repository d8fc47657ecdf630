package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/picomq/picomq/devstack/podinit"
)

// Restart back-off: doubling from restartBackoff up to maxBackoff, reset
// after a run of backoffReset, as the kubelet does (whose first step is
// 10 s; a development stack waits less).
const (
	restartBackoff = 2 * time.Second
	maxBackoff     = 5 * time.Minute
	backoffReset   = 10 * time.Minute
	// maxMessage bounds a termination message, as the kubelet's 4096.
	maxMessage = 4096
)

// container runs one container of a pod: its goroutine (run) starts the
// process, probes it, restarts it per the pod's restart policy, and
// publishes its state for the pod's status.
type container struct {
	w    *podWorker
	spec corev1.Container

	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu   sync.Mutex
	view containerView
	proc *os.Process // the running process, nil between runs
}

func newContainer(w *podWorker, spec corev1.Container) *container {
	return &container{
		w: w, spec: spec,
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
		view:   containerView{name: spec.Name, image: spec.Image},
	}
}

func (c *container) snapshot() containerView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view
}

func (c *container) set(f func(v *containerView)) {
	c.mu.Lock()
	f(&c.view)
	c.mu.Unlock()
	c.w.notify()
}

func (c *container) stopping() bool {
	select {
	case <-c.stopCh:
		return true
	default:
		return false
	}
}

func (c *container) run() {
	defer close(c.done)
	failures := 0
	for !c.stopping() {
		began := time.Now()
		exit, err := c.runOnce()
		if c.stopping() {
			return
		}
		if err != nil {
			c.w.a.event(c.w.pod, corev1.EventTypeWarning, "Failed", "container %s: %v", c.spec.Name, err)
			c.set(func(v *containerView) {
				v.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}}
			})
		} else if !restarts(c.w.pod.Spec.RestartPolicy, exit) {
			return
		}
		if time.Since(began) > backoffReset {
			failures = 0
		}
		delay := min(restartBackoff<<failures, maxBackoff)
		failures = min(failures+1, 20)
		if err == nil {
			c.set(func(v *containerView) {
				v.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.spec.Name, c.w.pod.Name),
				}}
			})
			c.w.a.event(c.w.pod, corev1.EventTypeWarning, "BackOff", "Back-off %s restarting container %s", delay, c.spec.Name)
		}
		select {
		case <-c.stopCh:
			return
		case <-time.After(delay):
		}
		c.set(func(v *containerView) { v.restarts++ })
	}
}

// restarts says whether a container that exited with code is started again.
func restarts(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// runOnce starts the process, probes it and waits for its end.
func (c *container) runOnce() (int32, error) {
	cmd, termLog, err := c.command()
	if err != nil {
		return 0, err
	}
	logf, err := openLog(c.w.logPath(c.spec.Name))
	if err != nil {
		return 0, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return 0, err
	}
	pidFile := filepath.Join(c.w.dir, c.spec.Name+".pid")
	RecordPID(pidFile, cmd.Process.Pid)
	started := metav1.Now()
	c.mu.Lock()
	c.proc = cmd.Process
	c.mu.Unlock()
	c.set(func(v *containerView) {
		v.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
		v.containerID = fmt.Sprintf("picomq-dev://%d", cmd.Process.Pid)
		v.ready, v.started = false, c.spec.StartupProbe == nil
	})
	c.w.a.event(c.w.pod, corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)

	probes, stopProbes := context.WithCancel(context.Background())
	go c.probe(probes, cmd.Process)
	werr := cmd.Wait()
	stopProbes()
	os.Remove(pidFile)
	c.mu.Lock()
	c.proc = nil
	c.mu.Unlock()

	code, reason := exitOf(cmd.ProcessState, werr)
	msg := readMessage(termLog)
	if msg == "" && code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = tail(c.w.logPath(c.spec.Name), 80, 2048)
	}
	term := &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: msg,
		StartedAt: started, FinishedAt: metav1.Now(), ContainerID: fmt.Sprintf("picomq-dev://%d", cmd.Process.Pid),
	}
	c.set(func(v *containerView) {
		v.state = corev1.ContainerState{Terminated: term}
		v.last = corev1.ContainerState{Terminated: term}
		v.ready, v.everTerminated = false, true
	})
	c.w.a.log.Info("container exited", append(c.w.log(), "container", c.spec.Name, "code", code, "reason", reason)...)
	return code, nil
}

func exitOf(ps *os.ProcessState, err error) (int32, string) {
	if ps == nil {
		return 128, "Error"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int32(128 + ws.Signal()), "Error"
	}
	if code := ps.ExitCode(); code != 0 {
		return int32(code), "Error"
	}
	if err != nil {
		return 1, "Error"
	}
	return 0, "Completed"
}

// command builds the container's process: its binary from the image's
// folder, its environment, and its mounts through podinit.
func (c *container) command() (*exec.Cmd, string, error) {
	w := c.w
	folder, err := w.a.imageFolder(c.spec.Image)
	if err != nil {
		return nil, "", err
	}
	if len(c.spec.Command) == 0 {
		return nil, "", fmt.Errorf("container %s has no command: the local stack cannot read an image's entrypoint", c.spec.Name)
	}
	exe := filepath.Join(folder, filepath.Base(c.spec.Command[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := w.withStatus()
	env, err := containerEnv(pod, &c.spec, w.baseEnv(), w.lookups(ctx))
	if err != nil {
		return nil, "", err
	}
	vars := envMap(env)
	args := []string{c.spec.Command[0]}
	for _, a := range append(append([]string{}, c.spec.Command[1:]...), c.spec.Args...) {
		args = append(args, expand(a, vars))
	}

	uid, gid, groups := identity(pod, &c.spec, w.a.opts.ImageUser)
	termLog := filepath.Join(w.dir, c.spec.Name+".termination-log")
	if err := os.WriteFile(termLog, nil, 0o666); err != nil {
		return nil, "", err
	}
	_ = os.Chmod(termLog, 0o666)
	termPath := c.spec.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	mounts := []podinit.Mount{
		{Source: filepath.Join(w.dir, "hosts"), Target: "/etc/hosts", ReadOnly: true},
		{Source: filepath.Join(w.dir, "resolv.conf"), Target: "/etc/resolv.conf", ReadOnly: true},
		{Source: filepath.Join(w.dir, "hostname"), Target: "/etc/hostname", ReadOnly: true},
		{Source: termLog, Target: termPath},
	}
	for _, m := range c.spec.VolumeMounts {
		src, ok := w.volumes[m.Name]
		if !ok {
			return nil, "", fmt.Errorf("volume mount %s: no volume %q in the pod", m.MountPath, m.Name)
		}
		if m.SubPath != "" {
			src = filepath.Join(src, m.SubPath)
			if err := os.MkdirAll(src, 0o755); err != nil {
				return nil, "", err
			}
		}
		mounts = append(mounts, podinit.Mount{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	sc := c.spec.SecurityContext
	spec := podinit.Spec{
		Exe: exe, Args: args, Env: env, WorkingDir: c.spec.WorkingDir,
		NetNS:        w.net.Path(),
		Hostname:     w.hostname(),
		Mounts:       mounts,
		ReadOnlyRoot: sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false),
		UID:          uid, GID: gid, Groups: groups,
		NoNewPrivs: sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
	}
	cmd, err := podinit.Command(w.a.opts.Helper, spec, filepath.Join(w.dir, c.spec.Name+".json"))
	return cmd, termLog, err
}

// identity is the user, group and supplementary groups a container runs
// as: the container's securityContext over the pod's; the pod's fsGroup
// and supplementalGroups join the groups.
func identity(pod *corev1.Pod, c *corev1.Container, imageUser int64) (uid, gid *int64, groups []int64) {
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid = psc.RunAsUser, psc.RunAsGroup
		if psc.FSGroup != nil {
			groups = append(groups, *psc.FSGroup)
		}
		groups = append(groups, psc.SupplementalGroups...)
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
	}
	if uid == nil && nonRoot(pod, c) {
		uid = ptr.To(imageUser)
	}
	if uid != nil && gid == nil {
		gid = ptr.To(*uid) // the image's user's group (distroless: 65532:65532)
	}
	if gid != nil {
		groups = append([]int64{*gid}, groups...)
	}
	return uid, gid, groups
}

// nonRoot is runAsNonRoot, the container's over the pod's.
func nonRoot(pod *corev1.Pod, c *corev1.Container) bool {
	if sc := c.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
		return *sc.RunAsNonRoot
	}
	psc := pod.Spec.SecurityContext
	return psc != nil && ptr.Deref(psc.RunAsNonRoot, false)
}

// terminate stops the container for good: the preStop hook (when
// preStop: a pod deleted, not a node shutting down), then SIGTERM to its
// process group, then SIGKILL when grace runs out.
func (c *container) terminate(grace time.Duration, preStop bool) {
	c.stopOnce.Do(func() { close(c.stopCh) })
	deadline := time.Now().Add(grace)
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p != nil && grace > 0 && preStop {
		c.preStop(deadline)
	}
	c.mu.Lock()
	p = c.proc
	c.mu.Unlock()
	if p != nil {
		if grace > 0 {
			_ = syscall.Kill(-p.Pid, syscall.SIGTERM)
		}
		select {
		case <-c.done:
			return
		case <-time.After(time.Until(deadline)):
		}
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	<-c.done
}

// kill ends the running process (a failed liveness or startup probe):
// SIGTERM, SIGKILL after the pod's grace period.
func (c *container) kill(p *os.Process, why string) {
	c.w.a.event(c.w.pod, corev1.EventTypeNormal, "Killing", "Container %s %s, will be restarted", c.spec.Name, why)
	_ = syscall.Kill(-p.Pid, syscall.SIGTERM)
	grace := time.Duration(ptr.Deref(c.w.pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	time.AfterFunc(grace, func() { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) })
}

func (c *container) preStop(deadline time.Time) {
	l := c.spec.Lifecycle
	if l == nil || l.PreStop == nil {
		return
	}
	h := l.PreStop
	switch {
	case h.Sleep != nil:
		d := min(time.Duration(h.Sleep.Seconds)*time.Second, time.Until(deadline))
		select {
		case <-c.done:
		case <-time.After(d):
		}
	case h.HTTPGet != nil:
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		_, _ = c.httpGet(ctx, h.HTTPGet)
	default:
		c.w.a.event(c.w.pod, corev1.EventTypeWarning, "Unsupported", "preStop exec hooks are not run by the local stack's node agent")
	}
}

// probe runs the container's probes for one run of its process.
func (c *container) probe(ctx context.Context, p *os.Process) {
	if sp := c.spec.StartupProbe; sp != nil {
		if !c.probeLoop(ctx, sp, true, func(bool) {}) {
			if ctx.Err() == nil {
				c.kill(p, "failed startup probe")
			}
			return
		}
		c.set(func(v *containerView) { v.started = true })
	}
	if lp := c.spec.LivenessProbe; lp != nil {
		go func() {
			if !c.probeLoop(ctx, lp, false, func(bool) {}) && ctx.Err() == nil {
				c.kill(p, "failed liveness probe")
			}
		}()
	}
	if rp := c.spec.ReadinessProbe; rp != nil {
		c.probeLoop(ctx, rp, false, func(ok bool) {
			c.set(func(v *containerView) { v.ready = ok })
		})
		return
	}
	c.set(func(v *containerView) { v.ready = true })
}

// probeLoop runs p every period. untilSuccess: it returns true at the
// first success (a startup probe). Otherwise it runs until ctx ends,
// telling result of each settled state, and returns false when the
// failure threshold is reached (liveness).
func (c *container) probeLoop(ctx context.Context, p *corev1.Probe, untilSuccess bool, result func(bool)) bool {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	failThreshold := max(p.FailureThreshold, 1)
	okThreshold := max(p.SuccessThreshold, 1)
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	if p.FailureThreshold == 0 {
		failThreshold = 3
	}
	sleep(ctx, time.Duration(p.InitialDelaySeconds)*time.Second)
	fails, oks := int32(0), int32(0)
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.probeOnce(pctx, p)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			fails, oks = 0, oks+1
			if oks >= okThreshold {
				if untilSuccess {
					return true
				}
				result(true)
			}
		} else {
			oks, fails = 0, fails+1
			if fails >= failThreshold {
				c.w.a.event(c.w.pod, corev1.EventTypeWarning, "Unhealthy", "Probe of container %s failed: %v", c.spec.Name, err)
				result(false)
				if c.spec.ReadinessProbe != p {
					return false
				}
			}
		}
		sleep(ctx, period)
	}
	return false
}

func (c *container) probeOnce(ctx context.Context, p *corev1.Probe) error {
	switch {
	case p.HTTPGet != nil:
		code, err := c.httpGet(ctx, p.HTTPGet)
		if err != nil {
			return err
		}
		if code < 200 || code >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", code)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := c.port(p.TCPSocket.Port)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(c.w.net.IP.String(), strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return errors.New("exec and gRPC probes are not run by the local stack's node agent")
}

var probeClient = &http.Client{
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
	// The kubelet follows no redirect to another host; none here.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func (c *container) httpGet(ctx context.Context, g *corev1.HTTPGetAction) (int, error) {
	port, err := c.port(g.Port)
	if err != nil {
		return 0, err
	}
	host := g.Host
	if host == "" {
		host = c.w.net.IP.String()
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+g.Path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// port resolves a probe's port, by number or by the container's port name.
func (c *container) port(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no port named %q in container %s", p.StrVal, c.spec.Name)
}

func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

func readMessage(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxMessage))
	return string(b)
}

// tail is the last lines of a file, at most max bytes.
func tail(path string, lines, maxBytes int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-int64(maxBytes), 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	if off > 0 { // drop the line the cut began in
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' && i != len(b)-1 {
			n++
			if n == lines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
