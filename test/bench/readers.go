package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The live-readers benchmark (issue 28): many idle SSE and long-poll
// readers on one stream, what each costs the broker while idle, and what
// a few writers' appends cost once every one of them wakes for each.
//
//	go run ./test/bench -readers 4000
//	go run ./test/bench -readers 4000 -readers-baseline /tmp/broker-0c71f97,/tmp/broker-eda265e -readers-rounds 3
//
// Half the readers follow the stream with SSE, half with long-polls that
// poll again at once (this bench's own Go clients, net/http, one
// connection each). Per reader it prints what the broker's own /metrics
// say of its heap and goroutine stacks after a collection (forced through
// --pprof's /debug/pprof/heap?gc=1) with every reader waiting, over the
// same figures before they came; then, with writers appending, the
// appends acknowledged, their p50/p99, the broker's peak RSS (VmHWM) and
// how many records the readers received. With baseline binaries they
// alternate with this build, each run on a fresh data directory.
var (
	readersN        = flag.Int("readers", 0, "run only the live-readers benchmark with this many idle readers (half SSE, half long-poll)")
	readersBaseline = flag.String("readers-baseline", "", "live-readers benchmark: other broker binaries, comma-separated, to run alternately with this build (e.g. ones built from older commits)")
	readersRounds   = flag.Int("readers-rounds", 1, "live-readers benchmark: rounds (each runs every binary once)")
	readersWriters  = flag.Int("readers-writers", 8, "live-readers benchmark: writers appending while the readers wait")
	readersPayload  = flag.Int("readers-payload", 100, "live-readers benchmark: bytes of each append")
)

type readersResult struct {
	label                          string
	perReader                      float64 // heap + stacks, bytes
	perSSE, perLongPoll            float64 // the same, of each kind
	heapPerReader, stacksPerReader float64
	goroutinesPerReader            float64
	idleRSS                        int64
	appends                        int
	p50, p99                       time.Duration
	peakRSS                        int64   // VmHWM: over the whole run
	heapInuseAtPeak                float64 // sampled during the writes
	delivered                      int64   // data events and long-poll pages the readers received
}

func runReaders(base, bin string) error {
	bins := []struct{ label, path string }{{"this build", bin}}
	for _, other := range strings.Split(*readersBaseline, ",") {
		if other != "" {
			bins = append(bins, struct{ label, path string }{"baseline " + filepath.Base(other), other})
		}
	}
	fmt.Printf("live readers: %d idle (half SSE, half long-poll) on one stream, then %d writers of %d B appends for %s\n\n",
		*readersN, *readersWriters, *readersPayload, *duration)
	var results []readersResult
	for round := 1; round <= *readersRounds; round++ {
		for i, b := range bins {
			r, err := readersOnce(filepath.Join(base, fmt.Sprintf("readers-%d-%d", round, i)), b.path)
			if err != nil {
				return fmt.Errorf("%s: %w", b.label, err)
			}
			r.label = b.label
			results = append(results, r)
			fmt.Printf("%-28s per idle reader %6.1f KB (SSE %.1f KB, long-poll %.1f KB; heap %.1f KB, stacks %.1f KB, %.2f goroutines); idle RSS %d MB; writes: %d appends, p50 %s p99 %s, peak RSS %d MB, peak heap in use %.0f MB, %d records delivered\n",
				r.label, r.perReader/1e3, r.perSSE/1e3, r.perLongPoll/1e3, r.heapPerReader/1e3, r.stacksPerReader/1e3, r.goroutinesPerReader, r.idleRSS>>20,
				r.appends, ms(r.p50), ms(r.p99), r.peakRSS>>20, r.heapInuseAtPeak/1e6, r.delivered)
		}
	}
	fmt.Printf("\n| broker | readers | per idle reader (heap+stacks) | SSE | long-poll | idle RSS | appends | append p50 | append p99 | peak RSS | peak heap in use |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Printf("| %s | %d | %.1f KB | %.1f KB | %.1f KB | %d MB | %d | %s | %s | %d MB | %.0f MB |\n", r.label, *readersN, r.perReader/1e3, r.perSSE/1e3, r.perLongPoll/1e3, r.idleRSS>>20, r.appends, ms(r.p50), ms(r.p99), r.peakRSS>>20, r.heapInuseAtPeak/1e6)
	}
	fmt.Printf("\ntarget: <= 100 KB per idle reader; append p99 no worse than the baseline's in the same run; 10,000 readers within 1.5 GB (peak RSS)\n")
	return nil
}

// readersOnce runs the benchmark once against the binary bin on a fresh
// data directory.
func readersOnce(dataDir, bin string) (readersResult, error) {
	var res readersResult
	b, err := startBroker(bin, dataDir, "--pprof")
	if err != nil {
		return res, err
	}
	defer b.stop()
	tr := &http.Transport{MaxIdleConnsPerHost: *readersN + *readersWriters + 16, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	url := b.URL + "/v1/stream/bench/readers"
	req, _ := http.NewRequest(http.MethodPut, url, nil)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return res, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return res, fmt.Errorf("create: %s", resp.Status)
	}

	collected := func() map[string]float64 {
		if r, err := hc.Get(b.URL + "/debug/pprof/heap?gc=1"); err == nil {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		return scrapeGauges(hc, b.URL)
	}
	before := collected()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: deferred calls run last first
	defer cancel()
	var delivered, waiting atomic.Int64
	// SSE readers first, then long-polls: each kind's cost is measured on
	// its own.
	sse := *readersN / 2
	open := func(n int, follow func()) {
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); follow() }()
			if i%500 == 499 {
				time.Sleep(50 * time.Millisecond) // do not flood the accept queue
			}
		}
	}
	open(sse, func() { followSSE(ctx, hc, url, &delivered, &waiting) })
	if err := waitForReaders(hc, b.URL, sse, &waiting); err != nil {
		return res, err
	}
	mid := collected()
	open(*readersN-sse, func() { followLongPoll(ctx, hc, url, &delivered, &waiting) })
	if err := waitForReaders(hc, b.URL, *readersN, &waiting); err != nil {
		return res, err
	}
	idle := collected()
	perReader := func(from, to map[string]float64, n int) float64 {
		return (to["go_memstats_heap_inuse_bytes"] + to["go_memstats_stack_inuse_bytes"] - from["go_memstats_heap_inuse_bytes"] - from["go_memstats_stack_inuse_bytes"]) / float64(n)
	}
	res.perSSE, res.perLongPoll = perReader(before, mid, sse), perReader(mid, idle, *readersN-sse)
	n := float64(*readersN)
	res.heapPerReader = (idle["go_memstats_heap_inuse_bytes"] - before["go_memstats_heap_inuse_bytes"]) / n
	res.stacksPerReader = (idle["go_memstats_stack_inuse_bytes"] - before["go_memstats_stack_inuse_bytes"]) / n
	res.perReader = res.heapPerReader + res.stacksPerReader
	res.goroutinesPerReader = (idle["go_goroutines"] - before["go_goroutines"]) / n
	res.idleRSS = int64(idle["process_resident_memory_bytes"])

	// Writers, while the readers wait: every append wakes all of them.
	wctx, wcancel := context.WithTimeout(ctx, *duration)
	defer wcancel()
	payload := bytes.Repeat([]byte{'x'}, *readersPayload)
	var mu sync.Mutex
	var lats []time.Duration
	var wwg sync.WaitGroup
	for range *readersWriters {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for wctx.Err() == nil {
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(wctx, http.MethodPost, url, bytes.NewReader(payload))
				req.Header.Set("Content-Type", "application/octet-stream")
				resp, err := hc.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					mu.Lock()
					lats = append(lats, time.Since(t0))
					mu.Unlock()
				}
			}
		}()
	}
	for wctx.Err() == nil {
		g := scrapeGauges(hc, b.URL)
		res.heapInuseAtPeak = max(res.heapInuseAtPeak, g["go_memstats_heap_inuse_bytes"])
		select {
		case <-wctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	wwg.Wait()
	res.peakRSS = peakRSS(b.Pid())
	res.delivered = delivered.Load()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	res.appends = len(lats)
	res.p50, res.p99 = pct(lats, 0.50), pct(lats, 0.99)
	cancel()
	return res, nil
}

// waitForReaders waits until n readers wait: the broker says so — or, for
// a broker without picomq_stream_reads_waiting, once the readers count
// themselves waiting (an SSE reader's first control event, a long-poll
// sent), and a few seconds more.
func waitForReaders(hc *http.Client, url string, n int, waiting *atomic.Int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		g := scrapeGauges(hc, url)
		if w, ok := g["picomq_stream_reads_waiting"]; ok && w >= float64(n) {
			return nil
		} else if !ok && waiting.Load() >= int64(n) {
			time.Sleep(3 * time.Second)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fewer than %d reads waiting after 2 minutes (the broker says %v, the readers %d)", n, g["picomq_stream_reads_waiting"], waiting.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// followSSE reads the stream with SSE from its tail until ctx ends,
// counting data events' lines, and reconnecting where the broker ends the
// response. Its first control event counts it as waiting.
func followSSE(ctx context.Context, hc *http.Client, url string, delivered, waiting *atomic.Int64) {
	offset, counted := "now", false
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"?live=sse&offset="+offset, nil)
		resp, err := hc.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		br := bufio.NewReader(resp.Body)
		event := ""
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:") && event == "data":
				delivered.Add(1)
			case strings.HasPrefix(line, "data:") && event == "control":
				if !counted {
					counted = true
					waiting.Add(1)
				}
				if i := strings.Index(line, `"streamNextOffset":"`); i >= 0 {
					rest := line[i+len(`"streamNextOffset":"`):]
					if j := strings.IndexByte(rest, '"'); j > 0 {
						offset = rest[:j]
					}
				}
			}
		}
		resp.Body.Close()
	}
}

// followLongPoll long-polls the stream from its tail until ctx ends,
// polling again at once after each answer. Its first poll sent counts it
// as waiting.
func followLongPoll(ctx context.Context, hc *http.Client, url string, delivered, waiting *atomic.Int64) {
	offset := "now"
	for first := true; ctx.Err() == nil; first = false {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"?live=long-poll&offset="+offset, nil)
		if first {
			waiting.Add(1)
		}
		resp, err := hc.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && n > 0 {
			delivered.Add(1)
		}
		if next := resp.Header.Get("Stream-Next-Offset"); next != "" {
			offset = next
		}
	}
}

// scrapeGauges reads the broker's /metrics for its unlabelled samples.
func scrapeGauges(hc *http.Client, url string) metrics {
	return scrapeWith(hc, url, func(name string) bool { return !strings.Contains(name, "{") })
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
