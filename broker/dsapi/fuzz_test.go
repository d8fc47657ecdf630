package dsapi

import (
	"encoding/json"
	"testing"
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
