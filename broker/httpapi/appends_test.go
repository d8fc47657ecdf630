package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

var appendsCT = hdr{"Content-Type": wire.AppendsContentType}

// TestAppendsInOneRequest: each append of a shared request is checked and
// answered on its own, in order; refusing one writes nothing of it and
// does not refuse the others.
func TestAppendsInOneRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("a", stream.PolicyValue{})
	f.create("b", stream.PolicyValue{Partitions: 2, MaxRecordBytes: 8})
	var body []byte
	body = wire.AppendItemTo(body, "a", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "one"), rec("", "two")}))
	body = wire.AppendItemTo(body, "missing", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	body = wire.AppendItemTo(body, "b", 1, wire.EncodeRecords([]stream.RecordValue{rec("", "p1")}))
	body = wire.AppendItemTo(body, "b", 2, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	body = wire.AppendItemTo(body, "b", 0, wire.EncodeRecords([]stream.RecordValue{rec("", "far too long for b")}))
	body = wire.AppendItemTo(body, "a/../b", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	body = wire.AppendItemTo(body, "a", -1, []byte{0xff})
	body = wire.AppendItemTo(body, "a", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "three")}))
	out, data := postAppends(t, f, body)
	if len(out.Results) != 8 {
		t.Fatalf("%d results for 8 appends: %s", len(out.Results), data)
	}
	refused := func(i int, static *errs.Error) {
		t.Helper()
		r := out.Results[i]
		if r.AppendResult != nil || r.Error == nil {
			t.Fatalf("item %d: %s, want %s", i, data, static.Name())
		}
		e, err := errs.Unmarshal(r.Error)
		if err != nil || !errors.Is(e, static) {
			t.Fatalf("item %d: %v (%v), want %s", i, e, err, static.Name())
		}
	}
	refused(1, meta.StreamNotFound)
	refused(3, stream.UnknownPartition)
	refused(4, stream.RecordTooLarge)
	refused(5, stream.StreamMisconfigured)
	refused(6, wire.MalformedBatch)
	// The appends to a take their offsets in request order (its partition
	// was opened first, for both).
	a0, a7 := out.Results[0].AppendResult, out.Results[7].AppendResult
	if a0 == nil || a7 == nil || a0.First != 0 || a0.Last != 1 || a7.First != 2 || a7.Last != 2 {
		t.Fatalf("appends to a: %s", data)
	}
	if b := out.Results[2].AppendResult; b == nil || b.Partition != 1 || b.First != 0 {
		t.Fatalf("append to b/1: %s", data)
	}
	got := readPayloads(t, f, "a", 0)
	if len(got) != 3 {
		t.Fatalf("a holds %q", got)
	}
	if got := readPayloads(t, f, "b", 0); len(got) != 0 {
		t.Fatalf("b/0 holds %q: a refused append wrote", got)
	}
	if _, err := f.b.Get("missing"); err == nil {
		t.Fatal("an append to a missing stream created it")
	}

	// a is open now, c not yet: a's appends are admitted at once, c's
	// after its partition is opened; each stream's keep request order.
	f.create("c", stream.PolicyValue{})
	body = nil
	for _, it := range []struct{ name, payload string }{{"a", "four"}, {"c", "c0"}, {"a", "five"}, {"c", "c1"}, {"a", "six"}} {
		body = wire.AppendItemTo(body, it.name, -1, wire.EncodeRecords([]stream.RecordValue{rec("", it.payload)}))
	}
	out, data = postAppends(t, f, body)
	for i, want := range []uint64{3, 0, 4, 1, 5} {
		if r := out.Results[i].AppendResult; r == nil || r.First != want {
			t.Fatalf("item %d: %s, want offset %d", i, data, want)
		}
	}
	if got := readPayloads(t, f, "c", 0); !slices.Equal(got, []string{"c0", "c1"}) {
		t.Fatalf("c holds %q", got)
	}
}

// TestAppendsRefusedWhole: a request that cannot be read is refused with
// its code and writes nothing.
func TestAppendsRefusedWhole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("a", stream.PolicyValue{})
	good := wire.AppendItemTo(nil, "a", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))

	resp, data := f.do("POST", wire.AppendsPath, batchCT, good)
	wantProblem(t, resp, data, http.StatusUnsupportedMediaType, wire.UnsupportedMediaType)
	resp, data = f.do("GET", wire.AppendsPath, nil, nil)
	wantProblem(t, resp, data, http.StatusMethodNotAllowed, wire.MethodNotAllowed)
	resp, data = f.do("POST", wire.AppendsPath, appendsCT, nil)
	wantProblem(t, resp, data, http.StatusBadRequest, wire.MalformedBatch)
	resp, data = f.do("POST", wire.AppendsPath, appendsCT, append(append([]byte{}, good...), 5, 'a'))
	wantProblem(t, resp, data, http.StatusBadRequest, wire.MalformedBatch)
	var many []byte
	for range wire.MaxAppendsPerRequest + 1 {
		many = append(many, good...)
	}
	resp, data = f.do("POST", wire.AppendsPath, appendsCT, many)
	wantProblem(t, resp, data, http.StatusRequestEntityTooLarge, wire.BodyTooLarge)
	if got := readPayloads(t, f, "a", 0); len(got) != 0 {
		t.Fatalf("a holds %q after refused requests", got)
	}
}

func readPayloads(t *testing.T, f *fixture, name string, partition int) []string {
	t.Helper()
	es, _, err := f.b.Read(t.Context(), name, partition, 0, 100, node.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, string(e.Record.Payload))
	}
	return out
}

// TestAppendsNeverWaitForRoom: an append that would wait for room under
// its stream's MaxBytes is answered "alone" at once, writing nothing, so
// the request's other appends are not held for its BlockTimeout; without
// a BlockTimeout it is refused STREAM_FULL as a single append would be.
func TestAppendsNeverWaitForRoom(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("full", stream.PolicyValue{MaxBytes: 8, MaxRecordBytes: 8, BlockTimeout: time.Hour})
	f.create("fullnow", stream.PolicyValue{MaxBytes: 8, MaxRecordBytes: 8})
	f.create("other", stream.PolicyValue{})
	f.appendBatch("full", "", rec("", "12345678"))
	f.appendBatch("fullnow", "", rec("", "12345678"))
	var body []byte
	body = wire.AppendItemTo(body, "full", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	body = wire.AppendItemTo(body, "fullnow", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	body = wire.AppendItemTo(body, "other", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "y")}))
	out, data := postAppends(t, f, body)
	if r := out.Results[0]; !r.Alone || r.AppendResult != nil || r.Error != nil {
		t.Fatalf("append to the full stream: %s, want alone", data)
	}
	if e, err := errs.Unmarshal(out.Results[1].Error); err != nil || !errors.Is(e, stream.StreamFull) {
		t.Fatalf("append to the full stream without BlockTimeout: %s, want STREAM_FULL", data)
	}
	if r := out.Results[2]; r.AppendResult == nil || r.First != 0 {
		t.Fatalf("append to the other stream: %s", data)
	}
	if got := readPayloads(t, f, "full", 0); len(got) != 1 {
		t.Fatalf("full holds %q: the alone append wrote", got)
	}
}

// postAppends sends body to /v1/appends and decodes its 200 answer.
func postAppends(t *testing.T, f *fixture, body []byte) (wire.AppendsResult, []byte) {
	t.Helper()
	resp, data := f.do("POST", wire.AppendsPath, appendsCT, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("appends: %d %s", resp.StatusCode, data)
	}
	var out wire.AppendsResult
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out, data
}

// TestLargeBodiesAreRecycled: the buffers of large append bodies are
// recycled once their appends are answered — single appends, raw
// payloads and shared requests alike —, so the next request may overwrite
// them: every record still reads back as it was sent.
func TestLargeBodiesAreRecycled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("s", stream.PolicyValue{})
	filled := func(fill byte, n int) string { return string(bytes.Repeat([]byte{fill}, n)) }
	var want []string
	for i := range 12 {
		fill := byte('a' + i)
		switch i % 3 {
		case 0: // a batch of 80 x 1 KiB
			var rs []stream.RecordValue
			for range 80 {
				rs = append(rs, rec("", filled(fill, 1024)))
				want = append(want, filled(fill, 1024))
			}
			f.appendBatch("s", "", rs...)
		case 1: // one raw payload of 70 KiB
			resp, data := f.do("POST", "/v1/log/s", hdr{"Content-Type": wire.RawContentType}, []byte(filled(fill, 70<<10)))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("raw append: %d %s", resp.StatusCode, data)
			}
			want = append(want, filled(fill, 70<<10))
		case 2: // a shared request of 8 appends of 10 KiB
			var body []byte
			for range 8 {
				body = wire.AppendItemTo(body, "s", 0, wire.EncodeRecords([]stream.RecordValue{rec("", filled(fill, 10<<10))}))
				want = append(want, filled(fill, 10<<10))
			}
			if out, data := postAppends(t, f, body); len(out.Results) != 8 || out.Results[7].AppendResult == nil {
				t.Fatalf("shared request: %s", data)
			}
		}
	}
	es, _, err := f.b.Read(t.Context(), "s", 0, 0, 10000, node.ReadOptions{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != len(want) {
		t.Fatalf("%d records, want %d", len(es), len(want))
	}
	for i, e := range es {
		if string(e.Record.Payload) != want[i] {
			t.Fatalf("record %d reads %.8q... (%d bytes), want %.8q... (%d bytes)", i, e.Record.Payload, len(e.Record.Payload), want[i], len(want[i]))
		}
	}
}

// TestAppendsAnswerTypes: a client that accepts the binary answer gets
// it, with the same items a JSON client gets — results and refusals alike.
func TestAppendsAnswerTypes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("a", stream.PolicyValue{})
	var body []byte
	body = wire.AppendItemTo(body, "a", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "one"), rec("", "two")}))
	body = wire.AppendItemTo(body, "missing", -1, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	for i, accept := range []string{"", wire.AppendsResultContentType + ", " + wire.JSONContentType} {
		resp, data := f.do("POST", wire.AppendsPath, hdr{"Content-Type": wire.AppendsContentType, "Accept": accept}, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("accept %q: %d %s", accept, resp.StatusCode, data)
		}
		ct := resp.Header.Get("Content-Type")
		if binary := ct == wire.AppendsResultContentType; binary != (accept != "") {
			t.Fatalf("accept %q: answered %s", accept, ct)
		}
		items, err := wire.DecodeAppendsAnswer(ct, data)
		if err != nil || len(items) != 2 {
			t.Fatalf("accept %q: %+v, %v", accept, items, err)
		}
		if r := items[0].AppendResult; r == nil || r.First != uint64(2*i) || r.Last != uint64(2*i+1) || r.Next != uint64(2*i+2) {
			t.Errorf("accept %q: the append: %+v", accept, r)
		}
		if e, err := errs.Unmarshal(items[1].Error); err != nil || !errors.Is(e, meta.StreamNotFound) {
			t.Errorf("accept %q: the refusal: %v, %v", accept, e, err)
		}
	}
}
