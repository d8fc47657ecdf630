package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// countingTransport counts the requests per method and path.
type countingTransport struct {
	next  http.RoundTripper
	mu    sync.Mutex
	paths map[string]int
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.paths[req.Method+" "+req.URL.Path]++
	c.mu.Unlock()
	return c.next.RoundTrip(req)
}

func (c *countingTransport) count(method, path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paths[method+" "+path]
}

// fakeBroker is a broker for the client's edge cases: appends answers
// POST /v1/appends; every stream exists with one partition; a single
// append is counted in single and answered at offset fakeFirst.
func fakeBroker(t *testing.T, appends http.HandlerFunc) (*client.Client, *atomic.Int64) {
	t.Helper()
	single := &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == wire.AppendsPath:
			appends(w, r)
		case strings.HasPrefix(r.URL.Path, wire.StreamsPrefix):
			writeJSON(w, `{"name":"`+strings.TrimPrefix(r.URL.Path, wire.StreamsPrefix)+`","partitionCount":1,"policy":{}}`)
		case strings.HasPrefix(r.URL.Path, wire.LogPrefix) && r.Method == http.MethodPost:
			single.Add(1)
			writeJSON(w, `{"partition":0,"first":7,"last":7,"next":8}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, client.WithAppendsInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	return c, single
}

// fakeFirst is the offset fakeBroker gives a single append.
const fakeFirst = 7

func writeJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", wire.JSONContentType)
	io.WriteString(w, body)
}

func writeProblem(w http.ResponseWriter, status int, e *errs.Error) {
	body, _ := errs.Marshal(e)
	w.Header().Set("Content-Type", wire.ProblemContentType)
	w.WriteHeader(status)
	w.Write(body)
}

// TestConcurrentAppendsShareRequests: with one append request out at a
// time, 64 goroutines appending 20 records each need far fewer requests
// than appends, and every append still gets its own offsets: all distinct,
// together exactly 0..N-1, each readable with its own payload.
func TestConcurrentAppendsShareRequests(t *testing.T) {
	needBroker(t)
	ct := &countingTransport{next: transport, paths: map[string]int{}}
	c, err := client.New(broker.url(), client.WithHTTPClient(&http.Client{Transport: ct}), client.WithAppendsInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxTimeout()
	defer cancel()
	name := uniqueName(t)
	s, err := c.Open(ctx, name, client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 64, 20
	offsets := make([][]stream.Offset, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				res, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte{byte(w), byte(i)}}})
				if err != nil {
					t.Error(err)
					return
				}
				offsets[w] = append(offsets[w], res.First)
			}
		})
	}
	wg.Wait()
	var all []stream.Offset
	for _, o := range offsets {
		if !slices.IsSorted(o) {
			t.Fatalf("one goroutine's appends got offsets out of order: %v", o)
		}
		all = append(all, o...)
	}
	slices.Sort(all)
	for i, o := range all {
		if o != stream.Offset(i) {
			t.Fatalf("offsets are not exactly 0..%d: %v", writers*each-1, all)
		}
	}
	es, err := s.Read(ctx, 0, 0, writers*each)
	if err != nil || len(es) != writers*each {
		t.Fatalf("read %d entries, %v", len(es), err)
	}
	for w := range writers {
		for i, o := range offsets[w] {
			if p := es[o].Record.Payload; len(p) != 2 || p[0] != byte(w) || p[1] != byte(i) {
				t.Fatalf("offset %d holds %v, want writer %d's append %d", o, p, w, i)
			}
		}
	}
	shared, single := ct.count("POST", wire.AppendsPath), ct.count("POST", wire.LogPrefix+name)
	if single != 0 || shared == 0 || shared > writers*each/4 {
		t.Fatalf("%d shared and %d single append requests for %d appends", shared, single, writers*each)
	}
	t.Logf("%d appends in %d requests", writers*each, shared)

	// A refusal is the append's own, with its code and fields.
	_, err = s.Append(ctx, []stream.RecordValue{})
	if !errors.Is(err, stream.InvalidBatchSize) {
		t.Fatalf("empty batch: %v", err)
	}
	missing, err := c.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Append(ctx, []stream.RecordValue{{Payload: []byte("x")}}); !errors.Is(err, meta.StreamNotFound) {
		t.Fatalf("append to a deleted stream: %v", err)
	}
}

// TestAppendsFallBackAlone: against a broker without /v1/appends (an older
// one), the first shared request's 404 turns sharing off and the append
// is sent on its own.
func TestAppendsFallBackAlone(t *testing.T) {
	c, single := fakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, wire.RouteNotFound.With("path", r.URL.Path))
	})
	s, err := c.Stream(context.Background(), "old")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res, err := s.Append(context.Background(), []stream.RecordValue{{Payload: []byte("x")}})
		if err != nil || res.First != fakeFirst {
			t.Fatalf("append: %+v, %v", res, err)
		}
	}
	if single.Load() != 2 {
		t.Fatalf("%d single appends, want 2", single.Load())
	}
}

// TestSharedRequestOverTheBodyLimitGoesAlone: a broker whose body limit is
// below a shared request, though above each append in it, refuses the
// request; its appends are then sent alone and succeed.
func TestSharedRequestOverTheBodyLimitGoesAlone(t *testing.T) {
	var shared atomic.Int64
	c, single := fakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		if shared.Add(1) == 1 {
			time.Sleep(50 * time.Millisecond) // the other appends queue meanwhile
		}
		body, _ := io.ReadAll(r.Body)
		if items, err := wire.DecodeAppends(body); err == nil && len(items) > 1 {
			writeProblem(w, http.StatusRequestEntityTooLarge, wire.BodyTooLarge.With("maxBytes", 10))
			return
		}
		writeJSON(w, `{"results":[{"partition":0,"first":1,"last":1,"next":2}]}`)
	})
	s, err := c.Stream(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := s.Append(context.Background(), []stream.RecordValue{{Payload: []byte("x")}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if shared.Load() < 2 || single.Load() == 0 {
		t.Fatalf("%d shared requests, %d single: want a refused shared request whose appends went alone", shared.Load(), single.Load())
	}
}

// TestSlowSharedRequestHandsItsSlotOn: an append the broker holds (waiting
// for room, say) keeps its own request open, but not the client's one
// request slot: an append to another stream goes out and is answered
// while the first still waits.
func TestSlowSharedRequestHandsItsSlotOn(t *testing.T) {
	unblock, held := make(chan struct{}), make(chan struct{})
	c, _ := fakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		items, _ := wire.DecodeAppends(body)
		if len(items) > 0 && items[0].Name == "slow" {
			close(held)
			<-unblock
		}
		writeJSON(w, `{"results":[{"partition":0,"first":0,"last":0,"next":1}]}`)
	})
	defer close(unblock) // before the server closes (t.Cleanup runs after)
	ctx := context.Background()
	slow, err := c.Stream(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	fast, err := c.Stream(ctx, "fast")
	if err != nil {
		t.Fatal(err)
	}
	slowDone := make(chan error, 1)
	go func() {
		_, err := slow.Append(ctx, []stream.RecordValue{{Payload: []byte("x")}})
		slowDone <- err
	}()
	<-held        // the slow append's request is out, holding the one slot
	for range 2 { // twice: the slot is not lost either
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := fast.Append(wait, []stream.RecordValue{{Payload: []byte("y")}})
		cancel()
		if err != nil {
			t.Fatalf("append behind a held one: %v", err)
		}
		select {
		case err := <-slowDone:
			t.Fatalf("the held append returned first: %v", err)
		default:
		}
	}
}

// TestAppendWaitingForRoomHoldsNoOtherAppend: against the real broker, an
// append to a full stream (waiting up to its BlockTimeout for room) does
// not hold an append to another stream, though both could share a
// request; the waiting one still waits, and then gets room once the full
// stream is trimmed.
func TestAppendWaitingForRoomHoldsNoOtherAppend(t *testing.T) {
	needBroker(t)
	c, err := client.New(broker.url(), client.WithHTTPClient(&http.Client{Transport: transport}), client.WithAppendsInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxTimeout()
	defer cancel()
	fullName, otherName := uniqueName(t), uniqueName(t)
	full, err := c.Open(ctx, fullName, client.StreamConfig{Policy: stream.PolicyValue{MaxBytes: 8, MaxRecordBytes: 8, BlockTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Open(ctx, otherName, client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Append(ctx, []stream.RecordValue{{Payload: []byte("12345678")}}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := full.Append(ctx, []stream.RecordValue{{Payload: []byte("x")}})
		waiting <- err
	}()
	for i := range 5 {
		if _, err := other.Append(ctx, []stream.RecordValue{{Payload: []byte{byte(i)}}}); err != nil {
			t.Fatalf("append beside a waiting one: %v", err)
		}
	}
	select {
	case err := <-waiting:
		t.Fatalf("the append to the full stream returned before room was made: %v", err)
	default:
	}
	if err := full.Trim(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("the waiting append after the trim: %v", err)
	}
}

// TestAloneAnswerIsSentAgainAlone: an append the broker answers "alone"
// (it would have waited for room) is sent again on its own, and its
// answer is that request's.
func TestAloneAnswerIsSentAgainAlone(t *testing.T) {
	c, single := fakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, `{"results":[{"alone":true}]}`)
	})
	s, err := c.Stream(context.Background(), "full")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Append(context.Background(), []stream.RecordValue{{Payload: []byte("x")}})
	if err != nil || res.First != fakeFirst || single.Load() != 1 {
		t.Fatalf("append answered alone: %+v, %v, %d single requests", res, err, single.Load())
	}
}
