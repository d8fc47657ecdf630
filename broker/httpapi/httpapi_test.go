package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// fixture is a real broker on a temporary directory behind the API.
type fixture struct {
	t     *testing.T
	b     *core.Broker
	api   *Server
	srv   *httptest.Server
	reg   *prometheus.Registry
	clock *ManualClock
}

// eventuallyWaiting waits until n reads wait for records.
func (f *fixture) eventuallyWaiting(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.api.Waiting() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads waiting after 10s, want %d", f.api.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	f := &fixture{t: t, reg: prometheus.NewRegistry(), clock: NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	b, err := core.Open(core.Config{
		DataDir: t.TempDir(), Clock: f.clock.Now, Metrics: core.NewMetrics(f.reg),
		MaintenanceInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.b = b
	opts.Registerer = f.reg
	f.api = New(b, f.reg, opts)
	f.srv = httptest.NewServer(f.api)
	t.Cleanup(func() {
		f.srv.Close()
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return f
}

type hdr map[string]string

// do sends a request; path is sent as written (dots, percent signs and
// all).
func (f *fixture) do(method, path string, h hdr, body []byte) (*http.Response, []byte) {
	f.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, r)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp, data
}

// create makes a stream through the admin API.
func (f *fixture) create(name string, p stream.PolicyValue) {
	f.t.Helper()
	body, _ := json.Marshal(wire.StreamConfig{Policy: wire.PolicyOf(p)})
	resp, data := f.do("PUT", wire.StreamsPrefix+name, nil, body)
	if resp.StatusCode != http.StatusCreated {
		f.t.Fatalf("create %s: %d %s", name, resp.StatusCode, data)
	}
}

var batchCT = hdr{"Content-Type": wire.BatchContentType}

func (f *fixture) appendBatch(name, query string, records ...stream.RecordValue) wire.AppendResult {
	f.t.Helper()
	resp, data := f.do("POST", wire.LogPrefix+name+query, batchCT, wire.EncodeRecords(records))
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("append: %d %s", resp.StatusCode, data)
	}
	var r wire.AppendResult
	if err := json.Unmarshal(data, &r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// wantProblem checks a refusal: the status, the problem's code, and that
// the status is the one errs.HTTPStatus gives the decoded problem.
func wantProblem(t *testing.T, resp *http.Response, body []byte, status int, static *errs.Error, kv ...any) *errs.Error {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.ProblemContentType {
		t.Fatalf("Content-Type %q, want %s: %s", ct, wire.ProblemContentType, body)
	}
	e, err := errs.Unmarshal(body)
	if err != nil {
		t.Fatalf("not a problem: %v: %s", err, body)
	}
	if !errors.Is(e, static) {
		t.Fatalf("problem %s, want %s: %s", e.Name(), static.Name(), body)
	}
	if got := errs.HTTPStatus(e); got != status {
		t.Fatalf("HTTPStatus(problem) = %d, answered %d", got, status)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		got, ok := e.Field(kv[i].(string))
		if !ok || fmt.Sprint(got) != fmt.Sprint(kv[i+1]) {
			t.Errorf("field %s = %v (%v), want %v: %s", kv[i], got, ok, kv[i+1], body)
		}
	}
	return e
}

func rec(key, payload string) stream.RecordValue {
	var r stream.RecordValue
	if key != "" {
		r.Key = []byte(key)
	}
	if payload != "" {
		r.Payload = []byte(payload)
	}
	return r
}

// TestBadInputWritesNothing: every class of bad input gets its 4xx and its
// code, and nothing is written or created.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Options: frontend.Options{MaxBodyBytes: 1024}, MaxBatchRecords: 10})
	f.create("s/a", stream.PolicyValue{Partitions: 2})
	f.create("small", stream.PolicyValue{MaxRecordBytes: 16})
	one := wire.EncodeRecords([]stream.RecordValue{rec("k", "v")})

	cases := []struct {
		name   string
		method string
		path   string
		h      hdr
		body   []byte
		status int
		static *errs.Error
		kv     []any
	}{
		// Names that would climb out of their route, or smuggle a separator.
		{"dotdot", "POST", "/v1/log/s/../small", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"dot", "POST", "/v1/log/./small", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"empty segment", "POST", "/v1/log/s//a", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"trailing slash", "POST", "/v1/log/s/a/", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"empty name", "POST", "/v1/log/", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"encoded slash", "POST", "/v1/log/s%2Fa", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"encoded dots", "POST", "/v1/log/s/%2e%2e/small", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"encoded prefix", "POST", "/v1/%6Cog/small", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"bad character", "POST", "/v1/log/s/a$", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"admin dotdot", "PUT", "/v1/admin/streams/x/../y", nil, []byte(`{}`), 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"admin encoded", "PUT", "/v1/admin/streams/x%2F..%2Fy", nil, []byte(`{}`), 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"admin delete dotdot", "DELETE", "/v1/admin/streams/s/a/..", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "name"}},
		{"other route dotdot", "GET", "/v1/admin/../healthz", nil, nil, 404, wire.RouteNotFound, nil},

		// Framing.
		{"length past body", "POST", "/v1/log/s/a", batchCT, []byte("\x05ab"), 400, wire.MalformedBatch, []any{"position", 0}},
		{"not a uvarint", "POST", "/v1/log/s/a", batchCT, []byte{0xff}, 400, wire.MalformedBatch, []any{"position", 0}},
		{"payload past body", "POST", "/v1/log/s/a", batchCT, append(append([]byte{}, one...), 0x00, 0x09, 'x'), 400, wire.MalformedBatch, []any{"position", 5}},
		{"truncated record", "POST", "/v1/log/s/a", batchCT, append(append([]byte{}, one...), 0x01, 'k'), 400, wire.MalformedBatch, nil},
		{"content type", "POST", "/v1/log/s/a", hdr{"Content-Type": "application/json"}, []byte(`[]`), 415, wire.UnsupportedMediaType, []any{"contentType", "application/json"}},
		{"no content type", "POST", "/v1/log/s/a", nil, one, 415, wire.UnsupportedMediaType, nil},
		{"key with batch", "POST", "/v1/log/s/a?key=k", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "key"}},

		// Sizes.
		{"body too large", "POST", "/v1/log/s/a", batchCT, wire.EncodeRecords([]stream.RecordValue{{Payload: make([]byte, 2000)}}), 413, wire.BodyTooLarge, []any{"maxBytes", 1024}},
		{"too many records", "POST", "/v1/log/s/a", batchCT, make([]byte, 2*11), 413, wire.BodyTooLarge, []any{"maxRecords", 10}},
		{"record too large", "POST", "/v1/log/small", batchCT, wire.EncodeRecords([]stream.RecordValue{rec("", "ok"), rec("key", "SECRET-PAYLOAD")}), 413, stream.RecordTooLarge, []any{"index", 1, "size", 17, "max", 16}},
		{"raw too large", "POST", "/v1/log/small?key=abc", hdr{"Content-Type": wire.RawContentType}, []byte("0123456789abcdef"), 413, stream.RecordTooLarge, []any{"size", 19}},
		{"empty batch", "POST", "/v1/log/s/a", batchCT, nil, 400, stream.InvalidBatchSize, []any{"records", 0}},

		// Partitions.
		{"append unknown partition", "POST", "/v1/log/s/a?partition=2", batchCT, one, 400, stream.UnknownPartition, []any{"partition", 2, "partitions", 2}},
		{"append negative partition", "POST", "/v1/log/s/a?partition=-1", batchCT, one, 400, stream.UnknownPartition, []any{"partition", -1, "partitions", 2}},
		{"read unknown partition", "GET", "/v1/log/s/a?partition=7", nil, nil, 400, stream.UnknownPartition, []any{"partition", 7}},
		{"bounds unknown partition", "GET", "/v1/log/s/a:bounds?partition=2", nil, nil, 400, stream.UnknownPartition, nil},
		{"trim unknown partition", "POST", "/v1/log/s/a:trim?partition=9&before=0", nil, nil, 400, stream.UnknownPartition, nil},
		{"mixed partitions", "POST", "/v1/log/s/a", batchCT, wire.EncodeRecords([]stream.RecordValue{rec(keyIn(0, 2), "x"), rec(keyIn(1, 2), "y")}), 400, stream.PartitionsMixed, []any{"index", 1}},

		// Numbers.
		{"partition not a number", "POST", "/v1/log/s/a?partition=one", batchCT, one, 400, stream.StreamMisconfigured, []any{"field", "partition", "value", "one"}},
		{"from negative", "GET", "/v1/log/s/a?from=-1", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "from"}},
		{"from overflow", "GET", "/v1/log/s/a?from=99999999999999999999999", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "from"}},
		{"max not a number", "GET", "/v1/log/s/a?max=lots", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "max"}},
		{"max zero", "GET", "/v1/log/s/a?max=0", nil, nil, 400, stream.InvalidBatchSize, []any{"max", 0}},
		{"wait not a duration", "GET", "/v1/log/s/a?wait=forever", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "wait"}},
		{"maxBytes negative", "GET", "/v1/log/s/a?maxBytes=-3", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "maxBytes"}},
		{"from ahead", "GET", "/v1/log/s/a?from=5", nil, nil, 409, stream.OffsetAhead, []any{"offset", 5, "next", 0}},
		{"trim without before", "POST", "/v1/log/s/a:trim", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "before"}},
		{"trim ahead", "POST", "/v1/log/s/a:trim?before=3", nil, nil, 409, stream.OffsetAhead, nil},
		{"seek bad time", "GET", "/v1/log/s/a:seek?time=yesterday", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "time"}},
		{"commit without next", "POST", "/v1/log/s/a:commit?group=g", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "next"}},
		{"commit empty group", "POST", "/v1/log/s/a:commit?next=0", nil, nil, 400, stream.StreamMisconfigured, []any{"field", "group"}},
		{"commit ahead", "POST", "/v1/log/s/a:commit?group=g&next=1", nil, nil, 409, stream.OffsetAhead, nil},
		{"committed unknown group", "GET", "/v1/log/s/a:committed?group=g", nil, nil, 404, stream.UnknownGroup, []any{"group", "g"}},
		{"producer epoch", "POST", "/v1/log/s/a", hdr{"Content-Type": wire.BatchContentType, "Producer-Id": "p", "Producer-Epoch": "x", "Producer-Seq": "0"}, one, 400, stream.StreamMisconfigured, []any{"field", "Producer-Epoch"}},
		{"producer partial", "POST", "/v1/log/s/a", hdr{"Content-Type": wire.BatchContentType, "Producer-Id": "p"}, one, 400, stream.StreamMisconfigured, []any{"field", "Producer-Id"}},
		{"producer gap", "POST", "/v1/log/s/a", hdr{"Content-Type": wire.BatchContentType, "Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "3"}, one, 409, meta.ProducerSeqGap, nil},

		// Routes and streams.
		{"unknown op", "GET", "/v1/log/s/a:explode", nil, nil, 404, wire.RouteNotFound, []any{"op", "explode"}},
		{"wrong method", "DELETE", "/v1/log/s/a", nil, nil, 405, wire.MethodNotAllowed, []any{"allow", "GET, POST"}},
		{"op wrong method", "GET", "/v1/log/s/a:trim?before=0", nil, nil, 405, wire.MethodNotAllowed, nil},
		{"no such stream", "POST", "/v1/log/nope", batchCT, one, 404, meta.StreamNotFound, []any{"name", "nope"}},
		{"no such route", "GET", "/v2/anything", nil, nil, 404, wire.RouteNotFound, nil},
		{"durable streams prefix left free", "GET", "/v1/stream/x", nil, nil, 404, wire.RouteNotFound, nil},

		// Admin bodies.
		{"create bad json", "PUT", "/v1/admin/streams/new", nil, []byte(`{"policy":`), 400, wire.MalformedBody, nil},
		{"create unknown member", "PUT", "/v1/admin/streams/new", nil, []byte(`{"retention":"1h"}`), 400, wire.MalformedBody, nil},
		{"create repeated member", "PUT", "/v1/admin/streams/new", nil, []byte(`{"ttl":"1h","ttl":"-1s"}`), 400, wire.MalformedBody, nil},
		{"create repeated nested member", "PUT", "/v1/admin/streams/new", nil, []byte(`{"policy":{"partitions":2,"partitions":3}}`), 400, wire.MalformedBody, nil},
		{"create trailing data", "PUT", "/v1/admin/streams/new", nil, []byte(`{"ttl":"1h"}}`), 400, wire.MalformedBody, nil},
		{"create invalid utf-8", "PUT", "/v1/admin/streams/new", nil, []byte("{\"contentType\":\"text/\xff\"}"), 400, wire.MalformedBody, nil},
		{"patch repeated member", "PATCH", "/v1/admin/streams/s/a", nil, []byte(`{"policy":{"partitions":3},"policy":{"partitions":4}}`), 400, wire.MalformedBody, nil},
		{"create bad duration", "PUT", "/v1/admin/streams/new", nil, []byte(`{"policy":{"retainFor":"a week"}}`), 400, stream.StreamMisconfigured, []any{"field", "RetainFor", "value", "a week"}},
		{"create negative", "PUT", "/v1/admin/streams/new", nil, []byte(`{"policy":{"partitions":-1}}`), 400, stream.StreamMisconfigured, []any{"field", "Partitions", "value", -1}},
		{"create block without max", "PUT", "/v1/admin/streams/new", nil, []byte(`{"policy":{"blockTimeout":"1s"}}`), 400, stream.StreamMisconfigured, []any{"field", "BlockTimeout", "value", "1s"}},
		{"create bad ttl", "PUT", "/v1/admin/streams/new", nil, []byte(`{"ttl":"-1s"}`), 400, stream.StreamMisconfigured, []any{"field", "ttl"}},
		{"create ttl under a second", "PUT", "/v1/admin/streams/new", nil, []byte(`{"ttl":"1ns"}`), 400, stream.StreamMisconfigured, []any{"field", "ttl"}},
		{"create expired", "PUT", "/v1/admin/streams/new", nil, []byte(`{"expiresAt":"2000-01-01T00:00:00Z"}`), 400, stream.StreamMisconfigured, []any{"field", "expiresAt", "value", "2000-01-01T00:00:00Z"}},
		{"create body too large", "PUT", "/v1/admin/streams/new", nil, append([]byte(`{"contentType":"`), bytes.Repeat([]byte("x"), 2<<20)...), 413, wire.BodyTooLarge, nil},
		{"patch shrink", "PATCH", "/v1/admin/streams/s/a", nil, []byte(`{"policy":{"partitions":1}}`), 409, meta.PartitionsShrink, []any{"partitions", 2, "requested", 1}},
		{"patch negative", "PATCH", "/v1/admin/streams/s/a", nil, []byte(`{"policy":{"retainBytes":-1}}`), 400, stream.StreamMisconfigured, []any{"field", "RetainBytes"}},
		{"list wrong method", "POST", "/v1/admin/streams", nil, nil, 405, wire.MethodNotAllowed, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := f.do(c.method, c.path, c.h, c.body)
			wantProblem(t, resp, body, c.status, c.static, c.kv...)
			if bytes.Contains(body, []byte("SECRET")) {
				t.Fatalf("the problem carries the payload: %s", body)
			}
			if c.status == 405 && resp.Header.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}

	// Nothing was written, created or changed.
	for _, name := range []string{"s/a", "small"} {
		e, err := f.b.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for p := range e.Partitions {
			b, err := f.b.Bounds(context.Background(), name, p)
			if err != nil || b != (stream.BoundsValue{}) {
				t.Fatalf("%s partition %d bounds %+v, %v: something was written", name, p, b, err)
			}
		}
		if name == "s/a" && len(e.Partitions) != 2 {
			t.Fatalf("s/a has %d partitions after refused patches", len(e.Partitions))
		}
	}
	var names []string
	for _, e := range f.b.List() {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "s/a,small" {
		t.Fatalf("streams %v: a refused create created something", names)
	}
}

// keyIn returns a key that PartitionOf places on p of n.
func keyIn(p, n int) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if stream.PartitionOf([]byte(k), n) == p {
			return k
		}
	}
}

// TestAppendAndReadFraming: batches go in and come back framed with their
// offsets and instants; headers carry the bounds; JSON for people; raw
// single-record appends; idempotent producers.
func TestAppendAndReadFraming(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("logs/api/prod", stream.PolicyValue{Partitions: 3})
	k := keyIn(2, 3)
	r := f.appendBatch("logs/api/prod", "", rec(k, "one"), rec("", ""), rec(k, ""), rec("", "four"))
	if r != (wire.AppendResult{Partition: 2, First: 0, Last: 3, Next: 4}) {
		t.Fatalf("append = %+v", r)
	}
	at := f.clock.Now()
	f.clock.Set(at.Add(time.Second))
	r = f.appendBatch("logs/api/prod", "?partition=2", rec("", "five"))
	if r.First != 4 || r.Partition != 2 {
		t.Fatalf("append to partition 2 = %+v", r)
	}

	resp, body := f.do("GET", "/v1/log/logs/api/prod?partition=2&from=1&max=3", nil, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != wire.BatchContentType {
		t.Fatalf("read: %d %s", resp.StatusCode, body)
	}
	for h, want := range map[string]string{wire.HeaderFirst: "0", wire.HeaderNext: "5", wire.HeaderCount: "3", wire.HeaderReadNext: "4", wire.HeaderPartition: "2"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	es, err := wire.DecodeEntries(body, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].Offset != 1 || es[2].Offset != 3 || string(es[1].Record.Key) != k || len(es[1].Record.Payload) != 0 ||
		len(es[0].Record.Key) != 0 || string(es[2].Record.Payload) != "four" || !es[1].AppendedAt.Equal(at) {
		t.Fatalf("entries %+v", es)
	}

	// At the end: empty, Read-Next is the next offset.
	resp, body = f.do("GET", "/v1/log/logs/api/prod?partition=2&from=5", nil, nil)
	if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get(wire.HeaderReadNext) != "5" {
		t.Fatalf("read at end: %d %q %v", resp.StatusCode, body, resp.Header)
	}

	// JSON for people.
	resp, body = f.do("GET", "/v1/log/logs/api/prod?partition=2&from=4", hdr{"Accept": "application/json"}, nil)
	var rj wire.ReadJSON
	if err := json.Unmarshal(body, &rj); err != nil || resp.StatusCode != 200 {
		t.Fatalf("json read: %d %s %v", resp.StatusCode, body, err)
	}
	if len(rj.Entries) != 1 || string(rj.Entries[0].Payload) != "five" || !rj.Entries[0].AppendedAt.Equal(at.Add(time.Second)) || rj.Next != 5 {
		t.Fatalf("json read %+v", rj)
	}

	// A raw body is one record, keyed by ?key=.
	resp, body = f.do("POST", "/v1/log/logs/api/prod?key="+k, hdr{"Content-Type": wire.RawContentType}, []byte("raw bytes"))
	if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderFirst) != "5" || resp.Header.Get(wire.HeaderPartition) != "2" {
		t.Fatalf("raw append: %d %s", resp.StatusCode, body)
	}

	// Idempotent producer: the repeat is acknowledged without writing.
	ph := hdr{"Content-Type": wire.BatchContentType, "Producer-Id": "p1", "Producer-Epoch": "0", "Producer-Seq": "0"}
	batch := wire.EncodeRecords([]stream.RecordValue{rec(k, "once")})
	for i := range 2 {
		resp, body = f.do("POST", "/v1/log/logs/api/prod", ph, batch)
		var ar wire.AppendResult
		if err := json.Unmarshal(body, &ar); err != nil || resp.StatusCode != 200 {
			t.Fatalf("producer append %d: %d %s", i, resp.StatusCode, body)
		}
		if ar.Duplicate != (i == 1) || ar.Producer == nil || ar.Producer.LastSeq != 0 || resp.Header.Get("Producer-Seq") != "0" {
			t.Fatalf("producer append %d = %+v", i, ar)
		}
	}
	if b, _ := f.b.Bounds(context.Background(), "logs/api/prod", 2); b.Next != 7 {
		t.Fatalf("next = %d after a duplicate, want 7", b.Next)
	}
}

// TestOperations: bounds, seek, trim, compact, commit and committed.
func TestOperations(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("ops", stream.PolicyValue{CompactAfter: time.Minute})
	start := f.clock.Now()
	f.appendBatch("ops", "", rec("a", "1"), rec("a", "2"))
	f.clock.Set(start.Add(time.Minute))
	f.appendBatch("ops", "", rec("b", "3"))

	getJSON := func(method, path string, v any) {
		t.Helper()
		resp, body := f.do(method, path, nil, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatal(err)
		}
	}
	var b wire.BoundsResult
	getJSON("GET", "/v1/log/ops:bounds", &b)
	if b != (wire.BoundsResult{First: 0, Next: 3}) {
		t.Fatalf("bounds %+v", b)
	}
	var sk wire.SeekResult
	getJSON("GET", "/v1/log/ops:seek?time="+start.Add(time.Second).Format(time.RFC3339Nano), &sk)
	if sk.Offset != 2 {
		t.Fatalf("seek = %+v, want 2", sk)
	}
	getJSON("GET", "/v1/log/ops:seek?time="+strconv.FormatInt(start.UnixNano(), 10), &sk)
	if sk.Offset != 0 {
		t.Fatalf("seek (unix ns) = %+v, want 0", sk)
	}
	var cv wire.CompactResult
	getJSON("POST", "/v1/log/ops:compact", &cv)
	if cv != (wire.CompactResult{Scanned: 2, Kept: 1, Dropped: 1}) {
		t.Fatalf("compact = %+v", cv)
	}
	if resp, body := f.do("POST", "/v1/log/ops:trim?before=2", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("trim: %d %s", resp.StatusCode, body)
	}
	resp, body := f.do("GET", "/v1/log/ops?from=1", nil, nil)
	wantProblem(t, resp, body, 409, stream.OffsetTrimmed, "offset", 1, "first", 2)
	if resp, body := f.do("POST", "/v1/log/ops:commit?group=g&next=3", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("commit: %d %s", resp.StatusCode, body)
	}
	var cm wire.CommittedResult
	getJSON("GET", "/v1/log/ops:committed?group=g", &cm)
	if cm != (wire.CommittedResult{Group: "g", Next: 3}) {
		t.Fatalf("committed = %+v", cm)
	}
}

// TestLongPoll: a read with wait= is answered by the next append; with
// nothing appended it answers empty after the long-poll timeout, however
// long a wait it asked for; Drain ends waits at once.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	type answer struct {
		es      []stream.EntryValue
		elapsed time.Duration
		status  int
	}
	poll := func(f *fixture, path string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			resp, err := f.srv.Client().Get(f.srv.URL + path)
			if err != nil {
				ch <- answer{status: -1}
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			es, _ := wire.DecodeEntries(body, 1)
			ch <- answer{es, time.Since(start), resp.StatusCode}
		}()
		return ch
	}

	t.Run("WokenByAppend", func(t *testing.T) {
		f := newFixture(t, Options{Options: frontend.Options{LongPollTimeout: 10 * time.Second}})
		f.create("lp", stream.PolicyValue{Partitions: 2})
		ch := poll(f, "/v1/log/lp?partition=1&from=0&wait=10s")
		f.eventuallyWaiting(t, 1)
		start := time.Now()
		f.appendBatch("lp", "", rec(keyIn(1, 2), "hello"))
		a := <-ch
		if a.status != 200 || len(a.es) != 1 || string(a.es[0].Record.Payload) != "hello" {
			t.Fatalf("long-poll answered %+v", a)
		}
		if waited := time.Since(start); waited > 2*time.Second {
			t.Fatalf("long-poll answered %v after the append", waited)
		}
		// An append to another partition is only a hint: the read waits on.
		ch = poll(f, "/v1/log/lp?partition=1&from=1&wait=400ms")
		f.eventuallyWaiting(t, 1)
		f.appendBatch("lp", "", rec(keyIn(0, 2), "elsewhere"))
		a = <-ch
		if a.status != 200 || len(a.es) != 0 || a.elapsed < 400*time.Millisecond {
			t.Fatalf("long-poll on a quiet partition answered %+v", a)
		}

		// Drain ends a wait at once.
		ch = poll(f, "/v1/log/lp?partition=1&from=1&wait=10s")
		f.eventuallyWaiting(t, 1)
		f.api.Drain()
		select {
		case a = <-ch:
			if a.status != 200 || len(a.es) != 0 || a.elapsed > 5*time.Second {
				t.Fatalf("drained long-poll answered %+v", a)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Drain did not end the long-poll")
		}
	})

	t.Run("TimesOutEmpty", func(t *testing.T) {
		f := newFixture(t, Options{Options: frontend.Options{LongPollTimeout: 300 * time.Millisecond}})
		f.create("lp", stream.PolicyValue{})
		// Clamped to the server's long-poll timeout.
		a := <-poll(f, "/v1/log/lp?from=0&wait=1h")
		if a.status != 200 || len(a.es) != 0 || a.elapsed < 300*time.Millisecond || a.elapsed > 5*time.Second {
			t.Fatalf("long-poll timeout answered %+v", a)
		}
		// wait with no value waits the server's timeout.
		a = <-poll(f, "/v1/log/lp?from=0&wait")
		if a.status != 200 || a.elapsed < 300*time.Millisecond {
			t.Fatalf("wait with no value answered %+v", a)
		}
		// Without wait= a read never blocks.
		a = <-poll(f, "/v1/log/lp?from=0")
		if a.status != 200 || a.elapsed > 250*time.Millisecond {
			t.Fatalf("read without wait answered %+v", a)
		}
	})
}

// TestAdminLifecycle: create (201, 200 same, 409 other), get with
// partitions, list, patch (grow), delete.
func TestAdminLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	put := func(name, body string) (*http.Response, []byte) {
		return f.do("PUT", wire.StreamsPrefix+name, hdr{"Content-Type": "application/json"}, []byte(body))
	}
	cfg := `{"contentType":"text/plain","policy":{"partitions":2,"retainFor":"1h","maxRecordBytes":1024},"ttl":"24h"}`
	resp, body := put("shop/orders", cfg)
	if resp.StatusCode != 201 || resp.Header.Get("Location") != "/v1/admin/streams/shop/orders" {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var info wire.StreamInfo
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "shop/orders" || info.ContentType != "text/plain" || info.PartitionCount != 2 || info.Policy.RetainFor != "1h0m0s" ||
		info.TTL != "24h0m0s" || len(info.Partitions) != 2 || info.Partitions[1].Epoch != -1 {
		t.Fatalf("created %+v", info)
	}
	// The same configuration, spelled differently: 200.
	if resp, body := put("shop/orders", `{"contentType":"text/plain","policy":{"partitions":2,"retainFor":"60m","maxRecordBytes":1024},"ttl":"1440m"}`); resp.StatusCode != 200 {
		t.Fatalf("create again: %d %s", resp.StatusCode, body)
	}
	// Another configuration: 409 naming what differs.
	resp, body = put("shop/orders", `{"contentType":"text/plain","policy":{"partitions":3}}`)
	wantProblem(t, resp, body, 409, meta.StreamExists, "field", "policy", "name", "shop/orders")
	resp, body = put("shop/orders", `{"contentType":"application/json","policy":{"partitions":2,"retainFor":"1h","maxRecordBytes":1024},"ttl":"24h"}`)
	wantProblem(t, resp, body, 409, meta.StreamExists, "field", "contentType")
	// An empty body is the zero configuration.
	if resp, body := f.do("PUT", wire.StreamsPrefix+"plain", nil, nil); resp.StatusCode != 201 {
		t.Fatalf("create with no body: %d %s", resp.StatusCode, body)
	}

	f.appendBatch("shop/orders", "?partition=1", rec("", "x"))
	resp, body = f.do("GET", wire.StreamsPrefix+"shop/orders", nil, nil)
	if err := json.Unmarshal(body, &info); err != nil || resp.StatusCode != 200 {
		t.Fatalf("get: %d %s", resp.StatusCode, body)
	}
	if p := info.Partitions[1]; p.Epoch != 0 || p.Owner == "" || !p.Open || p.End != 1 || p.Start != 0 {
		t.Fatalf("partition 1 = %+v", p)
	}

	resp, body = f.do("GET", wire.StreamsPath, nil, nil)
	var l wire.StreamList
	if err := json.Unmarshal(body, &l); err != nil || resp.StatusCode != 200 || len(l.Streams) != 2 ||
		l.Streams[0].Name != "plain" || l.Streams[1].Name != "shop/orders" || l.Streams[1].Partitions != nil {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	resp, body = f.do("GET", wire.StreamsPath+"?prefix=shop/", nil, nil)
	if err := json.Unmarshal(body, &l); err != nil || len(l.Streams) != 1 {
		t.Fatalf("list prefix: %s", body)
	}

	// PATCH replaces the members given and keeps the others.
	resp, body = f.do("PATCH", wire.StreamsPrefix+"shop/orders", nil, []byte(`{"policy":{"partitions":4,"retainBytes":4096}}`))
	if err := json.Unmarshal(body, &info); err != nil || resp.StatusCode != 200 {
		t.Fatalf("patch: %d %s", resp.StatusCode, body)
	}
	if info.PartitionCount != 4 || info.Policy.RetainBytes != 4096 || info.Policy.RetainFor != "1h0m0s" || info.Policy.MaxRecordBytes != 1024 {
		t.Fatalf("patched %+v", info)
	}
	f.appendBatch("shop/orders", "?partition=3", rec("", "new partition"))

	if resp, body := f.do("DELETE", wire.StreamsPrefix+"shop/orders", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d %s", resp.StatusCode, body)
	}
	resp, body = f.do("GET", wire.StreamsPrefix+"shop/orders", nil, nil)
	wantProblem(t, resp, body, 404, meta.StreamNotFound, "name", "shop/orders")
	resp, body = f.do("DELETE", wire.StreamsPrefix+"shop/orders", nil, nil)
	wantProblem(t, resp, body, 404, meta.StreamNotFound)
	resp, body = f.do("POST", "/v1/log/shop/orders", batchCT, wire.EncodeRecords([]stream.RecordValue{rec("", "x")}))
	wantProblem(t, resp, body, 404, meta.StreamNotFound)
	// The name is reusable at once.
	if resp, body := put("shop/orders", `{}`); resp.StatusCode != 201 {
		t.Fatalf("recreate: %d %s", resp.StatusCode, body)
	}
}

// TestHealthReadyMetrics: /healthz, /readyz (503 once draining), /metrics
// with the broker's and the API's metrics, /v1/admin/node, and the test
// clock endpoint only when enabled.
func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.create("m", stream.PolicyValue{})
	f.appendBatch("m", "", rec("", "x"))

	if resp, body := f.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	if resp, body := f.do("GET", "/readyz", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("readyz: %d %s", resp.StatusCode, body)
	}
	resp, body := f.do("GET", "/v1/admin/node", nil, nil)
	var n wire.NodeInfo
	if err := json.Unmarshal(body, &n); err != nil || resp.StatusCode != 200 {
		t.Fatalf("node: %d %s", resp.StatusCode, body)
	}
	if n.RaftState != "Leader" || n.Leader == "" || n.NodeID != f.b.NodeID() || n.AppliedIndex == 0 || n.Streams != 1 || !n.Ready {
		t.Fatalf("node = %+v", n)
	}
	resp, body = f.do("GET", "/metrics", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	for _, want := range []string{
		"picomq_appends_total 1", "picomq_append_bytes_total 1", "picomq_object_fsync_seconds_bucket",
		"picomq_metadata_commit_seconds_count", "picomq_flush_appends_bucket",
		`picomq_raft_state{state="Leader"} 1`, "picomq_raft_has_leader 1", "picomq_streams 1", "picomq_reads_waiting 0",
		`picomq_http_requests_total{code="200",method="POST",route="log.append"} 1`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	resp, body = f.do("PUT", "/v1/admin/clock?now=0", nil, nil)
	wantProblem(t, resp, body, 404, wire.RouteNotFound)

	f.api.Drain()
	resp, body = f.do("GET", "/readyz", nil, nil)
	wantProblem(t, resp, body, 503, wire.NotReady, "reason", "draining")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if resp, _ := f.do("GET", "/healthz", nil, nil); resp.StatusCode != 200 {
		t.Fatal("healthz failed while draining")
	}
}

// TestTestClock: with Options.TestClock the clock endpoint sets the
// broker's clock, which dates records.
func TestTestClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.api = New(f.b, nil, Options{TestClock: f.clock})
	srv := httptest.NewServer(f.api)
	defer srv.Close()
	f.srv = srv
	f.create("c", stream.PolicyValue{})
	at := time.Date(2030, 5, 6, 7, 8, 9, 123456789, time.UTC)
	resp, body := f.do("PUT", "/v1/admin/clock?now="+at.Format(time.RFC3339Nano), nil, nil)
	var cv ClockValue
	if err := json.Unmarshal(body, &cv); err != nil || resp.StatusCode != 200 || !cv.Now.Equal(at) || cv.UnixNano != at.UnixNano() {
		t.Fatalf("set clock: %d %s", resp.StatusCode, body)
	}
	f.appendBatch("c", "", rec("", "x"))
	es, _, err := f.b.Read(context.Background(), "c", 0, 0, 1, node.ReadOptions{})
	if err != nil || len(es) != 1 || !es[0].AppendedAt.Equal(at) {
		t.Fatalf("record dated %v, want the set clock %v (%v)", es, at, err)
	}
	resp, body = f.do("PUT", "/v1/admin/clock?now=soon", nil, nil)
	wantProblem(t, resp, body, 400, stream.StreamMisconfigured, "field", "now")
	// No /metrics route without a gatherer.
	resp, body = f.do("GET", "/metrics", nil, nil)
	wantProblem(t, resp, body, 404, wire.RouteNotFound)
}

// TestHandleExtraRoute: a later protocol can be mounted beside the API.
func TestHandleExtraRoute(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.api.Handle("/v1/stream/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "durable streams")
	}))
	if resp, body := f.do("GET", "/v1/stream/a/b", nil, nil); resp.StatusCode != 200 || string(body) != "durable streams" {
		t.Fatalf("extra route: %d %s", resp.StatusCode, body)
	}
}

// TestDefaultPolicy: a stream created without a policy takes the broker's
// default one; a policy given wins.
func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	def := stream.PolicyValue{Partitions: 3, RetainFor: time.Hour}
	f := newFixture(t, Options{DefaultPolicy: &def})
	if resp, body := f.do("PUT", "/v1/admin/streams/d/plain", nil, []byte(`{}`)); resp.StatusCode != 201 {
		t.Fatalf("create without a policy: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.do("PUT", "/v1/admin/streams/d/own", nil, []byte(`{"policy":{"partitions":1}}`)); resp.StatusCode != 201 {
		t.Fatalf("create with a policy: %d %s", resp.StatusCode, body)
	}
	if e, err := f.b.Get("d/plain"); err != nil || len(e.Partitions) != 3 || e.Policy.RetainFor != time.Hour {
		t.Fatalf("stream created without a policy: %+v, %v; want the default", e, err)
	}
	if e, err := f.b.Get("d/own"); err != nil || len(e.Partitions) != 1 || e.Policy.RetainFor != 0 {
		t.Fatalf("stream created with its own policy: %+v, %v", e, err)
	}
	// The same create again is the same stream, not a conflict.
	if resp, body := f.do("PUT", "/v1/admin/streams/d/plain", nil, []byte(`{}`)); resp.StatusCode != 200 {
		t.Fatalf("repeated create without a policy: %d %s", resp.StatusCode, body)
	}
}
