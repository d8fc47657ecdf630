// Package brokerproc builds the broker binary and runs it as a process, for
// the process-tier tests of one broker (test/crash, test/disk) and the
// benchmark (test/bench): started on a free port and waited on until
// ready, killed with SIGKILL or stopped with SIGTERM.
package brokerproc

import (
	"fmt"
	"io"
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
	if err := BuildTo(binary); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return binary, func() { os.RemoveAll(dir) }, nil
}

// BuildTo compiles cmd/broker to the path binary.
func BuildTo(binary string) error {
	build := exec.Command("go", "build", "-o", binary, "github.com/picomq/picomq/cmd/broker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the broker: %w", err)
	}
	return nil
}

// Options of one run.
type Options struct {
	Binary  string
	DataDir string
	// Log is the file the broker's output is appended to (it outlives the
	// run, so that a restart's log follows the last one's); empty: this
	// process's standard error.
	Log          string
	NodeID       string        // empty: the broker's default
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

// Run starts the broker and waits until it answers /readyz with 200. It
// fails, the process gone, when the broker exits first or is not ready in
// time; the error ends with the broker's log when it has a file.
func Run(o Options) (*Broker, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	var out io.Writer = os.Stderr
	if o.Log != "" {
		logs, err := os.OpenFile(o.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		defer logs.Close() // the child holds its own copy
		out = logs
	}
	args := []string{"--data-dir", o.DataDir, "--listen", addr}
	if o.NodeID != "" {
		args = append(args, "--node-id", o.NodeID)
	}
	cmd := exec.Command(o.Binary, append(args, o.Flags...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &Broker{URL: "http://" + addr, Log: o.Log, cmd: cmd, exited: make(chan error, 1)}
	go func() { b.exited <- cmd.Wait() }()
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
			return nil, fmt.Errorf("broker exited before it was ready (%v)%s", err, b.logEnd())
		case <-deadline:
			b.Kill()
			return nil, fmt.Errorf("broker not ready after %v%s", timeout, b.logEnd())
		case <-tick.C:
		}
	}
	return b, nil
}

// Start is Run for a test: it fails t at once when the broker does not
// become ready, and kills the process at t's cleanup.
func Start(t testing.TB, o Options) *Broker {
	t.Helper()
	b, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	return b
}

// Pid is the process's id.
func (b *Broker) Pid() int { return b.cmd.Process.Pid }

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

// Stop sends SIGTERM, a graceful stop, and kills the process if it has
// not exited within grace.
func (b *Broker) Stop(grace time.Duration) {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-b.exited:
		b.exited <- err
	case <-time.After(grace):
		b.Kill()
	}
}

// LogTail returns the last 6,000 bytes of the broker's log, for a failure
// message.
func (b *Broker) LogTail() string { return LogTail(b.Log) }

// logEnd is "; its log ends:" and the log's tail, when it has a file.
func (b *Broker) logEnd() string {
	if b.Log == "" {
		return ""
	}
	return "; its log ends:\n" + b.LogTail()
}

// LogTail returns the last 6,000 bytes of the file at path.
func LogTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(data[max(0, len(data)-6000):])
}
