package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/devstack/controlplane"
	"github.com/picomq/picomq/devstack/nodeagent"
	"github.com/picomq/picomq/devstack/podnet"
)

// SampleCluster is the StreamCluster the stack applies from config/samples.
const (
	SampleCluster   = "demo"
	SampleNamespace = "default"
	// readyTimeout bounds each wait of a start: nodes, operator, cluster.
	readyTimeout = 5 * time.Minute
)

// Run is the supervisor: it brings the stack up, publishes its state,
// and keeps it running until ctx ends, then stops everything it started.
// cpBin is the control plane's folder (Build's answer).
func Run(ctx context.Context, o Options, cpBin string, progress io.Writer) (err error) {
	if err := o.defaults(); err != nil {
		return err
	}
	if err := podnet.Check(); err != nil {
		return err
	}
	p := paths{o.StateDir}
	for _, d := range []string{p.logs(), p.agent(), p.controlPlane()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := lockPID(p); err != nil {
		return err
	}
	defer os.Remove(p.pidFile())
	state := State{PID: os.Getpid(), Phase: "starting", Kubeconfig: p.kubeconfig(), Kubectl: filepath.Join(cpBin, "kubectl"),
		Brokers: o.Brokers, Nodes: o.Nodes, Since: time.Now()}
	step := func(format string, args ...any) {
		state.Message = fmt.Sprintf(format, args...)
		fmt.Fprintf(progress, "picomq dev: %s\n", state.Message)
		_ = writeState(p, state)
	}
	defer func() {
		state.Phase, state.Message = "stopped", ""
		if err != nil {
			state.Message = err.Error()
		}
		_ = writeState(p, state)
	}()

	step("pod network (namespaces and veth links on 198.18.0.0/15)")
	network := podnet.DefaultConfig()
	killAgentPods(p) // containers a crashed stack left behind
	if err := network.SetUp(); err != nil {
		return err
	}
	defer func() {
		podnet.RemoveStalePods()
		network.TearDown()
	}()

	step("control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)")
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Dir: p.controlPlane(), BinDir: cpBin, Address: network.HostIP.String(), ServiceCIDR: network.Services.String(),
	})
	if err != nil {
		return err
	}
	defer cp.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return err
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	step("node agent (%d nodes)", o.Nodes)
	agent, err := startAgent(p, o, cp, network)
	if err != nil {
		return err
	}
	defer stopProcess(agent, 90*time.Second)
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()
	if err := waitNodes(ctx, k, o.Nodes, agentDone); err != nil {
		return fmt.Errorf("nodes: %w (log %s)", err, filepath.Join(p.logs(), "agent.log"))
	}

	kubectl := func(args ...string) error {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, state.Kubectl, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
		cmd.Dir = o.Checkout
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
		}
		return nil
	}
	step("operator (config/default)")
	if err := applyWithRetry(ctx, kubectl, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(o.Checkout, "config", "default")); err != nil {
		return err
	}
	if err := kubectl("wait", "--for=condition=Available", "--timeout="+readyTimeout.String(), "-n", "picomq-system", "deployment/picomq-controller-manager"); err != nil {
		return fmt.Errorf("the operator did not become available: %w", err)
	}

	// The samples are applied by the first up of a state folder only: a
	// later one finds the user's cluster as the user left it (edited,
	// scaled, its Streams deleted), as a cluster that restarts would.
	samples, err := sampleKustomization(p, o)
	if err != nil {
		return err
	}
	if kubectl("get", "-n", SampleNamespace, "streamcluster/"+SampleCluster) != nil {
		step("samples (StreamCluster %s of %d brokers, its Streams)", SampleCluster, o.Brokers)
		if err := applyWithRetry(ctx, kubectl, "apply", "-k", samples); err != nil {
			return err
		}
	} else {
		step("StreamCluster %s (kept from the last run)", SampleCluster)
	}
	if err := kubectl("wait", "--for=condition=Ready", "--timeout="+readyTimeout.String(), "-n", SampleNamespace, "streamcluster/"+SampleCluster); err != nil {
		return fmt.Errorf("the StreamCluster did not become Ready: %w", err)
	}
	if err := kubectl("wait", "--for=condition=Ready", "--timeout="+readyTimeout.String(), "-n", SampleNamespace, "streams", "--all"); err != nil {
		return fmt.Errorf("the Streams did not become Ready: %w", err)
	}

	ln, err := listenClient(o.Port)
	if err != nil {
		return err
	}
	svc0, err := k.CoreV1().Services(SampleNamespace).Get(ctx, SampleCluster, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the client Service: %w", err)
	}
	step("every partition served")
	if err := waitServing(ctx, "http://"+net.JoinHostPort(svc0.Spec.ClusterIP, strconv.Itoa(int(svc0.Spec.Ports[0].Port)))); err != nil {
		return err
	}
	// And by each broker itself: the Service may reach only those that
	// caught up with the metadata leader, while one restarted with the
	// stack still refuses (METADATA_CATCHING_UP) what it would route.
	if err := waitEachBrokerServing(ctx, k, int(resources.ClientPort)); err != nil {
		return err
	}
	svc, err := k.CoreV1().Services(SampleNamespace).Get(ctx, SampleCluster, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the client Service: %w", err)
	}
	go serveOnLoopback(ctx, ln, net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))))
	state.ServiceURL = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
	state.URL = "http://" + ln.Addr().String()
	state.Phase = "ready"
	step("ready")
	for {
		select {
		case <-ctx.Done():
			state.Phase = "stopping"
			step("stopping")
			return nil
		case err := <-agentDone:
			return fmt.Errorf("the node agent stopped: %v (log %s)", err, filepath.Join(p.logs(), "agent.log"))
		}
	}
}

// applyWithRetry applies manifests, retrying while the API server does not
// know the CRDs they define yet.
func applyWithRetry(ctx context.Context, kubectl func(...string) error, args ...string) error {
	var err error
	for range 20 {
		if err = kubectl(args...); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return err
}

// sampleKustomization writes a kustomization of config/samples with the
// StreamCluster's replica count.
func sampleKustomization(p paths, o Options) (string, error) {
	dir := filepath.Join(p.root, "samples")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, filepath.Join(o.Checkout, "config", "samples"))
	if err != nil {
		return "", err
	}
	k := fmt.Sprintf(`# Written by picomq dev: config/samples with --brokers.
namespace: %s
resources:
- %s
patches:
- target: {kind: StreamCluster, name: %s}
  patch: '[{"op": "replace", "path": "/spec/replicas", "value": %d}]'
`, SampleNamespace, rel, SampleCluster, o.Brokers)
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

// startAgent starts the node agent in the router namespace.
func startAgent(p paths, o Options, cp *controlplane.ControlPlane, n podnet.Config) (*exec.Cmd, error) {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(cp.Server, "https://"))
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(p.logs(), "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	self := filepath.Join(p.bin(), "picomq")
	cmd := exec.Command("nsenter", "--net="+n.RouterPath(), self, "dev", "agent",
		"--state-dir", p.agent(),
		"--kubeconfig", cp.Kubeconfig,
		"--nodes", strconv.Itoa(o.Nodes),
		"--node-ip", n.RouterIP.String(),
		"--pod-cidr", n.Pods.String(),
		"--images", "ghcr.io/picomq/picomq="+p.bin(),
		"--api-server", net.JoinHostPort(host, port),
		"--helper", self,
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: a supervisor killed outright takes its agent along (the
	// agent stops its pods; the next start cleans up the rest).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the node agent: %w", err)
	}
	nodeagent.RecordPID(p.agentPID(), cmd.Process.Pid)
	return cmd, nil
}

// stopProcess sends SIGTERM, then SIGKILL after grace.
func stopProcess(cmd *exec.Cmd, grace time.Duration) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(cmd.Process.Pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// killAgentPods kills an agent and the containers an earlier supervisor
// that died left running.
func killAgentPods(p paths) {
	nodeagent.KillRecorded(p.agentPID())
	nodeagent.KillEarlierContainers(p.agent())
}

// listenClient listens on the host's loopback for the client Service:
// port, or 4437 when free, else any port.
func listenClient(port int) (net.Listener, error) {
	if port != 0 {
		return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	if ln, err := net.Listen("tcp", "127.0.0.1:4437"); err == nil {
		return ln, nil
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

var errAgentStopped = errors.New("the node agent stopped")

// waitServing waits until every partition of every stream answers a read
// through the client Service at url. After a restart the operator's
// conditions and the pods' still say Ready from before it until they are
// looked at again, and the slot Leases name holders that are only coming
// back: the stack is ready when reads are served, not when status says so.
func waitServing(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	c, err := client.New(url)
	if err != nil {
		return err
	}
	defer c.Close()
	var last error
	for {
		last = readEveryPartition(ctx, c)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the streams are not served through the client Service after %s: %w", readyTimeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitEachBrokerServing waits until every partition answers a read through
// each broker pod of the sample cluster, at its pod address.
func waitEachBrokerServing(ctx context.Context, k kubernetes.Interface, port int) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	selector := resources.LabelInstance + "=" + SampleCluster + "," + resources.LabelComponent + "=" + resources.ComponentBroker
	var last error
	for {
		last = func() error {
			pods, err := k.CoreV1().Pods(SampleNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.Status.PodIP == "" {
					return fmt.Errorf("pod %s has no address yet", p.Name)
				}
				c, err := client.New("http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
				if err != nil {
					return err
				}
				err = readEveryPartition(ctx, c)
				c.Close()
				if err != nil {
					return fmt.Errorf("through %s: %w", p.Name, err)
				}
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the streams are not served by every broker after %s: %w", readyTimeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func readEveryPartition(ctx context.Context, c *client.Client) error {
	infos, err := c.ListStreams(ctx, "")
	if err != nil {
		return err
	}
	for _, info := range infos {
		s, err := c.Stream(ctx, info.Name)
		if err != nil {
			return err
		}
		for p := range info.Partitions {
			if _, err := s.Read(ctx, p, 0, 1); err != nil {
				return fmt.Errorf("%s partition %d: %w", info.Name, p, err)
			}
		}
	}
	return nil
}
