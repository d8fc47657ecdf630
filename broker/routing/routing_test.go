package routing

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// fakeRegistry is the part of node.Broker the router reads: streams.
type fakeRegistry struct {
	node.Broker
	entries map[string]*node.Entry
}

func (f fakeRegistry) Get(name string) (*node.Entry, error) {
	if e, ok := f.entries[name]; ok {
		return e, nil
	}
	return nil, node.StreamNotFound.With("name", name)
}

// world is brokers a and b, each a Router in front of a Local handler that
// says who served a request; slot owners are a table the test changes.
type world struct {
	mu      sync.Mutex
	owner   map[int]string
	servers map[string]*httptest.Server
	routers map[string]*Router
	served  map[string][]string // member -> "METHOD path?query" served locally
	authz   map[string][]string // member -> Authorization of each request served locally
}

func newWorld(t *testing.T) *world { return newWorldTLS(t, false) }

// newWorldTLS is newWorld whose brokers serve HTTPS (withTLS), each router
// reaching the others' client ports with Config.TLS.
func newWorldTLS(t *testing.T, withTLS bool) *world {
	w := &world{owner: map[int]string{}, servers: map[string]*httptest.Server{}, routers: map[string]*Router{}, served: map[string][]string{}, authz: map[string][]string{}}
	var clientTLS *tls.Config
	pool := x509.NewCertPool()
	if withTLS {
		clientTLS = &tls.Config{RootCAs: pool}
	}
	reg := fakeRegistry{entries: map[string]*node.Entry{
		"one":  {Name: "one", Partitions: []uint64{10}},                   // slot 10%4 = 2
		"four": {Name: "four", Partitions: []uint64{20, 21, 22, 23}},      // slots 0, 1, 2, 3
		"sse":  {Name: "sse", Partitions: []uint64{13}, ContentType: "x"}, // slot 1
	}}
	for _, m := range []string{"a", "b"} {
		local := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			w.mu.Lock()
			w.served[m] = append(w.served[m], r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
			w.authz[m] = append(w.authz[m], r.Header.Get("Authorization"))
			w.mu.Unlock()
			switch {
			case r.URL.Path == wire.AppendsPath:
				body, _ := io.ReadAll(r.Body)
				items, _ := wire.DecodeAppends(body)
				var out wire.AppendsResult
				for _, it := range items {
					out.Results = append(out.Results, wire.AppendsItemResult{AppendResult: &wire.AppendResult{Partition: it.Partition, First: uint64(len(m))}})
				}
				_ = json.NewEncoder(rw).Encode(out)
			case r.URL.Query().Get("ahead") != "":
				rw.WriteHeader(http.StatusConflict) // OFFSET_AHEAD: past this copy's end
				_, _ = io.WriteString(rw, "ahead of "+m)
			case r.URL.Query().Get("hold") != "":
				select { // a long-poll still waiting when its proxy stops
				case <-r.Context().Done():
				case <-time.After(3 * time.Second):
				}
			case r.URL.Query().Get("live") == "sse":
				rw.Header().Set("Content-Type", "text/event-stream")
				for i := range 3 {
					fmt.Fprintf(rw, "data: %s-%d\n\n", m, i)
					rw.(http.Flusher).Flush()
					time.Sleep(20 * time.Millisecond) // paces the events: the test checks they arrive one by one
				}
			default:
				rw.Header().Set("Served-By", m)
				rw.Header().Set(dsUpToDate, "true")
				_, _ = io.WriteString(rw, m)
			}
		})
		rt := New(Config{
			Self: m, Local: local, Broker: reg,
			SlotOf: func(id uint64) int { return int(id % 4) },
			Owner: func(slot int) (string, bool) {
				w.mu.Lock()
				defer w.mu.Unlock()
				o, ok := w.owner[slot]
				return o, ok
			},
			Serving: func(slot int) bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return w.owner[slot] == m
			},
			Address: func(member string) (string, bool) {
				w.mu.Lock()
				defer w.mu.Unlock()
				s, ok := w.servers[member]
				if !ok {
					return "", false
				}
				u, _ := url.Parse(s.URL)
				return u.Host, true
			},
			TLS: clientTLS,
		})
		w.routers[m] = rt
		srv := httptest.NewUnstartedServer(rt)
		if withTLS {
			srv.StartTLS()
			pool.AddCert(srv.Certificate())
		} else {
			srv.Start()
		}
		w.servers[m] = srv
		t.Cleanup(w.servers[m].Close)
	}
	return w
}

func (w *world) set(slot int, member string) {
	w.mu.Lock()
	w.owner[slot] = member
	w.mu.Unlock()
}

func get(t *testing.T, base, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestRouterServesOrProxies(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "b")
	}
	a := w.servers["a"].URL
	// A read of a partition b owns, sent to a: served by b.
	if code, body, _ := get(t, a, "/v1/log/one?from=0"); code != 200 || body != "b" {
		t.Fatalf("read through a: %d %q, want b's answer", code, body)
	}
	// Metadata and admin are a's own.
	if code, body, _ := get(t, a, "/v1/log/one:committed?group=g"); code != 200 || body != "a" {
		t.Fatalf("committed through a: %d %q, want a's", code, body)
	}
	if code, body, _ := get(t, a, "/v1/admin/streams/one"); body != "a" || code != 200 {
		t.Fatalf("admin through a: %d %q", code, body)
	}
	// The partition named picks the slot: partition 3 of "four" is slot 3.
	w.set(3, "a")
	if _, body, _ := get(t, a, "/v1/log/four?partition=3"); body != "a" {
		t.Fatalf("partition a owns: served by %q", body)
	}
	if _, body, _ := get(t, w.servers["b"].URL, "/v1/log/four?partition=3"); body != "a" {
		t.Fatalf("partition a owns, asked of b: served by %q", body)
	}
	// No live owner: 503 with Retry-After.
	w.mu.Lock()
	delete(w.owner, 2)
	w.mu.Unlock()
	if code, body, h := get(t, a, "/v1/log/one"); code != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, "NO_SLOT_OWNER") {
		t.Fatalf("no owner: %d %q %v", code, body, h)
	}
}

// TestRouterRetriesWhenTheOwnerMoved: b is asked for a slot it no longer
// serves (it moved to a while the request was on its way): b refuses it,
// and the proxy sends it once more, to the new owner.
func TestRouterRetriesWhenTheOwnerMoved(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.set(2, "b")
	// a's view says b owns slot 2; b's says it does not serve it.
	rb := w.routers["b"]
	rb.cfg.Serving = func(int) bool { return false }
	go func() {
		time.Sleep(100 * time.Millisecond) // the Lease moves while the retry waits for it
		w.set(2, "a")
	}()
	code, body, _ := get(t, w.servers["a"].URL, "/v1/log/one")
	if code != 200 || body != "a" {
		t.Fatalf("after the owner moved: %d %q, want a's answer", code, body)
	}
	// A request routed to a broker that does not serve its slot is never
	// proxied further: it is refused.
	req, _ := http.NewRequest("GET", w.servers["b"].URL+"/v1/log/one", nil)
	req.Header.Set(RouteHeader, "b;2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a routed request for a slot not served: %d, want 421", resp.StatusCode)
	}
	// Slot -1 is a group of appends' alone: on any other route (a client
	// that read member ids from the node status, say) it is refused, never
	// served here as if routed.
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		req, _ = http.NewRequest(m, w.servers["b"].URL+"/v1/stream/one", nil)
		req.Header.Set(RouteHeader, "b;-1")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Fatalf("%s routed with slot -1: %d, want 421", m, resp.StatusCode)
		}
	}
}

// TestRouterWaitsForTheNextOwner: a read that arrives while its slot is
// between owners (a hand-off: the old holder let it go, nobody serves it
// yet) waits for the next one instead of failing at once, and is served
// there; a slot nobody takes within the wait still gets NO_SLOT_OWNER.
func TestRouterWaitsForTheNextOwner(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.servers["a"].URL
	go func() {
		time.Sleep(300 * time.Millisecond) // b takes slot 2 while the read waits
		w.set(2, "b")
	}()
	if code, body, _ := get(t, a, "/v1/log/one?from=0"); code != 200 || body != "b" {
		t.Fatalf("read during a hand-off: %d %q, want b's answer", code, body)
	}
	// a holds the Lease of slot 3 but does not serve it yet (it is opening
	// the partition): a read waits until it does.
	w.set(3, "a")
	var serving atomic.Bool
	ra := w.routers["a"]
	serve := ra.cfg.Serving
	ra.cfg.Serving = func(s int) bool { return serve(s) && (s != 3 || serving.Load()) }
	go func() {
		time.Sleep(300 * time.Millisecond)
		serving.Store(true)
	}()
	if code, body, _ := get(t, a, "/v1/log/four?partition=3"); code != 200 || body != "a" {
		t.Fatalf("read while its slot is being taken here: %d %q, want a's answer", code, body)
	}
	// Nobody takes slot 0: refused after the wait.
	start := time.Now()
	if code, body, _ := get(t, a, "/v1/log/four?partition=0"); code != 503 || !strings.Contains(body, "NO_SLOT_OWNER") {
		t.Fatalf("slot nobody takes: %d %q", code, body)
	}
	if waited := time.Since(start); waited < ownerWait {
		t.Fatalf("refused after %s, before the wait of %s ran out", waited, ownerWait)
	}
}

// TestRouterStreamsSSE: server-sent events through a proxy arrive as they
// are sent, not when the response ends.
func TestRouterStreamsSSE(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.set(1, "b")
	resp, err := http.Get(w.servers["a"].URL + "/v1/stream/sse?offset=-1&live=sse")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: b-0\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
}

// TestRouterSplitsAppends: the items of one appends request go to their
// partitions' owners, decided here for items that name no partition, and
// come back in order.
func TestRouterSplitsAppends(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.set(0, "a")
	w.set(1, "b")
	w.set(2, "a")
	w.set(3, "b")
	keyed := wire.EncodeRecords([]stream.RecordValue{{Key: []byte("k"), Payload: []byte("v")}})
	kp := stream.PartitionOf([]byte("k"), 4)
	var body []byte
	body = wire.AppendItemTo(body, "four", 1, []byte("x"))    // b
	body = wire.AppendItemTo(body, "four", 0, []byte("x"))    // a
	body = wire.AppendItemTo(body, "one", -1, []byte("x"))    // slot 2: a
	body = wire.AppendItemTo(body, "four", -1, keyed)         // the key's partition
	body = wire.AppendItemTo(body, "missing", 0, []byte("x")) // refused where it lands: here
	w.mu.Lock()
	delete(w.owner, 3) // slot 3 (partition 3 of four) unowned: sent back Alone, to wait for an owner as a lone append does
	w.mu.Unlock()
	body = wire.AppendItemTo(body, "four", 3, []byte("x"))
	resp, err := http.Post(w.servers["a"].URL+wire.AppendsPath, wire.AppendsContentType, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res wire.AppendsResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || len(res.Results) != 6 {
		t.Fatalf("answer %+v, %v", res, err)
	}
	if last := res.Results[5]; last.AppendResult != nil || last.Error != nil || !last.Alone {
		t.Errorf("item of an unowned slot: %+v %s, want Alone (the client sends it on its own, which waits for the next owner)", last.AppendResult, last.Error)
	}
	res.Results = res.Results[:5]
	// The fake's First says who served (len of the member's name is 1 for
	// both; the partition says what was decided).
	wantPart := []int{1, 0, 0, kp, 0}
	for i, r := range res.Results {
		if r.AppendResult == nil || r.Partition != wantPart[i] {
			t.Errorf("item %d: %+v, want partition %d", i, r.AppendResult, wantPart[i])
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.served["b"]) != 1 {
		t.Errorf("b served %v, want one appends request (its items)", w.served["b"])
	}
}

// TestStaleReadsWithoutQuorum: with no live owner and the cluster's
// quorum lost, a read is answered from this broker's copy, marked stale; a
// write is refused. Otherwise the read waits for the owner (503): no read
// goes back in time.
func TestStaleReadsWithoutQuorum(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ra := w.routers["a"]
	var lost atomic.Bool
	ra.cfg.QuorumLost = lost.Load
	a := w.servers["a"].URL
	code, body, h := get(t, a, "/v1/log/one?from=0")
	if code != 503 || h.Get(StaleHeader) != "" {
		t.Fatalf("no owner, but a leader: %d %q, want 503 (no stale read)", code, body)
	}
	lost.Store(true)
	code, body, h = get(t, a, "/v1/log/one?from=0")
	if code != 200 || body != "a" || h.Get(StaleHeader) != "true" || h.Get(dsUpToDate) != "" {
		t.Fatalf("no quorum: %d %q %v, want a's copy, marked stale, claiming no end", code, body, h)
	}
	// A stale copy never says where the stream ends: not by waiting there,
	// not by refusing an offset past its own end.
	for _, path := range []string{"/v1/log/one?from=0&wait=1s", "/v1/stream/one?offset=-1&live=long-poll", "/v1/log/one?from=9&ahead=1"} {
		code, body, h = get(t, a, path)
		if code != 503 || !strings.Contains(body, "NO_SLOT_OWNER") || h.Get(StaleHeader) != "" {
			t.Errorf("no quorum, %s: %d %q %v, want 503 NO_SLOT_OWNER, not a stale answer", path, code, body, h)
		}
	}
	resp, err := http.Post(a+"/v1/log/one", "application/octet-stream", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("a write with no quorum: %d, want 503", resp.StatusCode)
	}
}

// TestDrainAnswersProxiedRequests: a broker that stops ends the reads it
// proxies with an answer that says so — 503, which the client sends again,
// never an empty 200 that a long-poll would read as "nothing new" — and
// lets the writes it proxies finish with the owner's answer, which a cut
// could only have turned into PROXY_OUTCOME_UNKNOWN.
func TestDrainAnswersProxiedRequests(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.set(2, "b")
	a := w.servers["a"].URL
	type answer struct {
		code int
		body string
	}
	send := func(method string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest(method, a+"/v1/log/one?hold=1", strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- answer{-1, err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			out <- answer{resp.StatusCode, string(b)}
		}()
		return out
	}
	read, write := send(http.MethodGet), send(http.MethodPost)
	// Both reach b and wait there.
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		n := len(w.served["b"])
		w.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the requests did not reach the owner: %d did", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.routers["a"].Drain()
	if got := <-read; got.code != http.StatusServiceUnavailable || !strings.Contains(got.body, "NOT_READY") {
		t.Errorf("a proxied read ended by the drain: %d %s, want 503 NOT_READY", got.code, got.body)
	}
	select {
	case got := <-write:
		t.Fatalf("a proxied write ended with the drain: %d %s, want it left to the owner", got.code, got.body)
	default:
	}
	if got := <-write; got.code != http.StatusOK {
		t.Errorf("a proxied write after the drain: %d %s, want the owner's 200", got.code, got.body)
	}
}

// TestAdminGetCatchesUpFirst: an admin GET answers from this broker's copy
// (the partitions' heads, the producers): it catches up with the leader
// first, whether the stream is known here or not (one created through
// another broker a moment ago may not be here yet).
func TestAdminGetCatchesUpFirst(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var caught atomic.Int32
	w.routers["a"].cfg.Catchup = func(context.Context) error { caught.Add(1); return nil }
	a := w.servers["a"].URL
	if code, _, _ := get(t, a, "/v1/admin/streams/one"); code != 200 || caught.Load() != 1 {
		t.Fatalf("a known stream: %d, %d catch-ups; want 200 after one", code, caught.Load())
	}
	if code, _, _ := get(t, a, "/v1/admin/streams/not-yet-here"); code != 200 || caught.Load() != 2 {
		t.Fatalf("a stream not found here: %d, %d catch-ups; want one before the local answer", code, caught.Load())
	}
}

// TestRouterProxiesOverTLSWithTheToken: with TLS, a read and the items of
// an appends request reach their owner over HTTPS, verified against the
// CA, carrying the client's Authorization for the owner to check again.
func TestRouterProxiesOverTLSWithTheToken(t *testing.T) {
	t.Parallel()
	w := newWorldTLS(t, true)
	for s := range 4 {
		w.set(s, "b")
	}
	hc := w.servers["a"].Client()
	req, _ := http.NewRequest("GET", w.servers["a"].URL+"/v1/log/one?from=0", nil)
	req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "b" {
		t.Fatalf("read through a: %d %q, want b's answer", resp.StatusCode, body)
	}
	items := wire.AppendItemTo(nil, "four", 1, []byte("x"))
	req, _ = http.NewRequest("POST", w.servers["a"].URL+wire.AppendsPath, strings.NewReader(string(items)))
	req.Header.Set("Content-Type", wire.AppendsContentType)
	req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.authz["b"]) != 2 {
		t.Fatalf("b served %v, want the read and the appends", w.served["b"])
	}
	for i, a := range w.authz["b"] {
		if a != "Bearer tok-0123456789abcdef" {
			t.Errorf("request %d (%s) reached b with Authorization %q", i, w.served["b"][i], a)
		}
	}
}

// failingCatchup is a catch-up that fails while fail is set.
func failingCatchup(fail *atomic.Bool, calls *atomic.Int32) func(context.Context) error {
	return func(context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("no metadata leader known")
		}
		return nil
	}
}

// servedCount is how many requests m's Local handler served.
func (w *world) servedCount(m string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.served[m])
}

// TestNoLocalAnswerAfterAFailedCatchup: once a catch-up failed (a broker
// restarted, or cut from the leader), the router answers nothing from its
// copy — no read, no head, no listing, no offsets, no "not found", not
// even by routing on it — but 503 METADATA_CATCHING_UP, until a catch-up
// succeeds.
func TestNoLocalAnswerAfterAFailedCatchup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "a")
	}
	w.set(1, "b")
	var fail atomic.Bool
	var calls atomic.Int32
	fail.Store(true)
	ra := w.routers["a"]
	ra.cfg.Catchup = failingCatchup(&fail, &calls)
	var lost atomic.Bool
	lost.Store(true) // never caught up: no stale read either
	ra.cfg.QuorumLost = lost.Load
	a := w.servers["a"].URL
	paths := []string{
		"/v1/log/one?from=0",            // a partition a owns
		"/v1/log/sse?from=0",            // one b owns: routed on a's copy
		"/v1/log/missing?from=0",        // never "not found" from a stale copy
		"/v1/log/four?partition=9",      // nor "no such partition"
		"/v1/log/one:committed?group=g", // a consumer group's offsets
		"/v1/stream/one?offset=-1",      // the Durable Streams protocol
		"/v1/stream/missing?offset=-1",
		"/v1/admin/streams/one", // a stream's heads
		"/v1/admin/streams/missing",
		"/v1/admin/streams", // the listing
	}
	refusedAll := func(when string) {
		t.Helper()
		for _, path := range paths {
			code, body, h := get(t, a, path)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "METADATA_CATCHING_UP") || h.Get("Retry-After") == "" || h.Get(StaleHeader) != "" {
				t.Errorf("%s, %s: %d %q, want 503 METADATA_CATCHING_UP with Retry-After", when, path, code, body)
			}
		}
		if n := w.servedCount("a") + w.servedCount("b"); n != 0 {
			t.Errorf("%s: %d requests served from a copy: %v", when, n, w.served)
		}
	}
	refusedAll("before any catch-up succeeded")
	// The Go client's appends: the item is refused alone, never "not found".
	resp, err := http.Post(a+wire.AppendsPath, wire.AppendsContentType, strings.NewReader(string(wire.AppendItemTo(nil, "missing", -1, []byte("x")))))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "METADATA_CATCHING_UP") || w.servedCount("a") != 0 {
		t.Errorf("appends while behind: %d %s, want the item refused METADATA_CATCHING_UP", resp.StatusCode, raw)
	}
	if calls.Load() == 0 {
		t.Fatal("no catch-up was tried")
	}

	fail.Store(false)
	if code, body, _ := get(t, a, "/v1/log/one?from=0"); code != 200 || body != "a" {
		t.Fatalf("caught up: %d %q, want a's answer", code, body)
	}
	if code, _, _ := get(t, a, "/v1/admin/streams/one"); code != 200 {
		t.Fatalf("caught up, admin get: %d", code)
	}
	if code, body, _ := get(t, a, "/v1/log/sse?from=0"); code != 200 || body != "b" {
		t.Fatalf("caught up, b's partition: %d %q, want b's answer", code, body)
	}

	// It fails again (this broker lost the leader; the others carry on):
	// refused again, even what the last success would have allowed.
	fail.Store(true)
	lost.Store(false)
	w.mu.Lock()
	w.served = map[string][]string{}
	w.mu.Unlock()
	if code, body, _ := get(t, a, "/v1/admin/streams/one"); code != 503 || !strings.Contains(body, "METADATA_CATCHING_UP") {
		t.Fatalf("failed again: %d %q", code, body)
	}
	refusedAll("after a failure that followed a success")
}

// TestStaleReadNeedsACatchupSinceStart: with the quorum lost, a read is
// answered marked stale only by a broker that caught up once since it
// started: one that restarted cut off never vouched for its copy.
func TestStaleReadNeedsACatchupSinceStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ra := w.routers["a"]
	var fail atomic.Bool
	var calls atomic.Int32
	fail.Store(true)
	ra.cfg.Catchup = failingCatchup(&fail, &calls)
	ra.cfg.QuorumLost = func() bool { return true }
	a := w.servers["a"].URL
	if code, body, h := get(t, a, "/v1/log/one?from=0"); code != 503 || !strings.Contains(body, "METADATA_CATCHING_UP") || h.Get(StaleHeader) != "" {
		t.Fatalf("never caught up, quorum lost: %d %q, want 503 METADATA_CATCHING_UP", code, body)
	}
	fail.Store(false)
	if code, _, _ := get(t, a, "/v1/admin/streams/one"); code != 200 {
		t.Fatalf("catching up: %d", code)
	}
	fail.Store(true)
	if code, body, h := get(t, a, "/v1/log/one?from=0"); code != 200 || body != "a" || h.Get(StaleHeader) != "true" {
		t.Fatalf("caught up once, quorum lost: %d %q %v, want a's copy marked stale", code, body, h)
	}
	if code, body, _ := get(t, a, "/v1/log/missing?from=0"); code != 503 || !strings.Contains(body, "METADATA_CATCHING_UP") {
		t.Fatalf("quorum lost, a name not here: %d %q, want 503 METADATA_CATCHING_UP, not a stale \"not found\"", code, body)
	}
}

// A broker not caught up once since it started is not ready (the probe
// tries the catch-up); once it caught up, a later failed catch-up leaves
// readiness to the broker's own /readyz.
func TestReadyzWaitsForTheFirstCatchup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "a")
	}
	var fail atomic.Bool
	var calls atomic.Int32
	fail.Store(true)
	ra := w.routers["a"]
	ra.cfg.Catchup = failingCatchup(&fail, &calls)
	a := w.servers["a"].URL
	for range 2 {
		code, body, _ := get(t, a, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "NOT_READY") || !strings.Contains(body, "caught up") {
			t.Fatalf("never caught up: /readyz %d %q, want 503 NOT_READY", code, body)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d catch-ups tried by 2 probes, want 2", n)
	}
	// The broker's own refusal says more (removed, draining, storage
	// failed): it is passed on, and no catch-up is tried for it.
	local := ra.cfg.Local
	ra.cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/problem+json")
		rw.WriteHeader(http.StatusServiceUnavailable)
		_, _ = rw.Write([]byte(`{"code":"MEMBER_REMOVED"}`))
	})
	before := calls.Load()
	if code, body, h := get(t, a, "/readyz"); code != http.StatusServiceUnavailable || body != `{"code":"MEMBER_REMOVED"}` || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("the broker's own refusal: /readyz %d %q %v, want it passed on", code, body, h)
	}
	if calls.Load() != before {
		t.Error("a catch-up tried though the broker refused on its own")
	}
	ra.cfg.Local = local
	fail.Store(false)
	if code, body, _ := get(t, a, "/readyz"); code != 200 || body != "a" {
		t.Fatalf("caught up: /readyz %d %q, want the broker's own answer", code, body)
	}
	fail.Store(true)
	if code, body, _ := get(t, a, "/v1/admin/streams"); code != http.StatusServiceUnavailable {
		t.Fatalf("a catch-up failing again: listing %d %q, want refused", code, body)
	}
	before = calls.Load()
	if code, body, _ := get(t, a, "/readyz"); code != 200 || body != "a" {
		t.Errorf("caught up once, failing now: /readyz %d %q, want the broker's own answer", code, body)
	}
	if calls.Load() != before {
		t.Error("/readyz tried a catch-up after the first success")
	}
}

// A broker not yet serving its share of the slots since it started is not
// ready (Config.Settled), whatever its catch-up; once it was, it stays
// ready on that count.
func TestReadyzWaitsForTheShare(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "a")
	}
	var settled atomic.Bool
	ra := w.routers["a"]
	ra.cfg.Settled = settled.Load
	a := w.servers["a"].URL
	if code, body, _ := get(t, a, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NOT_READY") || !strings.Contains(body, "share of the slots") {
		t.Fatalf("not settled: /readyz %d %q, want 503 NOT_READY naming the share", code, body)
	}
	settled.Store(true)
	if code, body, _ := get(t, a, "/readyz"); code != 200 || body != "a" {
		t.Fatalf("settled: /readyz %d %q, want the broker's own answer", code, body)
	}
}

// ownershipRefusal stands for broker/ownership's NOT_SLOT_OWNER (that
// package is not linked here).
var ownershipRefusal = errs.Static(0x00_10_04_01, "NOT_SLOT_OWNER", "This broker does not own the stream's slot", "broker/ownership (stand-in)", 503, 75)

// TestWriteReroutedWhenTheSlotLeftWhileServedHere: a write a served
// locally is refused because its slot moved to b meanwhile (a hand-off
// began after the routing: ownership's NOT_SLOT_OWNER, or an open cut
// short by a leader change, METADATA_UNAVAILABLE op=metalog.apply.open):
// the router sends it to b, with its body, and the client gets b's
// answer. Any other refusal, or one for a slot still served here, is the
// client's.
func TestWriteReroutedWhenTheSlotLeftWhileServedHere(t *testing.T) {
	t.Parallel()
	for _, refusal := range []*errs.Error{
		ownershipRefusal.With("slot", 2, "reason", "handing off"),
		node.MetadataUnavailable.With("op", "metalog.apply.open", "reason", "a leader change"),
	} {
		w := newWorld(t)
		w.set(2, "a")
		ra := w.routers["a"]
		local := ra.cfg.Local
		var bodies []string
		ra.cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				b, _ := io.ReadAll(r.Body)
				bodies = append(bodies, string(b))
				w.set(2, "b") // the hand-off began while this was served
				frontend.WriteProblem(rw, r, slog.New(slog.DiscardHandler), refusal, 503)
				return
			}
			local.ServeHTTP(rw, r)
		})
		resp, err := http.Post(w.servers["a"].URL+"/v1/log/one", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != "b" {
			t.Fatalf("%s: %d %q, want b's answer", refusal.Name(), resp.StatusCode, got)
		}
		if len(bodies) != 1 || bodies[0] != "payload" {
			t.Fatalf("%s: a's handler saw %q", refusal.Name(), bodies)
		}
		w.mu.Lock()
		servedB := slices.Clone(w.served["b"])
		w.mu.Unlock()
		if len(servedB) != 1 || !strings.HasPrefix(servedB[0], "POST /v1/log/one") {
			t.Fatalf("%s: b served %v", refusal.Name(), servedB)
		}
	}

	// Routed to a by b's proxy and refused there for the move: a answers
	// 421 at once (looking again finds only itself for a routed request),
	// and b, the slot's new owner, serves it — well within the ownerWait a
	// would otherwise have spent retrying itself, past a client's patience.
	{
		w := newWorld(t)
		w.set(2, "a")
		ra := w.routers["a"]
		local := ra.cfg.Local
		var refused atomic.Int32
		ra.cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				refused.Add(1)
				w.set(2, "b")
				frontend.WriteProblem(rw, r, slog.New(slog.DiscardHandler), ownershipRefusal.With("slot", 2, "reason", "handing off"), 503)
				return
			}
			local.ServeHTTP(rw, r)
		})
		start := time.Now()
		resp, err := http.Post(w.servers["b"].URL+"/v1/log/one", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != "b" || refused.Load() != 1 {
			t.Fatalf("routed and refused for the move: %d %q after %d refusals at a, want b's answer after one", resp.StatusCode, got, refused.Load())
		}
		if d := time.Since(start); d >= ownerWait {
			t.Fatalf("routed and refused for the move: answered after %v, the ownerWait a spent retrying itself", d)
		}
	}

	// Routed to a by b's proxy, refused there for the move, and b's open
	// of the slot it now serves refused once for a state that is past (the
	// slot "not held" a moment before): b looks again instead of handing
	// the client that refusal, and serves it.
	{
		w := newWorld(t)
		w.set(2, "a")
		ra, rb := w.routers["a"], w.routers["b"]
		local := ra.cfg.Local
		ra.cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				w.set(2, "b")
				frontend.WriteProblem(rw, r, slog.New(slog.DiscardHandler), ownershipRefusal.With("slot", 2, "reason", "handing off"), 503)
				return
			}
			local.ServeHTTP(rw, r)
		})
		var opens atomic.Int32
		rb.cfg.Fresh = func(context.Context, uint64) error {
			if opens.Add(1) == 1 {
				return ownershipRefusal.With("slot", 2, "reason", "not held")
			}
			return nil
		}
		resp, err := http.Post(w.servers["b"].URL+"/v1/log/one", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != "b" || opens.Load() < 2 {
			t.Fatalf("b's open refused once for a past state: %d %q after %d opens at b, want b's answer", resp.StatusCode, got, opens.Load())
		}
	}

	// Refused for a state of the slot that is past by the time the router
	// looks — a hand-off called off, or a slot not held yet that a
	// restarted broker has taken back — by the open (Fresh) or by the
	// write: the slot is served here now, so the write is sent again, here,
	// and served.
	for _, reason := range []string{"handing off", "not held"} {
		for _, where := range []string{"open", "write"} {
			w := newWorld(t)
			w.set(2, "a")
			ra := w.routers["a"]
			local := ra.cfg.Local
			var refused atomic.Int32
			refusal := ownershipRefusal.With("slot", 2, "reason", reason)
			if where == "open" {
				ra.cfg.Fresh = func(context.Context, uint64) error {
					if refused.Add(1) == 1 {
						return refusal
					}
					return nil
				}
			} else {
				ra.cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodPost && refused.Add(1) == 1 {
						frontend.WriteProblem(rw, r, slog.New(slog.DiscardHandler), refusal, 503)
						return
					}
					local.ServeHTTP(rw, r)
				})
			}
			resp, err := http.Post(w.servers["a"].URL+"/v1/log/one", "text/plain", strings.NewReader("payload"))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(got) != "a" || refused.Load() != 2 {
				t.Fatalf("refused %q by the %s, the slot served here since: %d %q after %d tries at a, want a's answer on the second", reason, where, resp.StatusCode, got, refused.Load())
			}
		}
	}

	// The slot still served here, or a refusal that may have written: the
	// client gets it.
	for name, c := range map[string]struct {
		refusal *errs.Error
		moves   bool
	}{
		"still here":     {ownershipRefusal.With("slot", 2), false},
		"a checkpoint's": {node.MetadataUnavailable.With("op", "metalog.apply.checkpoint"), true},
	} {
		w := newWorld(t)
		w.set(2, "a")
		ra := w.routers["a"]
		ra.cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if c.moves {
				w.set(2, "b")
			}
			frontend.WriteProblem(rw, r, slog.New(slog.DiscardHandler), c.refusal, 503)
		})
		resp, err := http.Post(w.servers["a"].URL+"/v1/log/one", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(got), c.refusal.Name()) {
			t.Errorf("%s: %d %q, want the refusal passed on", name, resp.StatusCode, got)
		}
		w.mu.Lock()
		n := len(w.served["b"])
		w.mu.Unlock()
		if n != 0 {
			t.Errorf("%s: the write also went to b", name)
		}
	}
}

// TestAppendsItemsRefusedForAMoveGoAlone: in an appends request, an item
// its owner refused because the slot left it (NOT_SLOT_OWNER, or an open
// lost to a leader change) is answered Alone — the client sends it again
// on its own, routed to the next owner — whether a served it here (the
// whole request local) or b did; other refusals stay as they are.
func TestAppendsItemsRefusedForAMoveGoAlone(t *testing.T) {
	t.Parallel()
	refusals := []*errs.Error{
		nil,
		ownershipRefusal.With("slot", 2, "reason", "handing off"),
		node.MetadataUnavailable.With("op", "metalog.apply.open"),
		node.MetadataUnavailable.With("op", "metalog.apply.checkpoint"),
	}
	// Both answer types: JSON, and binary to a client that accepts it (the
	// owner's answer too, then: the router asks for it).
	for _, binary := range []bool{false, true} {
		for _, owner := range []string{"a", "b"} {
			w := newWorld(t)
			for s := range 4 {
				w.set(s, owner)
			}
			w.routers[owner].cfg.Local = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				var out wire.AppendsResult
				for _, e := range refusals {
					if e == nil {
						out.Results = append(out.Results, wire.AppendsItemResult{AppendResult: &wire.AppendResult{Partition: 0}})
						continue
					}
					raw, _ := errs.Marshal(e)
					out.Results = append(out.Results, wire.AppendsItemResult{Error: raw})
				}
				if binary && wire.AcceptsAppendsResult(r.Header.Get("Accept")) {
					rw.Header().Set("Content-Type", wire.AppendsResultContentType)
					_, _ = rw.Write(wire.EncodeAppendsResult(nil, out.Results))
					return
				}
				_ = json.NewEncoder(rw).Encode(out)
			})
			var body []byte
			for range refusals {
				body = wire.AppendItemTo(body, "one", 0, []byte("x"))
			}
			req, _ := http.NewRequest(http.MethodPost, w.servers["a"].URL+wire.AppendsPath, strings.NewReader(string(body)))
			req.Header.Set("Content-Type", wire.AppendsContentType)
			if binary {
				req.Header.Set("Accept", wire.AppendsResultContentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if ct := resp.Header.Get("Content-Type"); (ct == wire.AppendsResultContentType) != binary {
				t.Errorf("owner %s: answered %s to a client accepting binary: %v", owner, ct, binary)
			}
			var res wire.AppendsResult
			res.Results, err = wire.DecodeAppendsAnswer(resp.Header.Get("Content-Type"), raw)
			if err != nil || len(res.Results) != len(refusals) {
				t.Fatalf("owner %s: answer %+v, %v", owner, res, err)
			}
			if r := res.Results[0]; r.AppendResult == nil {
				t.Errorf("owner %s: the item served: %+v", owner, r)
			}
			for i := 1; i <= 2; i++ {
				if r := res.Results[i]; !r.Alone {
					t.Errorf("owner %s: item refused for a move (%s): %+v %s, want Alone", owner, refusals[i].Name(), r, r.Error)
				}
			}
			if r := res.Results[3]; r.Alone || !strings.Contains(string(r.Error), "METADATA_UNAVAILABLE") {
				t.Errorf("owner %s: a checkpoint's refusal: %+v %s, want it passed on", owner, r, r.Error)
			}
		}
	}
}
