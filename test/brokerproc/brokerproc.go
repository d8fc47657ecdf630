// Package brokerproc builds the broker binary and runs it as a process for
// the process-tier tests of one broker (test/crash, test/disk): started on
// a free port and waited on until ready, killed with SIGKILL.
package brokerproc

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Build compiles cmd/broker into a new temporary directory and returns the
// binary's path and a cleanup that removes it. For TestMain.
func Build() (binary string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "picomq-broker-bin")
	if err != nil {
		return "", nil, err
	}
	binary = filepath.Join(dir, "broker")
	build := exec.Command("go", "build", "-o", binary, "github.com/picomq/picomq/cmd/broker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building the broker: %w", err)
	}
	return binary, func() { os.RemoveAll(dir) }, nil
}

// Options of one run.
type Options struct {
	Binary  string
	DataDir string
	// Log is the file the broker's output is appended to (it outlives the
	// run, so that a restart's log follows the last one's).
	Log          string
	NodeID       string
	Flags        []string      // more flags, after the data dir, address and node id
	ReadyTimeout time.Duration // default 60s
}

// Broker is one run of the binary.
type Broker struct {
	URL    string
	Log    string
	cmd    *exec.Cmd
	exited chan error // cmd.Wait's result, put back once read
}

// Start runs the broker and waits until it answers /readyz with 200,
// failing t at once if it exits first or is not ready in time. The
// process is killed at t's cleanup.
func Start(t testing.TB, o Options) *Broker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logs, err := os.OpenFile(o.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close() // the child holds its own copy
	args := append([]string{"--data-dir", o.DataDir, "--listen", addr, "--node-id", o.NodeID}, o.Flags...)
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &Broker{URL: "http://" + addr, Log: o.Log, cmd: cmd, exited: make(chan error, 1)}
	go func() { b.exited <- cmd.Wait() }()
	t.Cleanup(b.Kill)
	timeout := o.ReadyTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !b.Ready() {
		select {
		case err := <-b.exited:
			b.exited <- err
			t.Fatalf("broker exited before it was ready (%v); its log ends:\n%s", err, b.LogTail())
		case <-deadline:
			t.Fatalf("broker not ready after %v; its log ends:\n%s", timeout, b.LogTail())
		case <-tick.C:
		}
	}
	return b
}

// Ready reports whether the broker answers /readyz with 200.
func (b *Broker) Ready() bool {
	resp, err := http.Get(b.URL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Kill sends SIGKILL (no flush, no close: what was acknowledged must be on
// disk already) and waits for the process to exit. Idempotent.
func (b *Broker) Kill() {
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	err := <-b.exited
	b.exited <- err
}

// LogTail returns the last 6,000 bytes of the broker's log, for a failure
// message.
func (b *Broker) LogTail() string { return LogTail(b.Log) }

// LogTail returns the last 6,000 bytes of the file at path.
func LogTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(data[max(0, len(data)-6000):])
}
