package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The tests run against a REAL broker process: TestMain builds ./cmd/broker
// once and starts it on a free loopback port with a temporary data
// directory, with --test-clock so that the suite's clock can be pushed to
// it (see clockSync).
var broker *brokerProc

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// The unit tier: the tests that need the broker process skip
		// (needBroker); the client's own pure tests run.
		os.Exit(m.Run())
	}
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "picomq-client-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "broker")
		build := exec.Command("go", "build", "-o", bin, "github.com/picomq/picomq/cmd/broker")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build ./cmd/broker: %v\n%s", err, out)
			return 1
		}
		broker = &brokerProc{bin: bin, dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "broker.log")}
		if err := broker.start("127.0.0.1:0"); err != nil {
			fmt.Fprintf(os.Stderr, "start broker: %v\n%s", err, broker.logTail())
			return 1
		}
		code := m.Run()
		if err := broker.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop broker: %v\n%s", err, broker.logTail())
			if code == 0 {
				code = 1
			}
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "broker log (tail):\n%s", broker.logTail())
		}
		return code
	}())
}

// needBroker skips a test that needs the broker process under -short.
func needBroker(t *testing.T) {
	t.Helper()
	if broker == nil {
		t.Skip("process tier (a broker binary): skipped under -short")
	}
}

// brokerProc is the broker process under test.
type brokerProc struct {
	bin, dataDir, logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	addr string
	done chan error
	// gen counts starts: a restarted broker's clock is the real one again
	// until the tests push theirs.
	gen atomic.Int64
}

func (b *brokerProc) url() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "http://" + b.addr
}

// start runs the broker listening on addr and waits until /readyz answers
// 200.
func (b *brokerProc) start(addr string) error {
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(b.bin, "--data-dir", b.dataDir, "--listen", addr, "--test-clock",
		"--log-format", "json", "--log-level", "info", "--shutdown-timeout", "5s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	// The broker logs the address it listens on: with port 0, that is how
	// the tests learn the port it got.
	addrc := make(chan string, 1)
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logf.Write(append(line, '\n'))
			var l struct{ Msg, Addr string }
			if json.Unmarshal(line, &l) == nil && l.Msg == "listening" {
				select {
				case addrc <- l.Addr:
				default:
				}
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var got string
	select {
	case got = <-addrc:
	case err := <-done:
		return fmt.Errorf("broker exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("broker did not listen within 30s")
	}
	b.mu.Lock()
	b.cmd, b.addr, b.done = cmd, got, done
	b.mu.Unlock()
	b.gen.Add(1)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + got + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("broker at %s not ready within 30s", got)
}

// stop sends SIGTERM and waits for a clean exit.
func (b *brokerProc) stop() error {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("broker exited with %v after SIGTERM", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("broker did not stop within 30s of SIGTERM")
	}
}

// restart stops the broker and starts it again on the same data directory
// and address.
func (b *brokerProc) restart(t *testing.T) {
	t.Helper()
	if err := b.stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, b.logTail())
	}
	addr := strings.TrimPrefix(b.url(), "http://")
	var err error
	for range 20 { // the port is ours again at once, almost always
		if err = b.start(addr); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restart: %v\n%s", err, b.logTail())
}

func (b *brokerProc) logTail() string {
	data, _ := os.ReadFile(b.logPath)
	if len(data) > 8<<10 {
		data = data[len(data)-8<<10:]
	}
	return string(data)
}

// ctxTimeout is a context for a test's set-up and cleanup calls.
func ctxTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
