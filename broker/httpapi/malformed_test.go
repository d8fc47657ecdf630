package httpapi

import (
	"fmt"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/framing"
	"github.com/picomq/picomq/broker/framing/framingtest"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/node/nodetest"
	"github.com/picomq/picomq/broker/stream"
)

// TestMalformedRequestsWriteNothing sends every class of malformed request
// — ambiguous framing over raw TCP, oversize heads and URLs, empty and
// repeated protocol headers, malformed queries, bad batch framing and JSON,
// oversize bodies and batches, bad names — to a real broker behind the API
// (served through framing, as cmd/broker serves it) and checks each is
// refused with its status and code, and that afterwards every stream's
// tail, closed flag and producer state are as before and no name was
// created.
func TestMalformedRequestsWriteNothing(t *testing.T) {
	f := newFixture(t, Options{Options: frontendOpts(1 << 10), MaxBatchRecords: 10})
	srv := httptest.NewUnstartedServer(f.api)
	srv.Listener = framing.Listen(srv.Listener, framing.Limits{})
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	f.create("s", stream.PolicyValue{Partitions: 1})
	resp, data := f.do("POST", wire.LogPrefix+"s", hdr{"Content-Type": wire.BatchContentType, "Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0"},
		wire.EncodeRecords([]stream.RecordValue{{Payload: []byte("first")}}))
	if resp.StatusCode != 200 {
		t.Fatalf("first append: %d %s", resp.StatusCode, data)
	}
	before := nodetest.State(t, f.b)

	batch := string(wire.EncodeRecords([]stream.RecordValue{{Payload: []byte("x")}}))
	post := func(path string, headers ...string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: " + wire.BatchContentType + "\r\n" +
			strings.Join(headers, "") + "Content-Length: " + strconv.Itoa(len(batch)) + "\r\n\r\n" + batch
	}
	putJSON := func(path, body string) string {
		return "PUT " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(batch), batch)
	var many []stream.RecordValue
	for range 11 {
		many = append(many, stream.RecordValue{Payload: []byte("r")})
	}
	manyBody := string(wire.EncodeRecords(many))
	deep := strings.Repeat("d/", node.MaxNameDepth) + "d"
	for _, tc := range []struct {
		name   string
		req    string
		status int
		code   string
	}{
		{"CL and TE", "POST /v1/log/s HTTP/1.1\r\nHost: x\r\nContent-Type: " + wire.BatchContentType + "\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked, 400, "AMBIGUOUS_FRAMING"},
		{"differing CL", post("/v1/log/s", "Content-Length: 1\r\n"), 400, "AMBIGUOUS_FRAMING"},
		{"TE not chunked", "POST /v1/log/s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + chunked, 400, "AMBIGUOUS_FRAMING"},
		{"101 header lines", post("/v1/log/s", strings.Repeat("X-Pad: y\r\n", 100)), 431, "HEADERS_TOO_LARGE"},
		{"head over 64 KiB", post("/v1/log/s", "X-Pad: "+strings.Repeat("y", 64<<10)+"\r\n"), 431, "HEADERS_TOO_LARGE"},
		{"URL over 8 KiB", post("/v1/log/s?key=" + strings.Repeat("k", 8<<10)), 414, "URI_TOO_LONG"},
		{"empty Producer-Id", post("/v1/log/s", "Producer-Id: \r\nProducer-Epoch: 0\r\nProducer-Seq: 1\r\n"), 400, "MALFORMED_HEADER"},
		{"repeated Producer-Seq", post("/v1/log/s", "Producer-Id: p\r\nProducer-Epoch: 0\r\nProducer-Seq: 1\r\nProducer-Seq: 2\r\n"), 400, "MALFORMED_HEADER"},
		{"empty Stream-Seq", post("/v1/log/s", "Stream-Seq:\r\n"), 400, "MALFORMED_HEADER"},
		{"empty query parameter", post("/v1/log/s?partition="), 400, "MALFORMED_QUERY"},
		{"repeated query parameter", post("/v1/log/s?partition=0&partition=0"), 400, "MALFORMED_QUERY"},
		{"bad batch framing", "POST /v1/log/s HTTP/1.1\r\nHost: x\r\nContent-Type: " + wire.BatchContentType + "\r\nContent-Length: 2\r\n\r\n\xff\xff", 400, "MALFORMED_BATCH"},
		{"body over the limit", "POST /v1/log/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 2048\r\n\r\n" + strings.Repeat("b", 2048), 413, "BODY_TOO_LARGE"},
		{"too many records", "POST /v1/log/s HTTP/1.1\r\nHost: x\r\nContent-Type: " + wire.BatchContentType + "\r\nContent-Length: " + strconv.Itoa(len(manyBody)) + "\r\n\r\n" + manyBody, 413, "BODY_TOO_LARGE"},
		{"name over 255 bytes", post("/v1/log/" + strings.Repeat("n", 256)), 400, "STREAM_MISCONFIGURED"},
		{"name over 16 segments", putJSON("/v1/admin/streams/"+deep, "{}"), 400, "STREAM_MISCONFIGURED"},
		{"admin JSON with a repeated member", putJSON("/v1/admin/streams/new", `{"policy":{"partitions":1},"policy":null}`), 400, "MALFORMED_BODY"},
		{"admin JSON with trailing data", putJSON("/v1/admin/streams/new", "{} {}"), 400, "MALFORMED_BODY"},
		{"admin JSON not UTF-8", putJSON("/v1/admin/streams/new", "{\"policy\":{\"retainFor\":\"\xff\xfe\"}}"), 400, "MALFORMED_BODY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := framingtest.Exchange(t, addr, tc.req)
			if status != tc.status || !strings.Contains(body, `"`+tc.code+`"`) {
				t.Fatalf("%d %s, want %d %s", status, body, tc.status, tc.code)
			}
			if after := nodetest.State(t, f.b); after != before {
				t.Fatalf("the broker changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	if !reflect.DeepEqual(nodetest.State(t, f.b), before) {
		t.Fatal("the broker changed")
	}
}

func frontendOpts(maxBody int64) frontend.Options { return frontend.Options{MaxBodyBytes: maxBody} }
