package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/internal/syncbuf"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// TestCheckConfig: --check-config exits 0 on a configuration the broker
// runs with, 64 on one it refuses, and starts nothing either way.
func TestCheckConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never-created")
	var out syncbuf.Buffer
	if code := run(context.Background(), []string{"--check-config", "--data-dir", dir}, env(nil), &out, nil); code != 0 {
		t.Fatalf("check of a good configuration: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "configuration ok") {
		t.Fatalf("check printed %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--check-config", "--data-dir", dir, "--long-poll-timeout", "0s"}, env(nil), &out, nil); code != exitUsage {
		t.Fatalf("check of a refused configuration: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(out.String(), "--long-poll-timeout") {
		t.Fatalf("the refusal %q does not name the flag", out.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("--check-config created the data directory")
	}
}

// TestFatalErrorGoesToTheTerminationLog: a configuration refused, or a
// data directory that cannot be opened, is written to --termination-log
// for Kubernetes to show as the container's termination message.
func TestFatalErrorGoesToTheTerminationLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "termination-log")
	if code := run(context.Background(), []string{"--data-dir", "/d", "--long-poll-timeout", "0s", "--termination-log", log}, env(nil), io.Discard, nil); code != exitUsage {
		t.Fatalf("exit %d", code)
	}
	if msg, err := os.ReadFile(log); err != nil || !strings.Contains(string(msg), "--long-poll-timeout") {
		t.Fatalf("termination log %q, %v: want the refusal", msg, err)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"--data-dir", file, "--listen", "127.0.0.1:0", "--termination-log", log}, env(nil), io.Discard, nil); code == 0 {
		t.Fatal("a broker on a file as data directory started")
	}
	if msg, err := os.ReadFile(log); err != nil || !strings.Contains(string(msg), "cannot open the broker") {
		t.Fatalf("termination log %q, %v: want why the broker could not open", msg, err)
	}
}

// started runs the broker in this process until the returned stop is
// called, and returns its base URL.
func started(t *testing.T, args ...string) (base string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan int, 1)
	var logs syncbuf.Buffer
	go func() {
		done <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--log-level", "warn"}, args...), env(nil), &logs,
			func(addr string) { addrc <- addr })
	}()
	select {
	case addr := <-addrc:
		base = "http://" + addr
	case code := <-done:
		cancel()
		t.Fatalf("run exited with %d before listening:\n%s", code, logs.String())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("not listening within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("not ready within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("run did not return within 30s of shutdown")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	return base, stop
}

func do(t *testing.T, method, url, ct string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// TestRunServesDrainsAndKeepsData: the binary's run serves the API and
// metrics; a shutdown ends long-polls at once, flushes and closes; the
// data is there when it starts again on the same directory.
func TestRunServesDrainsAndKeepsData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	base, stop := started(t, "--data-dir", dir, "--long-poll-timeout", "1h")
	if resp, body := do(t, "PUT", base+"/v1/admin/streams/app/events", "", []byte(`{"policy":{"partitions":2}}`)); resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	batch := wire.EncodeRecords([]stream.RecordValue{{Key: []byte("k"), Payload: []byte("v1")}, {Key: []byte("k"), Payload: []byte("v2")}})
	resp, body := do(t, "POST", base+"/v1/log/app/events", wire.BatchContentType, batch)
	if resp.StatusCode != 200 {
		t.Fatalf("append: %d %s", resp.StatusCode, body)
	}
	partition := resp.Header.Get(wire.HeaderPartition)
	resp, body = do(t, "GET", base+"/metrics", "", nil)
	for _, want := range []string{"picomq_appends_total 1", "picomq_raft_state", "go_goroutines", "picomq_http_requests_total"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// No test clock unless asked for.
	if resp, _ := do(t, "PUT", base+"/v1/admin/clock?now=0", "", nil); resp.StatusCode != 404 {
		t.Fatalf("clock endpoint answered %d without --test-clock", resp.StatusCode)
	}

	// A long-poll in flight does not hold the shutdown for its hour.
	polled := make(chan int, 1)
	go func() {
		resp, err := http.Get(base + "/v1/log/app/events?partition=" + partition + "&from=2&wait=1h")
		if err != nil {
			polled <- -1
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if code := stop(); code != 0 {
		t.Fatalf("run returned %d", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("shutdown took %v", took)
	}
	if code := <-polled; code != 200 {
		t.Fatalf("long-poll during shutdown answered %d", code)
	}

	base, _ = started(t, "--data-dir", dir)
	resp, body = do(t, "GET", base+"/v1/log/app/events?partition="+partition, "", nil)
	es, err := wire.DecodeEntries(body, 0)
	if resp.StatusCode != 200 || err != nil || len(es) != 2 || string(es[1].Record.Payload) != "v2" {
		t.Fatalf("after restart: %d %v %+v", resp.StatusCode, err, es)
	}
}

// TestRunExitCodes: usage errors exit 64; an unusable data directory exits
// with its coded error's exit code (EX_CONFIG).
func TestRunExitCodes(t *testing.T) {
	var out syncbuf.Buffer
	if code := run(context.Background(), nil, env(nil), &out, nil); code != 64 || !strings.Contains(out.String(), "--data-dir") {
		t.Fatalf("no --data-dir: %d %s", code, out.String())
	}
	if code := run(context.Background(), []string{"--help"}, env(nil), io.Discard, nil); code != 0 {
		t.Fatalf("--help: %d", code)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"--data-dir", open, "--listen", "127.0.0.1:0"}, env(nil), &out, nil); code != 78 {
		t.Fatalf("world-writable data dir: exit %d, want 78\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "STREAM_DIRECTORY_UNUSABLE") {
		t.Fatalf("log does not name the refusal:\n%s", out.String())
	}
}

// TestGCSettings: under a memory bound — a container limit (cgroup v2,
// else v1) or GOMEMLIMIT — GOGC 400 unless GOGC is set, and a soft memory
// limit of 90% of the container's unless GOMEMLIMIT is set; without a
// bound, the runtime's defaults.
func TestGCSettings(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
	}
	v2, v1 := cgroupMemoryLimits[0], cgroupMemoryLimits[1]
	for _, c := range []struct {
		name    string
		env     map[string]string
		files   map[string]string
		percent int
		limit   int64
	}{
		{"no bound", nil, nil, defaultGCPercent, -1},
		{"v2 limit", nil, map[string]string{v2: "1073741824\n"}, gcPercent, 966367641},
		{"v2 max", nil, map[string]string{v2: "max\n", v1: "1073741824"}, defaultGCPercent, -1},
		{"v1 limit", nil, map[string]string{v1: "2147483648\n"}, gcPercent, 1932735283},
		{"v1 unlimited", nil, map[string]string{v1: "9223372036854771712\n"}, defaultGCPercent, -1},
		{"unreadable limit", nil, map[string]string{v2: "lots"}, defaultGCPercent, -1},
		{"GOGC set", map[string]string{"GOGC": "100"}, map[string]string{v2: "1073741824"}, -1, 966367641},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "512MiB"}, map[string]string{v2: "1073741824"}, gcPercent, -1},
		{"GOMEMLIMIT, no container", map[string]string{"GOMEMLIMIT": "512MiB"}, nil, gcPercent, -1},
		{"both set", map[string]string{"GOMEMLIMIT": "512MiB", "GOGC": "50"}, map[string]string{v2: "1073741824"}, -1, -1},
	} {
		percent, limit := gcSettings(env(c.env), files(c.files))
		if percent != c.percent || limit != c.limit {
			t.Errorf("%s: percent %d, limit %d; want %d, %d", c.name, percent, limit, c.percent, c.limit)
		}
	}
}
