package journalpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/peer"
)

// member is one journal behind a real peer port: the HTTP API and the
// append stream, on a real directory.
type member struct {
	name string
	j    *journal.Journal
	url  string // of the HTTP API
}

// members starts a member per name and returns them with a client that
// sends objects on append streams (streaming) or as HTTP requests.
func members(t *testing.T, streaming bool, names ...string) (map[string]*member, *Client) {
	t.Helper()
	out := map[string]*member{}
	table := map[string]peer.Static{}
	for _, n := range names {
		j, err := journal.Open(journal.Dir(t.TempDir()), journal.Options{Incarnation: n})
		if err != nil {
			t.Fatal(err)
		}
		mux, err := peer.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := peer.NewServer(slog.New(slog.DiscardHandler))
		srv.Handle(Path, NewHandler(HandlerConfig{Journal: j, MaxObjectBytes: 1 << 20}))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); srv.Serve(mux.HTTP()) }()
		go func() { defer wg.Done(); ServeStream(mux.Journal(), j, nil, 1<<20) }()
		t.Cleanup(func() {
			srv.Shutdown(context.Background())
			mux.Close()
			wg.Wait()
			j.Close()
		})
		out[n] = &member{name: n, j: j, url: "http://" + mux.Addr().String()}
		table[n] = peer.Static{Peer: mux.Addr().String()}
	}
	d := peer.Dialer{Addresses: peer.Addresses{Static: table}}
	if !streaming {
		return out, NewClient(peer.NewClient(d))
	}
	c := NewStreamingClient(peer.NewClient(d), d.DialJournal)
	t.Cleanup(c.Close)
	return out, c
}

// bothWays runs test with objects sent as HTTP requests and on streams.
func bothWays(t *testing.T, test func(t *testing.T, streaming bool)) {
	for _, streaming := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "stream"}[streaming], func(t *testing.T) { test(t, streaming) })
	}
}

func object(id, stream uint64, epoch int64, first uint64, payload string) journal.Object {
	return journal.Object{ID: id, Parts: []journal.Part{{Stream: stream, Epoch: epoch, First: first, Count: 1}}, Payload: []byte(payload)}
}

// TestWireRoundTrip: objects (copies included) and fence answers decode to
// what was encoded; every strict prefix and every flipped byte is refused.
func TestWireRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		o := journal.Object{ID: 1 + r.Uint64N(1<<40), Copied: r.IntN(2) == 0, By: r.Int64N(100), Payload: make([]byte, r.IntN(64))}
		if !o.Copied {
			o.By = 0
		}
		for k := r.IntN(4); k > 0; k-- {
			o.Parts = append(o.Parts, journal.Part{Stream: r.Uint64(), Epoch: r.Int64N(1 << 30), First: r.Uint64(), Count: r.Uint64N(1000)})
		}
		for k := range o.Payload {
			o.Payload[k] = byte(r.Uint32())
		}
		b := EncodeObject(o)
		got, err := DecodeObject(b)
		if err != nil || got.ID != o.ID || got.Copied != o.Copied || got.By != o.By || !slices.Equal(got.Parts, o.Parts) || !bytes.Equal(got.Payload, o.Payload) {
			t.Fatalf("object round trip: %+v, %v; want %+v", got, err, o)
		}
		for n := 0; n < len(b); n++ {
			if _, err := DecodeObject(b[:n]); err == nil && n < headerBytes+fixedBytes+len(o.Parts)*partBytes {
				t.Fatalf("prefix %d of %d decoded", n, len(b))
			}
		}
		bad := bytes.Clone(b)
		bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		if _, err := DecodeObject(bad); !errors.Is(err, BadObject) {
			t.Fatalf("a flipped byte: %v, want BAD_JOURNAL_OBJECT", err)
		}
		refs := []journal.Ref{}
		for _, p := range o.Parts {
			refs = append(refs, journal.Ref{Object: o.ID, Part: p})
		}
		gotRefs, err := DecodeRefs(EncodeRefs(refs))
		if err != nil || !slices.Equal(gotRefs, refs) {
			t.Fatalf("refs round trip: %v, %v", gotRefs, err)
		}
	}
}

// TestAppendFenceRead: an owner's object reaches every member durable and
// reads back whole; a fence answers the stream's objects before it, and
// from then on the member refuses the old epoch — JOURNAL_FENCED on the
// sender's side, as the journal's own error; a resend of the same bytes is
// answered, other bytes under the id are JOURNAL_CONFLICT.
func TestAppendFenceRead(t *testing.T) { bothWays(t, testAppendFenceRead) }

func testAppendFenceRead(t *testing.T, streaming bool) {
	ms, c := members(t, streaming, "a", "b", "c")
	ctx := context.Background()
	for i := range uint64(5) {
		for _, m := range ms {
			if err := c.Append(ctx, m.name, object(i+1, 7, 0, i, fmt.Sprintf("rec-%d", i))); err != nil {
				t.Fatalf("append of %d to %s: %v", i+1, m.name, err)
			}
		}
	}
	for _, m := range ms {
		o, err := c.Read(ctx, m.name, 3)
		if err != nil || string(o.Payload) != "rec-2" || o.Parts[0].First != 2 {
			t.Fatalf("read of object 3 from %s: %+v, %v", m.name, o, err)
		}
	}
	refs, err := c.Fence(ctx, "b", 7, 1)
	if err != nil || len(refs) != 5 {
		t.Fatalf("fence at b: %v, %v; want the 5 objects", refs, err)
	}
	err = c.Append(ctx, "b", object(6, 7, 0, 5, "rec-5"))
	if !errors.Is(err, journal.Fenced) || errs.HTTPStatus(err) != http.StatusConflict {
		t.Fatalf("an old epoch's object after the fence: %v, want JOURNAL_FENCED (409)", err)
	}
	if err := c.Append(ctx, "a", object(6, 7, 0, 5, "rec-5")); err != nil {
		t.Fatalf("an unfenced member refused the old epoch: %v", err)
	}
	if err := c.Append(ctx, "b", object(7, 7, 1, 5, "new owner")); err != nil {
		t.Fatalf("the new epoch's object: %v", err)
	}
	if err := c.Append(ctx, "a", object(6, 7, 0, 5, "rec-5")); err != nil {
		t.Fatalf("a resend of the same bytes: %v", err)
	}
	if err := c.Append(ctx, "a", object(6, 7, 0, 5, "other")); !errors.Is(err, journal.Conflict) {
		t.Fatalf("other bytes under a held id: %v, want JOURNAL_CONFLICT", err)
	}
	if _, err := c.Read(ctx, "c", 99); !errors.Is(err, journal.NotHeld) {
		t.Fatalf("read of an object never sent: %v, want JOURNAL_NOT_HELD", err)
	}
	// A copy a recovery makes passes the fence of its epoch.
	cp := object(6, 7, 0, 5, "rec-5")
	cp.Copied, cp.By = true, 1
	if err := c.Append(ctx, "b", cp); err != nil {
		t.Fatalf("a recovery's copy at the fence's epoch: %v", err)
	}
}

// TestMalformedRequestsWriteNothing: a damaged body, one over the bound,
// bad path values and unknown routes are refused with coded problems, and
// the journal holds nothing after them.
func TestMalformedRequestsWriteNothing(t *testing.T) {
	ms, c := members(t, false, "a")
	ctx := context.Background()
	url := ms["a"].url + Path
	good := EncodeObject(object(1, 7, 0, 0, "x"))
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0xff
	for _, tc := range []struct {
		method, path string
		body         []byte
		want         *errs.Error
	}{
		{"POST", "objects", bad, BadObject},
		{"POST", "objects", good[:10], BadObject},
		{"POST", "objects", bytes.Repeat([]byte{1}, 2<<20), TooLarge},
		{"POST", "fences/x/1", nil, BadRequest},
		{"POST", "fences/7/-1", nil, BadRequest},
		{"GET", "objects/zero", nil, BadRequest},
		{"DELETE", "objects/1", nil, NoRoute},
		{"GET", "nothing", nil, NoRoute},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, url+tc.path, bytes.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		resp.Body.Close()
		coded, err := errs.Unmarshal(buf.Bytes())
		if err != nil || !errors.Is(coded, tc.want) {
			t.Fatalf("%s %s: %d %s, want %v", tc.method, tc.path, resp.StatusCode, buf.String(), tc.want)
		}
	}
	if refs, err := c.Fence(ctx, "a", 7, 0); err != nil || len(refs) != 0 {
		t.Fatalf("the journal holds %v (%v) after malformed requests", refs, err)
	}
}

// TestConcurrentSendersShareSyncs: many owners' objects sent at once to
// one member all land, and the member's journal group-commits them (fewer
// batches than objects is the journal's business; here: every one is
// durable and readable, none answered twice).
func TestConcurrentSendersShareSyncs(t *testing.T) { bothWays(t, testConcurrentSendersShareSyncs) }

func testConcurrentSendersShareSyncs(t *testing.T, streaming bool) {
	_, c := members(t, streaming, "m")
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				id := uint64(w*8 + i + 1)
				if err := c.Append(ctx, "m", object(id, uint64(w), 0, uint64(i), fmt.Sprint(id))); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 64; id++ {
		o, err := c.Read(ctx, "m", id)
		if err != nil || string(o.Payload) != fmt.Sprint(id) {
			t.Fatalf("object %d: %+v, %v", id, o, err)
		}
	}
}
