package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
	"github.com/picomq/picomq/broker/stream/streamtest"
)

// transport is shared by every test's client: keep-alive connections are
// reused across the suite.
var transport = client.NewHTTPClient().Transport

// clockSync makes a broker run on a test's clock. The suite's clock lives
// in this process and moves only when a test advances it; the broker
// (started with --test-clock) reads a clock that stands still until PUT
// /v1/admin/clock sets it. So clockSync, as the client's RoundTripper,
// pushes the suite's clock before every request whenever it moved since it
// last pushed it (or since the broker restarted) — records are dated, and
// ages measured, exactly as the suite's clock says — and a poller pushes
// it too while the test is blocked in a request (an Append waiting for
// retention to make room, say), so the broker's maintenance sees the clock
// move.
type clockSync struct {
	clock  streamtest.Clock
	mu     sync.Mutex
	gen    int64
	last   int64
	pushes atomic.Int64
}

func (c *clockSync) push(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now().UnixNano()
	gen := broker.gen.Load()
	if gen == c.gen && now == c.last {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, broker.url()+wire.ClockPath+"?now="+strconv.FormatInt(now, 10), nil)
	if err != nil {
		return err
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("setting the broker's clock: HTTP %d", resp.StatusCode)
	}
	c.gen, c.last = gen, now
	c.pushes.Add(1)
	return nil
}

func (c *clockSync) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := c.push(req.Context()); err != nil {
		return nil, err
	}
	return transport.RoundTrip(req)
}

// newClockSync starts a clockSync whose poller runs until t ends.
func newClockSync(t *testing.T, clock streamtest.Clock) *clockSync {
	c := &clockSync{clock: clock, gen: -1}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = c.push(ctx) // a restart in progress fails it: the next tick retries
				cancel()
			}
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })
	return c
}

var streamSeq atomic.Int64

// uniqueName names a fresh stream after the test.
func uniqueName(t *testing.T) string {
	var b strings.Builder
	b.WriteString("suite/")
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '/', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	fmt.Fprintf(&b, "/%d", streamSeq.Add(1))
	return b.String()
}

// newClient is a client of the broker under test on clock.
func newClient(t *testing.T, clock streamtest.Clock) *client.Client {
	t.Helper()
	var rt http.RoundTripper = transport
	if clock != nil {
		rt = newClockSync(t, clock)
	}
	c, err := client.New(broker.url(), client.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEngineSuite runs the engine suite against the broker process: each
// factory call creates a fresh, uniquely named stream with the suite's
// policy through the admin API; Reopen restarts the broker process (SIGTERM,
// start again on the same data directory) and opens the stream anew.
func TestEngineSuite(t *testing.T) {
	needBroker(t)
	streamtest.Run(t, func(t *testing.T, policy stream.PolicyValue, clock streamtest.Clock) (streamtest.Engine, error) {
		c := newClient(t, clock)
		name := uniqueName(t)
		s, err := c.Open(t.Context(), name, client.StreamConfig{Policy: policy})
		if err != nil {
			if errors.Is(err, stream.StreamMisconfigured) {
				return streamtest.Engine{}, err // the suite checks the refusal
			}
			t.Fatalf("open %s: %v", name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := ctxTimeout()
			defer cancel()
			if err := c.DeleteStream(ctx, name); err != nil && !errors.Is(err, meta.StreamNotFound) {
				t.Errorf("delete %s: %v", name, err)
			}
			if t.Failed() {
				t.Logf("broker log (tail):\n%s", broker.logTail())
			}
		})
		return streamtest.Engine{
			Stream: s,
			Reopen: func(t *testing.T) stream.Stream {
				broker.restart(t)
				s, err := c.Stream(t.Context(), name)
				if err != nil {
					t.Fatalf("reopen %s: %v", name, err)
				}
				return s
			},
		}, nil
	})
}

// TestRemoteErrorsKeepFields: a refusal comes back as the same coded error,
// matching its static under errors.Is, with its fields and statuses intact.
func TestRemoteErrorsKeepFields(t *testing.T) {
	needBroker(t)
	ctx := t.Context()
	c := newClient(t, nil)
	name := uniqueName(t)
	s, err := c.Open(ctx, name, client.StreamConfig{Policy: stream.PolicyValue{MaxRecordBytes: 16, Partitions: 2}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, []stream.RecordValue{{Payload: []byte("ok")}, {Key: []byte("key"), Payload: []byte("SECRET-PAYLOAD")}})
	if !errors.Is(err, stream.RecordTooLarge) {
		t.Fatalf("Append = %v, want RECORD_TOO_LARGE", err)
	}
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("%T is not a coded error", err)
	}
	want := []errs.Field{{Key: "index", Value: int64(1)}, {Key: "size", Value: int64(17)}, {Key: "max", Value: int64(16)}}
	if got := e.Fields(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fields %#v, want %#v", got, want)
	}
	if e.DeclaredStatus() != 413 || e.ExitCode() != 78 || e.Name() != "RECORD_TOO_LARGE" || strings.Contains(e.Error(), "SECRET") {
		t.Fatalf("decoded %v (%d, %d)", e, e.DeclaredStatus(), e.ExitCode())
	}
	// The same value a local engine returns, field for field.
	_, local := stream.CheckBatch(stream.PolicyValue{MaxRecordBytes: 16}, []stream.RecordValue{{Payload: []byte("ok")}, {Key: []byte("key"), Payload: []byte("SECRET-PAYLOAD")}})
	if local.Error() != err.Error() {
		t.Fatalf("remote %q, local %q", err, local)
	}

	_, err = s.Read(ctx, 1, 5, 10)
	if !errors.Is(err, stream.OffsetAhead) {
		t.Fatalf("Read = %v", err)
	}
	if v, _ := errs.FieldOf(err, "next"); v != int64(0) {
		t.Fatalf("next = %#v", v)
	}
	if _, err := s.Bounds(ctx, 2); !errors.Is(err, stream.UnknownPartition) || errs.HTTPStatus(err) != 400 {
		t.Fatalf("Bounds(2) = %v", err)
	}

	// Broker refusals of the metadata layer match theirs too.
	if _, err := c.Stream(ctx, "no/such/stream"); !errors.Is(err, meta.StreamNotFound) {
		t.Fatalf("Stream(missing) = %v", err)
	}
	if _, err := c.Open(ctx, name, client.StreamConfig{Policy: stream.PolicyValue{Partitions: 3}}); !errors.Is(err, meta.StreamExists) {
		t.Fatalf("Open with another policy = %v", err)
	} else if f, _ := errs.FieldOf(err, "field"); f != "policy" {
		t.Fatalf("STREAM_EXISTS field = %v", f)
	}
	// Names that would escape their route are refused by the broker, never
	// read as another path, query or operation.
	for _, bad := range []string{"a/../b", "a:trim", "a?x=1", "a#b", "a%2Fb", "a//b", ""} {
		_, err := c.Stream(ctx, bad)
		if !errors.Is(err, stream.StreamMisconfigured) {
			t.Errorf("Stream(%q) = %v, want STREAM_MISCONFIGURED", bad, err)
		} else if f, _ := errs.FieldOf(err, "field"); f != "name" {
			t.Errorf("Stream(%q): field %v", bad, f)
		}
	}

	// A broker that cannot be reached is BROKER_UNREACHABLE wrapping the
	// cause; a ctx that ends returns its cause.
	dead, err := client.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.GetStream(ctx, "x"); !errors.Is(err, client.BrokerUnreachable) {
		t.Fatalf("unreachable broker: %v", err)
	}
	cause := errors.New("caller gave up")
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	if _, err := s.Bounds(cctx, 0); !errors.Is(err, cause) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if _, err := client.New("localhost:4437"); !errors.Is(err, stream.StreamMisconfigured) {
		t.Fatalf("New without scheme: %v", err)
	}
}

// TestAdminCalls: create, get, list, update and delete through the client.
func TestAdminCalls(t *testing.T) {
	needBroker(t)
	ctx := t.Context()
	c := newClient(t, nil)
	prefix := uniqueName(t) + "/"
	cfg := client.StreamConfig{ContentType: "application/json", Policy: stream.PolicyValue{Partitions: 2, RetainFor: time.Hour}, TTL: 24 * time.Hour}
	info, created, err := c.CreateStream(ctx, prefix+"a", cfg)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if info.Policy != cfg.Policy || info.TTL != cfg.TTL || info.ContentType != "application/json" || len(info.Partitions) != 2 || info.Partitions[0].Epoch != -1 {
		t.Fatalf("created %+v", info)
	}
	if _, created, err := c.CreateStream(ctx, prefix+"a", cfg); err != nil || created {
		t.Fatalf("create again: %v %v", created, err)
	}
	if _, _, err := c.CreateStream(ctx, prefix+"b", client.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CreateStream(ctx, prefix+"bad", client.StreamConfig{Policy: stream.PolicyValue{RetainFor: -time.Second}}); !errors.Is(err, stream.StreamMisconfigured) {
		t.Fatalf("create with a bad policy: %v", err)
	}
	list, err := c.ListStreams(ctx, prefix)
	if err != nil || len(list) != 2 || list[0].Name != prefix+"a" || list[1].Name != prefix+"b" || list[1].ContentType != "application/octet-stream" {
		t.Fatalf("list: %+v %v", list, err)
	}
	p := cfg.Policy
	p.Partitions, p.CompactAfter = 3, time.Minute
	info, err = c.UpdatePolicy(ctx, prefix+"a", p)
	if err != nil || info.PartitionCount != 3 || info.Policy != p {
		t.Fatalf("update: %+v %v", info, err)
	}
	p.Partitions = 1
	if _, err := c.UpdatePolicy(ctx, prefix+"a", p); !errors.Is(err, meta.PartitionsShrink) {
		t.Fatalf("shrink: %v", err)
	}
	s, err := c.Stream(ctx, prefix+"a")
	if err != nil || s.Partitions() != 3 {
		t.Fatalf("stream after growth: %v", err)
	}
	if _, err := s.AppendWith(ctx, []stream.RecordValue{{Payload: []byte("x")}}, client.AppendOptions{Partition: client.Partition(2)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetStream(ctx, prefix+"a")
	if err != nil || got.Partitions[2].End != 1 || got.Partitions[2].Owner == "" {
		t.Fatalf("get: %+v %v", got, err)
	}
	n, err := c.Node(ctx)
	if err != nil || n.RaftState != "Leader" || !n.Ready {
		t.Fatalf("node: %+v %v", n, err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := c.DeleteStream(ctx, prefix+name); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteStream(ctx, prefix+"a"); !errors.Is(err, meta.StreamNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if list, err := c.ListStreams(ctx, prefix); err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %+v %v", list, err)
	}
}

// TestIdempotentProducer: a repeated (id, epoch, seq) is acknowledged as a
// duplicate, not written twice.
func TestIdempotentProducer(t *testing.T) {
	needBroker(t)
	ctx := t.Context()
	c := newClient(t, nil)
	s, err := c.Open(ctx, uniqueName(t), client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	recs := []stream.RecordValue{{Payload: []byte("once")}}
	p := &client.Producer{ID: "p", Epoch: 1, Seq: 0}
	a, err := s.AppendWith(ctx, recs, client.AppendOptions{Producer: p})
	if err != nil || a.Duplicate || a.First != 0 {
		t.Fatalf("first: %+v %v", a, err)
	}
	b, err := s.AppendWith(ctx, recs, client.AppendOptions{Producer: p})
	if err != nil || !b.Duplicate {
		t.Fatalf("repeat: %+v %v", b, err)
	}
	if _, err := s.AppendWith(ctx, recs, client.AppendOptions{Producer: &client.Producer{ID: "p", Epoch: 1, Seq: 5}}); !errors.Is(err, meta.ProducerSeqGap) {
		t.Fatalf("gap: %v", err)
	}
	if bv, err := s.Bounds(ctx, 0); err != nil || bv.Next != 1 {
		t.Fatalf("bounds %+v %v: want one record", bv, err)
	}
}

// TestReadWaitAcrossClients: ReadWait is answered by an append made through
// another client (another process, as far as the broker knows).
func TestReadWaitAcrossClients(t *testing.T) {
	needBroker(t)
	ctx := t.Context()
	name := uniqueName(t)
	writer, err := newClient(t, nil).Open(ctx, name, client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := newClient(t, nil).Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		es  []stream.EntryValue
		err error
		d   time.Duration
	}
	ch := make(chan res, 1)
	go func() {
		start := time.Now()
		es, err := reader.ReadWait(ctx, 0, 0, 10, 900*time.Millisecond) // within the default 1s long-poll timeout
		ch <- res{es, err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := writer.Append(ctx, []stream.RecordValue{{Payload: []byte("hi")}}); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil || len(r.es) != 1 || string(r.es[0].Record.Payload) != "hi" {
		t.Fatalf("ReadWait = %+v", r)
	}
	// Nothing appended: empty, after the wait.
	start := time.Now()
	es, err := reader.ReadWait(ctx, 0, 1, 10, 200*time.Millisecond)
	if err != nil || es == nil || len(es) != 0 || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("ReadWait on a quiet stream = %v, %v after %v", es, err, time.Since(start))
	}
}

// TestLargeAppendsRecycleTheirEncoding: a large batch's encoding goes back
// to a pool once its request is sent, and the next batch is encoded into
// it; with this package's transport and with net/http's (which may close a
// request's body after answering), from concurrent writers, every record
// reads back as it was appended.
func TestLargeAppendsRecycleTheirEncoding(t *testing.T) {
	needBroker(t)
	ctx := t.Context()
	for name, hc := range map[string]*http.Client{"own transport": {Transport: transport}, "net/http": {Transport: http.DefaultTransport}} {
		t.Run(name, func(t *testing.T) {
			c, err := client.New(broker.url(), client.WithHTTPClient(hc))
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Open(ctx, uniqueName(t), client.StreamConfig{Policy: stream.PolicyValue{Partitions: 4}})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for i := range 10 {
						fill := fmt.Sprintf("w%d-i%d-", w, i)
						var batch []stream.RecordValue
						for range 100 {
							batch = append(batch, stream.RecordValue{Payload: []byte(strings.Repeat(fill, 1024/len(fill)))})
						}
						p := w
						if _, err := s.AppendWith(ctx, batch, client.AppendOptions{Partition: &p}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for w := range 4 {
				var got []stream.EntryValue
				for len(got) < 1000 {
					es, err := s.Read(ctx, w, stream.Offset(len(got)), 1000)
					if err != nil || len(es) == 0 {
						t.Fatalf("partition %d: %d records, %v", w, len(got), err)
					}
					got = append(got, es...)
				}
				for j, e := range got {
					fill := fmt.Sprintf("w%d-i%d-", w, j/100)
					if want := strings.Repeat(fill, 1024/len(fill)); string(e.Record.Payload) != want {
						t.Fatalf("partition %d record %d reads %.12q..., want %.12q...", w, j, e.Record.Payload, want)
					}
				}
			}
		})
	}
}
