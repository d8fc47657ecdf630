package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		body, refused string // refused: a part of the reason, "" when accepted
	}{
		{`{"a":1,"b":[1,2,{"a":2}],"c":{"a":3}}`, ""},
		{`[{"a":1},{"a":1}]`, ""},
		{`  "text"  `, ""},
		{`42`, ""},
		{`{"a":"a","b":"a"}`, ""},
		{`{"a":{"b":1},"b":{"b":2}}`, ""},
		{`{"a":1,"a":2}`, `"a" appears twice`},
		{`{"a":1,"\u0061":2}`, `"a" appears twice`},
		{`[1,{"x":{"y":1,"y":2}}]`, `"y" appears twice`},
		{`{"a":[],"a":{}}`, `"a" appears twice`},
		{`{"a":1}}`, "not one valid JSON value"},
		{`{"a":1} {"b":2}`, "not one valid JSON value"},
		{`{"a":1}x`, "not one valid JSON value"},
		{``, "not one valid JSON value"},
		{`{"a":` + "\"\xff\"" + `}`, "not valid UTF-8"},
		{"\"\xed\xa0\x80\"", "not valid UTF-8"}, // a surrogate's encoding
	} {
		err := Check([]byte(tc.body))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%q: refused: %v", tc.body, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%q: got %v; want a refusal saying %q", tc.body, err, tc.refused)
		}
		var se *Error
		if err != nil && !errors.As(err, &se) {
			t.Errorf("%q: %T is no *Error", tc.body, err)
		}
	}
}

// FuzzCheck: Check never panics; what it accepts is valid UTF-8 and valid
// JSON, and decodes into as many members as it names (none repeated); what
// it refuses that is valid UTF-8 and JSON repeats a name.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,{"a":2}]}`, `{"a":1,"a":2}`, `[{"a":1},{"a":1}]`, `{"a":1}}`, "\"\xff\"", `{"\u0061":1,"a":2}`, `{"a":{"b":{"c":[1,2,"x"]}},"d":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		valid := utf8.Valid(b) && json.Valid(b)
		if err == nil && !valid {
			t.Fatalf("accepted %q, which is not valid UTF-8 JSON", b)
		}
		if err != nil && valid && !strings.Contains(err.Error(), "appears twice") {
			t.Fatalf("refused valid %q: %v", b, err)
		}
		if err == nil && countNames(t, b) != decodedNames(t, b) {
			t.Fatalf("accepted %q, whose objects lose members when decoded", b)
		}
	})
}

// countNames counts the member names in b's objects as written.
func countNames(t *testing.T, b []byte) int {
	n := 0
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		s := strings.TrimLeft(string(raw), " \t\r\n")
		switch {
		case strings.HasPrefix(s, "{"):
			dec := json.NewDecoder(strings.NewReader(s))
			_, _ = dec.Token()
			for dec.More() {
				_, _ = dec.Token() // the name
				var m json.RawMessage
				if err := dec.Decode(&m); err != nil {
					t.Fatal(err)
				}
				n++
				walk(m)
			}
		case strings.HasPrefix(s, "["):
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				walk(it)
			}
		}
	}
	walk(b)
	return n
}

// decodedNames counts the members of b's objects once decoded into maps.
func decodedNames(t *testing.T, b []byte) int {
	// Numbers stay text: RFC 8259 allows a number no float64 holds
	// (1e400), which Check rightly accepts.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var count func(v any) int
	count = func(v any) int {
		switch x := v.(type) {
		case map[string]any:
			n := len(x)
			for _, e := range x {
				n += count(e)
			}
			return n
		case []any:
			n := 0
			for _, e := range x {
				n += count(e)
			}
			return n
		}
		return 0
	}
	return count(v)
}
