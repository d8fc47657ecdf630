package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// readerBudgetBytes is what one idle live reader — a long-poll or an SSE
// response waiting for the next append — may cost the broker, in heap and
// goroutine stacks (issue 28: 10,000 readers must fit in 1.5 GB with the
// rest of the broker). `go run ./test/bench -readers 4000` prints the
// exact figure of the real binary.
const readerBudgetBytes = 100_000

// TestIdleLiveReadersFitTheirBudget opens 500 SSE responses, then 500
// long-polls, on one stream of a broker in this process, waits each time
// until every one waits for records, and fails when the broker's heap and
// stacks grew by more than the budget per reader of either kind. The readers are raw connections that
// send their request and read nothing, so what grows is the broker's.
func TestIdleLiveReadersFitTheirBudget(t *testing.T) {
	const sse, longPolls = 500, 500
	base, _ := started(t, "--data-dir", t.TempDir(), "--long-poll-timeout", "5m")
	url := base + "/v1/stream/readers/idle"
	if resp, body := do(t, http.MethodPut, url, "application/octet-stream", nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s %s", resp.Status, body)
	}
	// One reader of each kind first, so that what every broker allocates
	// once (pools, the handlers' first use) is not counted per reader.
	warm := openReaders(t, base, "/v1/stream/readers/idle?offset=now&live=sse", 1)
	warm = append(warm, openReaders(t, base, "/v1/stream/readers/idle?offset=now&live=long-poll", 1)...)
	waitForWaitingReads(t, base, 2)
	before := footprint()
	conns := openReaders(t, base, "/v1/stream/readers/idle?offset=now&live=sse", sse)
	waitForWaitingReads(t, base, 2+sse)
	mid := footprint()
	conns = append(conns, openReaders(t, base, "/v1/stream/readers/idle?offset=now&live=long-poll", longPolls)...)
	waitForWaitingReads(t, base, 2+sse+longPolls)
	after := footprint()

	for _, kind := range []struct {
		name     string
		from, to usage
		n        int
	}{{"SSE response", before, mid, sse}, {"long-poll", mid, after, longPolls}} {
		heap, stacks := (kind.to.heap-kind.from.heap)/kind.n, (kind.to.stacks-kind.from.stacks)/kind.n
		t.Logf("per idle %s: %d bytes (heap %d, stacks %d; %d goroutines for %d)", kind.name, heap+stacks, heap, stacks, kind.to.goroutines-kind.from.goroutines, kind.n)
		if heap+stacks > readerBudgetBytes {
			t.Errorf("an idle %s costs the broker %d bytes of heap and stacks, over the budget of %d", kind.name, heap+stacks, readerBudgetBytes)
		}
	}
	for _, c := range append(conns, warm...) {
		_ = c.Close()
	}
}

type usage struct{ heap, stacks, goroutines int }

// footprint is this process's heap in use and goroutine stacks after a
// collection.
func footprint() usage {
	runtime.GC()
	runtime.GC() // the first one's sweep and cleanups done
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{heap: int(ms.HeapInuse), stacks: int(ms.StackInuse), goroutines: runtime.NumGoroutine()}
}

// openReaders opens n connections, each sending a GET of path and reading
// nothing back.
func openReaders(t *testing.T, base, path string, n int) []net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

// waitForWaitingReads waits until the broker's picomq_stream_reads_waiting
// says n.
func waitForWaitingReads(t *testing.T, base string, n int) {
	t.Helper()
	want := fmt.Sprintf("picomq_stream_reads_waiting %d", n)
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/metrics")
		if err == nil {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "picomq_stream_reads_waiting ") {
					last = sc.Text()
				}
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if last == want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("reads waiting: %q after 60s, want %q", last, want)
}

// TestHeapProfileShowsTheHeapAsItIs: a heap profile taken right after a
// large allocation shows it — the profiler collects first — instead of the
// heap of the last collection before it.
func TestHeapProfileShowsTheHeapAsItIs(t *testing.T) {
	base, _ := started(t, "--data-dir", t.TempDir(), "--pprof")
	footprint()
	held := allocateForProfile(48 << 20)
	resp, err := http.Get(base + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	profile, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(held)
	// debug=1: "<inuse objects>: <inuse bytes> [...] @ pcs" then the
	// stack, one "#\t<pc>\t<function>..." line a frame.
	found := false
	for _, rec := range strings.Split(string(profile), "\n\n") {
		var objects, bytes int64
		if _, err := fmt.Sscanf(rec, "%d: %d", &objects, &bytes); err == nil && bytes >= 48<<20 && strings.Contains(rec, "allocateForProfile") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the heap profile does not show the 48 MiB just allocated and held:\n%.2000s", profile)
	}
}

//go:noinline
func allocateForProfile(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 1
	}
	return b
}
