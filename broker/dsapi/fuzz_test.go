package dsapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// FuzzParseOffset: any string parses without a panic; one that parses
// names the position formatOffset writes, and that writing parses back to
// it; every offset the server writes parses.
func FuzzParseOffset(f *testing.F) {
	for _, s := range []string{formatOffset(0), formatOffset(1<<64 - 1), "0_0", "1_1", "-1", "now", "99999999999999999999_0", "0000000000000001_0000000000000000x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		off, ok := parseOffset(s)
		if !ok {
			return
		}
		w := formatOffset(off)
		if back, ok := parseOffset(w); !ok || back != off {
			t.Fatalf("%q parsed to %d, written %q, parsed back to %d, %v", s, off, w, back, ok)
		}
	})
}

// FuzzJSONRecord: any body is taken or refused without a panic; a body
// taken becomes a record that splits back into as many messages as
// reported, each valid JSON, and flattening that record's messages again
// gives the same record.
func FuzzJSONRecord(f *testing.F) {
	for _, s := range []string{`[{"n":1},{"n":2}]`, `{"n":3}`, `[[1,2],[3]]`, `[]`, `"x"`, `{"a":1,"a":2}`, `[1] [2]`, "\"\xff\"", ` [ 1 , {"b" : [ ] } ] `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, n, err := jsonRecord(body)
		if err != nil {
			return
		}
		msgs, err := jsonMessages(rec)
		if err != nil || len(msgs) != n {
			t.Fatalf("%q became %q: %d messages back (%v), %d reported", body, rec, len(msgs), err, n)
		}
		for _, m := range msgs {
			if !json.Valid(m) {
				t.Fatalf("%q: message %q is not valid JSON", body, m)
			}
		}
		if n == 0 {
			return
		}
		again, _, err := jsonRecord(append(append([]byte{'['}, rec...), ']'))
		if err != nil || string(again) != string(rec) {
			t.Fatalf("%q: record %q flattened again is %q, %v", body, rec, again, err)
		}
	})
}

// FuzzHeaders: any protocol header value, once or repeated, and any query
// string go through the request check and the producer parsing without a
// panic; an empty or repeated protocol header is always refused with
// MALFORMED_HEADER, an empty or repeated offset, live or cursor with
// MALFORMED_QUERY, and what the check lets through is one non-empty value.
func FuzzHeaders(f *testing.F) {
	f.Add(uint8(0), "7", false, "offset=-1")
	f.Add(uint8(1), "", false, "")
	f.Add(uint8(7), "p1", true, "offset=&live=sse")
	f.Add(uint8(3), "TRUE", false, "cursor=1&cursor=2")
	f.Add(uint8(8), " ", false, "offset=0000000000000001_0000000000000000&live=long-poll&cursor=5")
	f.Add(uint8(9), "9007199254740992", false, "%zz")
	f.Fuzz(func(t *testing.T, which uint8, value string, repeat bool, query string) {
		name := requestHeaders[int(which)%len(requestHeaders)]
		hd := http.Header{}
		hd.Add(name, value)
		if repeat {
			hd.Add(name, value)
		}
		if which%2 == 0 { // a complete producer tuple now and then
			for _, p := range []string{hProducerID, hProducerEpoch, hProducerSeq} {
				if hd.Get(p) == "" && p != name {
					hd.Set(p, "1")
				}
			}
		}
		err := checkRequest(hd, query)
		if repeat || strings.TrimSpace(value) == "" {
			if !errors.Is(err, wire.MalformedHeader) {
				t.Fatalf("%s: %q (repeated %v) passed the check: %v", name, value, repeat, err)
			}
			return
		}
		if q, perr := url.ParseQuery(query); perr == nil && err == nil {
			for _, p := range queryParams {
				if vs, ok := q[p]; ok && (len(vs) != 1 || vs[0] == "") {
					t.Fatalf("query %q: %s %q passed the check", query, p, vs)
				}
			}
		}
		if err != nil {
			return
		}
		if prod, err := parseProducer(hd); err == nil && prod != nil && (prod.ID == "" || prod.Epoch < 0 || prod.Seq < 0) {
			t.Fatalf("producer %+v from %v", prod, hd)
		}
		_, _ = parseOffset(value)
	})
}
