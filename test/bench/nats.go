package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The NATS JetStream reference: the versions issue 19 names, installed
// with go install by the bench (never by the tests).
const (
	natsServerModule = "github.com/nats-io/nats-server/v2"
	natsServerVer    = "v2.15.2"
	natsCLIModule    = "github.com/nats-io/natscli/nats"
	natsCLIVer       = "v0.5.0"
)

// natsBinDir is where the bench keeps nats-server and nats: -nats-bin,
// or <user cache>/picomq/bench/bin.
func natsBinDir() (string, error) {
	if *natsBin != "" {
		return *natsBin, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "picomq", "bench", "bin"), nil
}

// ensureNATS returns the paths of nats-server and nats, installing each
// with go install into the cache folder unless the one there already
// reports the pinned version.
func ensureNATS() (server, cli string, err error) {
	dir, err := natsBinDir()
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	server = filepath.Join(dir, "nats-server")
	cli = filepath.Join(dir, "nats")
	for _, b := range []struct{ path, module, version, want string }{
		{server, natsServerModule, natsServerVer, natsServerVer},              // "nats-server: v2.15.2"
		{cli, natsCLIModule, natsCLIVer, strings.TrimPrefix(natsCLIVer, "v")}, // "v0.5.0"
	} {
		if out, err := exec.Command(b.path, "--version").CombinedOutput(); err == nil && strings.Contains(string(out), b.want) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: installing %s@%s into %s (once; minutes on 2 cores)\n", b.module, b.version, dir)
		cmd := exec.Command("go", "install", b.module+"@"+b.version)
		cmd.Dir = os.TempDir() // outside this module: module@version ignores go.mod anyway
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("go install %s@%s: %w", b.module, b.version, err)
		}
	}
	return server, cli, nil
}

// natsCluster is three nats-server processes on loopback as one JetStream
// cluster, file storage in a folder each.
type natsCluster struct {
	procs    []*exec.Cmd
	clients  []string // nats://127.0.0.1:port
	monitors []string // http://127.0.0.1:port
	logs     []string
}

// natsConfig is server i's configuration file.
func natsConfig(i int, client, monitor, route string, routes []string, store string, syncAlways bool) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "server_name: n%d\nlisten: %q\nhttp: %q\n", i, client, monitor)
	fmt.Fprintf(&sb, "jetstream {\n  store_dir: %q\n", store)
	if syncAlways {
		sb.WriteString("  sync_interval: always\n")
	}
	sb.WriteString("}\n")
	quoted := make([]string, len(routes))
	for j, r := range routes {
		quoted[j] = strconv.Quote("nats-route://" + r)
	}
	fmt.Fprintf(&sb, "cluster {\n  name: picomq-bench\n  listen: %q\n  routes: [%s]\n}\n", route, strings.Join(quoted, ", "))
	return sb.String()
}

// startNATS starts n servers in dir and waits until each says JetStream
// is healthy.
func startNATS(bin, dir string, n int, syncAlways bool) (*natsCluster, error) {
	addrs := make([][3]string, n) // client, monitor, route
	var routes []string
	for i := range addrs {
		for k := range addrs[i] {
			a, err := freePort()
			if err != nil {
				return nil, err
			}
			addrs[i][k] = a
		}
		routes = append(routes, addrs[i][2])
	}
	nc := &natsCluster{}
	for i, a := range addrs {
		store := filepath.Join(dir, fmt.Sprintf("n%d", i), "jetstream")
		if err := os.MkdirAll(store, 0o755); err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(conf, []byte(natsConfig(i, a[0], a[1], a[2], routes, store, syncAlways)), 0o644); err != nil {
			return nil, err
		}
		logPath := filepath.Join(dir, fmt.Sprintf("n%d.log", i))
		log, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "-c", conf)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			log.Close()
			nc.stop()
			return nil, err
		}
		log.Close() // the child holds its own descriptor
		nc.procs = append(nc.procs, cmd)
		nc.clients = append(nc.clients, "nats://"+a[0])
		nc.monitors = append(nc.monitors, "http://"+a[1])
		nc.logs = append(nc.logs, logPath)
	}
	for i, m := range nc.monitors {
		if err := poll(60*time.Second, func() error { return natsHealthy(m) }); err != nil {
			nc.stop()
			return nil, fmt.Errorf("nats-server n%d: %w (log %s)", i, err, nc.logs[i])
		}
	}
	return nc, nil
}

func natsHealthy(monitor string) error {
	resp, err := http.Get(monitor + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s", resp.Status)
	}
	return nil
}

func (nc *natsCluster) pids() []int {
	var out []int
	for _, p := range nc.procs {
		out = append(out, p.Process.Pid)
	}
	return out
}

func (nc *natsCluster) stop() {
	for _, p := range nc.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range nc.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	nc.procs = nil
}

// natsResult is what nats bench reported.
type natsResult struct {
	msgsPerSec float64
	p50, p99   time.Duration
	elapsed    time.Duration
	use        cpuUse
	cpuOK      bool
	replicas   int    // from the stream's configuration, after the run
	storage    string // idem
	errs       int64  // refused or unanswered publishes (natsload)
	firstErr   string
}

// natsArgs is the nats bench command line.
func natsArgs(servers []string, clients, size, msgs int) []string {
	maxBytes := max(int64(1)<<30, 2*int64(msgs)*int64(size))
	return []string{
		"bench", "js", "pub", "sync", "picomq.bench",
		"--create", "--storage", "file", "--replicas", "3", "--maxbytes", strconv.FormatInt(maxBytes, 10),
		"--clients", strconv.Itoa(clients), "--size", strconv.Itoa(size), "--msgs", strconv.Itoa(msgs),
		"--no-progress", "--server", strings.Join(servers, ","),
	}
}

// runNATSBench runs nats bench js pub sync against nc (each client
// connects to one of the servers, as nats picks them) and parses its
// aggregated figures, then checks the stream it made is R3 on files.
func runNATSBench(cli string, nc *natsCluster, clients, size, msgs int) (natsResult, string, error) {
	args := natsArgs(nc.clients, clients, size, msgs)
	var out []byte
	var err error
	var r natsResult
	for attempt := 0; attempt < 3; attempt++ { // a fresh cluster may still elect its meta leader
		cpu0, t0 := sampleCPU(nc.pids()...), time.Now()
		cmd := exec.Command(cli, args...)
		cmd.Dir = os.TempDir()
		out, err = cmd.CombinedOutput()
		r.elapsed = time.Since(t0)
		if err == nil {
			r.use, r.cpuOK = sampleCPU(nc.pids()...).since(cpu0, r.elapsed)
			if cmd.ProcessState != nil { // the nats CLI's own CPU, as the bench's clients elsewhere
				r.use.benchCores = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / r.elapsed.Seconds()
			}
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return r, string(out), fmt.Errorf("nats %s: %v\n%s", strings.Join(args, " "), err, tail(out, 2000))
	}
	p, err := parseNATSBench(string(out))
	if err != nil {
		return r, string(out), err
	}
	r.msgsPerSec, r.p50, r.p99 = p.msgsPerSec, p.p50, p.p99
	info, err := exec.Command(cli, "stream", "info", "benchstream", "--json", "--server", strings.Join(nc.clients, ",")).Output()
	if err == nil {
		var si struct {
			Config struct {
				Replicas int    `json:"num_replicas"`
				Storage  string `json:"storage"`
			} `json:"config"`
		}
		if json.Unmarshal(info, &si) == nil {
			r.replicas, r.storage = si.Config.Replicas, si.Config.Storage
		}
	}
	return r, string(out), nil
}

var (
	natsRateRe    = regexp.MustCompile(`aggregated stats:\s*([\d,.]+)\s*msgs/sec`)
	natsLatencyRe = regexp.MustCompile(`latencies per operation.*?\bP50:?\s*([\d,.]+)\s*(ns|us|µs|ms|s)\b.*?\bP99:?\s*([\d,.]+)\s*(ns|us|µs|ms|s)\b`)
)

// parseNATSBench reads the aggregated line of nats bench's output
// ("... aggregated stats: 3,984 msgs/sec ~ 3.9 MiB/sec") and, when
// present, the P50 and P99 of its latency line.
func parseNATSBench(out string) (natsResult, error) {
	var r natsResult
	m := natsRateRe.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no aggregated msgs/sec in nats bench's output:\n%s", tail([]byte(out), 2000))
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
	if err != nil {
		return r, fmt.Errorf("nats bench's msgs/sec %q: %v", m[1], err)
	}
	r.msgsPerSec = v
	if m := natsLatencyRe.FindStringSubmatch(out); m != nil {
		r.p50, _ = natsDuration(m[1], m[2])
		r.p99, _ = natsDuration(m[3], m[4])
	}
	return r, nil
}

// natsDuration is "14,048.25" "us" as a Duration.
func natsDuration(num, unit string) (time.Duration, error) {
	v, err := strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
	if err != nil {
		return 0, err
	}
	scale := map[string]float64{"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]
	return time.Duration(v * scale), nil
}

// freePort is a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// poll calls cond every 50 ms until it returns nil or timeout passes.
func poll(timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not after %v: %w", timeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) string { return string(b[max(0, len(b)-n):]) }
