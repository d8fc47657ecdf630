// Command durable benchmarks the Durable Streams API of PicoMQ's broker
// side by side with the protocol's Node reference server
// (@durable-streams/server, file-backed), in one run on this machine:
//
//   - append rate: small messages POSTed by N concurrent writers (75 by
//     default) to one stream, for a fixed time; every append is
//     acknowledged only once durable (the broker's group commit; the Node
//     server's per-append fsync);
//   - live latency: the time from a writer starting a POST to a live reader
//     — SSE, then long-poll — receiving the message, p50 and p99.
//
// It builds and starts the real broker binary (cmd/broker) and the Node
// server (test/conformance/reference-server.mjs, from that folder's
// node_modules: run `npm ci` there first), each on a free loopback port with
// a temporary data directory, and stops both at the end.
//
//	go run ./test/bench/durable [-rounds 3] [-duration 5s] [-concurrency 75] [-size 100]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	duration := flag.Duration("duration", 5*time.Second, "how long each append-rate run lasts")
	rounds := flag.Int("rounds", 3, "rounds, alternating the servers (the machine's other load varies: medians are reported)")
	concurrency := flag.Int("concurrency", 75, "concurrent writers in the append-rate run")
	size := flag.Int("size", 100, "message size in bytes")
	samples := flag.Int("samples", 200, "messages timed in each live-latency run")
	root := flag.String("root", ".", "the repository's root")
	skipNode := flag.Bool("skip-node", false, "benchmark the broker only")
	url := flag.String("url", "", "benchmark the server already running at this URL only")
	flag.Parse()
	if *url != "" {
		n, bad, elapsed := appendRate(*url, *duration, *concurrency, *size)
		sse, serr := liveLatency(*url, "sse", *samples, *size)
		lp, lerr := liveLatency(*url, "long-poll", *samples, *size)
		fmt.Printf("%s: %.0f appends/s (%d errors), SSE p50 %s p99 %s, long-poll p50 %s p99 %s\n", *url,
			float64(n)/elapsed.Seconds(), bad, pct(sse, serr, 50), pct(sse, serr, 99), pct(lp, lerr, 50), pct(lp, lerr, 99))
		return
	}
	if err := run(*root, *rounds, *duration, *concurrency, *size, *samples, *skipNode); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type result struct {
	server          string
	rates           []float64 // appends/s, one per round
	errors          int64
	sse, longPoll   []time.Duration
	sseErr, pollErr error
}

func run(root string, rounds int, duration time.Duration, concurrency, size, samples int, skipNode bool) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "picomq-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	fmt.Println("building cmd/broker")
	build := exec.Command("go", "build", "-o", filepath.Join(tmp, "broker"), "./cmd/broker")
	build.Dir, build.Stdout, build.Stderr = root, os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	servers := []struct {
		name  string
		start func() (string, func(), error)
	}{
		{"picomq broker", func() (string, func(), error) { return startBroker(tmp) }},
	}
	if !skipNode {
		servers = append(servers, struct {
			name  string
			start func() (string, func(), error)
		}{"node reference (file)", func() (string, func(), error) { return startNode(root, tmp) }})
	}
	urls := make([]string, len(servers))
	for i, s := range servers {
		url, stop, err := s.start()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer stop()
		urls[i] = url
		fmt.Printf("%s at %s\n", s.name, url)
	}
	results := make([]result, len(servers))
	for i, s := range servers {
		results[i].server = s.name
	}
	// Rounds alternate the servers, so that a burst of other work on the
	// machine does not fall on one of them only.
	for round := 1; round <= rounds; round++ {
		for i := range servers {
			n, bad, elapsed := appendRate(urls[i], duration, concurrency, size)
			rate := float64(n) / elapsed.Seconds()
			results[i].rates = append(results[i].rates, rate)
			results[i].errors += bad
			fmt.Printf("round %d: %-22s %8.0f appends/s\n", round, servers[i].name, rate)
		}
		for i := range servers {
			sse, err := liveLatency(urls[i], "sse", samples/rounds, size)
			results[i].sse = append(results[i].sse, sse...)
			if err != nil {
				results[i].sseErr = err
			}
			lp, err := liveLatency(urls[i], "long-poll", samples/rounds, size)
			results[i].longPoll = append(results[i].longPoll, lp...)
			if err != nil {
				results[i].pollErr = err
			}
		}
	}
	fmt.Printf("\n%d-byte messages; append rate: %d concurrent writers, %d rounds of %s each (median); live latency: %d messages, one at a time\n\n",
		size, concurrency, rounds, duration, samples)
	fmt.Printf("%-24s %12s %8s %12s %12s %14s %14s\n", "server", "appends/s", "errors", "SSE p50", "SSE p99", "long-poll p50", "long-poll p99")
	for _, r := range results {
		fmt.Printf("%-24s %12.0f %8d %12s %12s %14s %14s\n", r.server, median(r.rates), r.errors,
			pct(r.sse, r.sseErr, 50), pct(r.sse, r.sseErr, 99), pct(r.longPoll, r.pollErr, 50), pct(r.longPoll, r.pollErr, 99))
	}
	if len(results) == 2 && median(results[1].rates) > 0 {
		fmt.Printf("\nappend rate: broker / node = %.1fx\n", median(results[0].rates)/median(results[1].rates))
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func pct(ds []time.Duration, err error, p int) string {
	if err != nil {
		return "error"
	}
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Round(10 * time.Microsecond).String()
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}

func do(method, url, ct string, body []byte) (int, http.Header, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header, nil
}

func create(url string) error {
	st, _, err := do("PUT", url, "text/plain", nil)
	if err != nil {
		return err
	}
	if st != 201 && st != 200 {
		return fmt.Errorf("create %s: status %d", url, st)
	}
	return nil
}

// appendRate runs concurrency writers appending size-byte messages to one
// stream for duration, and counts the acknowledged appends.
func appendRate(base string, duration time.Duration, concurrency, size int) (int64, int64, time.Duration) {
	url := fmt.Sprintf("%s/v1/stream/bench/appends-%d", base, time.Now().UnixNano())
	if err := create(url); err != nil {
		fmt.Println("  ", err)
		return 0, 1, duration
	}
	msg := bytes.Repeat([]byte("x"), size)
	var ok, bad atomic.Int64
	deadline := time.Now().Add(duration)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				st, _, err := do("POST", url, "text/plain", msg)
				if err != nil || (st != 204 && st != 200) {
					bad.Add(1)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return ok.Load(), bad.Load(), time.Since(start)
}

// liveLatency appends samples messages one at a time while a live reader
// (SSE or long-poll) follows the stream, and returns, for each, the time
// from starting its POST to the reader holding it.
func liveLatency(base, mode string, samples, size int) ([]time.Duration, error) {
	url := fmt.Sprintf("%s/v1/stream/bench/live-%s-%d", base, mode, time.Now().UnixNano())
	if err := create(url); err != nil {
		return nil, err
	}
	got := make(chan []byte, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	var readErr error
	go func() {
		if mode == "sse" {
			readErr = followSSE(ctx, url, got, ready)
		} else {
			readErr = followLongPoll(ctx, url, got, ready)
		}
		close(got)
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		return nil, errors.New("reader not ready")
	}
	var out []time.Duration
	pad := strings.Repeat("y", max(0, size-20))
	for i := 0; i < samples; i++ {
		msg := fmt.Sprintf("m%08d;%s\n", i, pad)
		start := time.Now()
		if st, _, err := do("POST", url, "text/plain", []byte(msg)); err != nil || (st != 204 && st != 200) {
			return out, fmt.Errorf("append: %d %v", st, err)
		}
		want := fmt.Sprintf("m%08d;", i)
		for seen := false; !seen; {
			select {
			case b, ok := <-got:
				if !ok {
					return out, fmt.Errorf("reader stopped: %v", readErr)
				}
				seen = bytes.Contains(b, []byte(want))
			case <-time.After(10 * time.Second):
				return out, errors.New("message never reached the reader")
			}
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

var offsetRe = regexp.MustCompile(`"streamNextOffset":"([^"]+)"`)

// followSSE reads an SSE response from the tail on, sending each data
// event's payload to got, reconnecting from the last offset when the server
// ends the response.
func followSSE(ctx context.Context, url string, got chan<- []byte, ready chan struct{}) error {
	offset := "now"
	once := sync.Once{}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"?offset="+offset+"&live=sse", nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var event string
		var data bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(line[6:])
			case strings.HasPrefix(line, "data:"):
				data.WriteString(line[5:])
				data.WriteByte('\n')
			case line == "":
				if event == "data" {
					got <- append([]byte(nil), data.Bytes()...)
				} else if event == "control" {
					if m := offsetRe.FindSubmatch(data.Bytes()); m != nil {
						offset = string(m[1])
					}
					once.Do(func() { close(ready) })
				}
				event = ""
				data.Reset()
			}
		}
		res.Body.Close()
	}
	return ctx.Err()
}

// followLongPoll long-polls from the tail on, sending each answer's body to
// got.
func followLongPoll(ctx context.Context, url string, got chan<- []byte, ready chan struct{}) error {
	_, h, err := do("HEAD", url, "", nil)
	if err != nil {
		return err
	}
	offset := h.Get("Stream-Next-Offset")
	cursor := ""
	close(ready)
	for ctx.Err() == nil {
		u := url + "?offset=" + offset + "&live=long-poll"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if next := res.Header.Get("Stream-Next-Offset"); next != "" {
			offset = next
		}
		cursor = res.Header.Get("Stream-Cursor")
		if res.StatusCode == 200 && len(body) > 0 {
			got <- body
		}
	}
	return ctx.Err()
}

// startBroker starts the broker binary on a free port.
func startBroker(tmp string) (string, func(), error) {
	dir := filepath.Join(tmp, "broker-data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(filepath.Join(tmp, "broker"), "--listen", "127.0.0.1:0", "--data-dir", dir,
		"--node-id", "bench", "--long-poll-timeout", "20s", "--log-format", "json", "--log-level", "info")
	return startServer(cmd, regexp.MustCompile(`"msg":"listening".*?"addr":"([^"]+)"`), "http://")
}

// startNode starts the Node reference server, file-backed.
func startNode(root, tmp string) (string, func(), error) {
	dir := filepath.Join(tmp, "node-data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, err
	}
	cmd := exec.Command("node", "reference-server.mjs", dir, "20000")
	cmd.Dir = filepath.Join(root, "test", "conformance")
	return startServer(cmd, regexp.MustCompile(`^(http://\S+)$`), "")
}

// startServer runs cmd and waits for its output to match addr.
func startServer(cmd *exec.Cmd, addr *regexp.Regexp, prefix string) (string, func(), error) {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := addr.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- prefix + m[1]:
				default:
				}
			}
		}
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		pw.Close()
	}
	select {
	case url := <-found:
		return url, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("the server did not print its address")
	}
}
