package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/picomq/picomq/devstack/nodeagent"
	"github.com/picomq/picomq/devstack/podnet"
)

// upTimeout bounds a detached up's wait for its supervisor once the
// binaries are built.
const upTimeout = 15 * time.Minute

// Up builds what is missing and starts a supervisor in the background,
// returning once the stack is ready, with the lines to export in out. On a
// stack that already runs it only prints them (idempotent); on the folder
// of a stack that crashed it starts again from what the folder kept.
func Up(ctx context.Context, o Options, out, progress io.Writer) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if err := podnet.Check(); err != nil {
		return err
	}
	if s, ok, err := ReadState(o.StateDir); err == nil && ok {
		if s.Phase == "ready" {
			fmt.Fprintln(progress, "picomq dev: the stack is already running")
			fmt.Fprint(out, s.Exports())
			return nil
		}
		return wait(ctx, o.StateDir, s.PID, nil, out, progress)
	}
	cpBin, err := Build(ctx, o, progress)
	if err != nil {
		return err
	}
	p := paths{o.StateDir}
	if err := os.MkdirAll(p.logs(), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(p.logs(), "supervisor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(p.bin(), "picomq"), "dev", "up", "--foreground", "--built", cpBin,
		"--state-dir", o.StateDir, "--checkout", o.Checkout,
		"--brokers", strconv.Itoa(o.Brokers), "--nodes", strconv.Itoa(o.Nodes), "--port", strconv.Itoa(o.Port))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives this command
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return wait(ctx, o.StateDir, cmd.Process.Pid, exited, out, progress)
}

// wait follows a starting supervisor's progress until it is ready.
func wait(ctx context.Context, dir string, pid int, exited <-chan error, out, progress io.Writer) error {
	deadline := time.After(upTimeout)
	last := ""
	for {
		s, ok, err := ReadState(dir)
		if err == nil && s.PID == pid {
			if s.Message != last && s.Phase == "starting" {
				fmt.Fprintf(progress, "picomq dev: %s\n", s.Message)
				last = s.Message
			}
			if ok && s.Phase == "ready" {
				fmt.Fprintf(progress, "picomq dev: ready — %d brokers on %d nodes; `picomq dev down` stops it all\n", s.Brokers, s.Nodes)
				fmt.Fprint(out, s.Exports())
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the stack's supervisor stopped (%v): %s\n%s", err, s.Message, logTail(filepath.Join(dir, "logs", "supervisor.log")))
		case <-ctx.Done():
			return fmt.Errorf("interrupted while the stack starts; it goes on starting (`picomq dev status`, `picomq dev down`): %w", ctx.Err())
		case <-deadline:
			return fmt.Errorf("the stack is not ready after %s: %s (logs in %s)", upTimeout, s.Message, filepath.Join(dir, "logs"))
		case <-time.After(300 * time.Millisecond):
		}
		if exited == nil && !alive(pid) {
			return fmt.Errorf("the stack's supervisor (pid %d) is gone: %s", pid, logTail(filepath.Join(dir, "logs", "supervisor.log")))
		}
	}
}

func logTail(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-15, 0):], "\n")
}

// Down stops the stack of the folder: the supervisor stops what it
// started; if it is gone or does not stop in time, Down kills it and
// cleans up what it left (containers, pod network). The folder is kept.
func Down(o Options, progress io.Writer) error {
	if err := o.defaults(); err != nil {
		return err
	}
	p := paths{o.StateDir}
	pid := supervisorPID(p)
	if alive(pid) {
		fmt.Fprintf(progress, "picomq dev: stopping the stack (supervisor pid %d)...\n", pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(3 * time.Minute)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if alive(pid) {
			fmt.Fprintln(progress, "picomq dev: the supervisor did not stop in time: killing it")
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	} else {
		fmt.Fprintln(progress, "picomq dev: no supervisor runs; cleaning up what a stopped one may have left")
	}
	if podnet.Check() == nil {
		nodeagent.KillRecorded(p.agentPID())
		nodeagent.KillEarlierContainers(p.agent())
		podnet.RemoveStalePods()
		podnet.DefaultConfig().TearDown()
	}
	_ = os.Remove(p.pidFile())
	fmt.Fprintln(progress, "picomq dev: stopped (state kept in "+o.StateDir+")")
	return nil
}

// Status prints the stack's state and, when it runs, its nodes, pods,
// StreamClusters and Streams.
func Status(ctx context.Context, o Options, out io.Writer) error {
	if err := o.defaults(); err != nil {
		return err
	}
	s, ok, err := ReadState(o.StateDir)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintf(out, "no stack runs from %s\n", o.StateDir)
		return ErrNotRunning
	}
	fmt.Fprintf(out, "stack: %s since %s (supervisor pid %d)\n", s.Phase, s.Since.Format(time.RFC3339), s.PID)
	if s.Message != "" && s.Phase != "ready" {
		fmt.Fprintf(out, "  %s\n", s.Message)
	}
	fmt.Fprint(out, s.Exports())
	if s.Kubectl == "" {
		return nil
	}
	for _, what := range []string{"nodes", "pods -A -o wide", "streamclusters,streams -A"} {
		cmd := exec.CommandContext(ctx, s.Kubectl, append([]string{"--kubeconfig", s.Kubeconfig, "get"}, strings.Fields(what)...)...)
		cmd.Stdout, cmd.Stderr = out, out
		fmt.Fprintln(out)
		_ = cmd.Run()
	}
	return nil
}

// ErrNotRunning is Status's answer when no stack runs.
var ErrNotRunning = errors.New("the stack is not running")

// LogFile is the log of name: a pod's container (namespace/pod, the
// container optional when the pod has one), or one of the stack's own
// processes (supervisor, agent, etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler).
func LogFile(o Options, namespace, name, container string) (string, error) {
	if err := o.defaults(); err != nil {
		return "", err
	}
	p := paths{o.StateDir}
	switch name {
	case "supervisor", "agent":
		return filepath.Join(p.logs(), name+".log"), nil
	case "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler":
		return filepath.Join(p.controlPlane(), "logs", name+".log"), nil
	}
	if container != "" {
		path := nodeagent.LogPath(p.agent(), namespace, name, container)
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("no log of container %s of pod %s/%s: %w", container, namespace, name, err)
		}
		return path, nil
	}
	logs, _ := filepath.Glob(nodeagent.LogPath(p.agent(), namespace, name, "*"))
	switch len(logs) {
	case 0:
		return "", fmt.Errorf("no logs of pod %s/%s in %s (the stack's own: supervisor, agent, etcd, kube-apiserver, kube-controller-manager, kube-scheduler)", namespace, name, o.StateDir)
	case 1:
		return logs[0], nil
	}
	names := make([]string, 0, len(logs))
	for _, l := range logs {
		names = append(names, strings.TrimSuffix(filepath.Base(l), ".log"))
	}
	return "", fmt.Errorf("pod %s/%s has several containers: pick one with -c (%s)", namespace, name, strings.Join(names, ", "))
}
