package errs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
)

// Codes in the 0xFF block are this test's own; no package declares them.
var (
	tooBig = errs.Static(0xFF_00_00_01, "TOO_BIG", "The thing is too big",
		"errs_test: a thing above its bound; the fields carry both sizes", 413, 78)
	noStatusConfig = errs.Static(0xFF_00_00_02, "NO_STATUS_CONFIG", "Misconfigured", "errs_test", 0, 78)
	noStatusIO     = errs.Static(0xFF_00_00_03, "NO_STATUS_IO", "Storage failed", "errs_test", 0, 74)
	noStatusTemp   = errs.Static(0xFF_00_00_04, "NO_STATUS_TEMP", "Try later", "errs_test", 0, 75)
	noStatusInput  = errs.Static(0xFF_00_00_05, "NO_STATUS_INPUT", "Nothing there", "errs_test", 0, 66)
	noStatusNoExit = errs.Static(0xFF_00_00_06, "NO_STATUS_NO_EXIT", "Odd", "errs_test", 0, 0)
)

type offset uint64

func TestCodeForms(t *testing.T) {
	c := errs.Code(0x00_02_26_01)
	if got := c.String(); got != "0.2.38.1" {
		t.Errorf("String = %q, want 0.2.38.1", got)
	}
	if got := c.Hex(); got != "0x00_02_26_01" {
		t.Errorf("Hex = %q, want 0x00_02_26_01", got)
	}
	for _, s := range []string{"0.2.38.1", "0x00_02_26_01", "0x00022601", "140801"} {
		got, err := errs.ParseCode(s)
		if err != nil || got != c {
			t.Errorf("ParseCode(%q) = %v, %v; want %v", s, got, err, c)
		}
	}
	for _, s := range []string{"", "0.2.38", "0.2.256.1", "x", "0x1_0000_0000", "-1"} {
		if _, err := errs.ParseCode(s); err == nil {
			t.Errorf("ParseCode(%q) accepted", s)
		}
	}
	b, _ := json.Marshal(c)
	if string(b) != `"0.2.38.1"` {
		t.Errorf("json = %s", b)
	}
}

func TestStaticDeclaredTwicePanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "TOO_BIG") {
			t.Fatalf("recover() = %v, want a panic naming the first declaration", r)
		}
	}()
	errs.Static(0xFF_00_00_01, "AGAIN", "m", "d", 0, 1)
}

func TestWithKeepsStaticAndFields(t *testing.T) {
	e := tooBig.With("size", 2000, "max", int64(1024), "index", 3)
	if !errors.Is(e, tooBig) {
		t.Fatal("instance does not match its static")
	}
	if len(tooBig.Fields()) != 0 {
		t.Fatal("With changed the static")
	}
	want := []errs.Field{{"size", int64(2000)}, {"max", int64(1024)}, {"index", int64(3)}}
	if got := e.Fields(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Fields = %#v, want %#v", got, want)
	}
	// Replacing a key keeps its place; the first instance is unchanged.
	e2 := e.With("size", 3000)
	if v, _ := e2.Field("size"); v != int64(3000) {
		t.Errorf("size = %v", v)
	}
	if v, _ := e.Field("size"); v != int64(2000) {
		t.Errorf("With changed its receiver: size = %v", v)
	}
	if e2.Fields()[0].Key != "size" {
		t.Errorf("replaced key moved: %v", e2.Fields())
	}
	if got, want := e.Error(), "TOO_BIG (255.0.0.1): The thing is too big [size=2000 max=1024 index=3]"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if e.Code() != 0xFF_00_00_01 || e.Name() != "TOO_BIG" || e.DeclaredStatus() != 413 || e.ExitCode() != 78 ||
		e.Message() != "The thing is too big" || !strings.HasPrefix(e.Detail(), "errs_test:") {
		t.Errorf("accessors lost the static's values: %#v", e)
	}
}

func TestNormalize(t *testing.T) {
	type named string
	e := tooBig.With(
		"int8", int8(-3), "uint", uint(7), "offset", offset(9), "huge", uint64(1<<63),
		"dur", 1500*time.Millisecond, "float", float32(0.5), "str", named("x"), "bool", true,
		"payload", []byte("secret bytes"), "struct", struct{ B []byte }{[]byte("secret")},
		"err", errors.New("boom"), "nil", nil, 42, "odd key", "dangling")
	want := map[string]any{
		"int8": int64(-3), "uint": int64(7), "offset": int64(9), "huge": uint64(1 << 63),
		"dur": "1.5s", "float": float64(0.5), "str": "x", "bool": true,
		"payload": "[12 bytes]", "struct": "struct { B []uint8 }",
		"err": "boom", "nil": nil, "42": "odd key", "dangling": nil,
	}
	for k, w := range want {
		if got, ok := e.Field(k); !ok || got != w {
			t.Errorf("field %s = %#v (%v), want %#v", k, got, ok, w)
		}
	}
	if strings.Contains(e.Error(), "secret") {
		t.Errorf("payload bytes reached the message: %s", e.Error())
	}
}

func TestWrap(t *testing.T) {
	cause := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrPermission}
	e := noStatusIO.Wrap(cause, "op", "open")
	wrapped := fmt.Errorf("engine: %w", e)
	if !errors.Is(wrapped, noStatusIO) {
		t.Error("wrapped instance does not match its static")
	}
	if !errors.Is(wrapped, fs.ErrPermission) {
		t.Error("cause not reachable through errors.Is")
	}
	var pe *fs.PathError
	if !errors.As(wrapped, &pe) || pe.Path != "/x" {
		t.Error("cause not reachable through errors.As")
	}
	if errors.Is(wrapped, tooBig) {
		t.Error("matches a static of another code")
	}
	if got, ok := errs.FieldOf(wrapped, "op"); !ok || got != "open" {
		t.Errorf("FieldOf = %v, %v", got, ok)
	}
	if !strings.HasSuffix(e.Error(), ": open /x: permission denied") {
		t.Errorf("Error() = %q lacks the cause", e.Error())
	}
}

func TestProblemRoundTrip(t *testing.T) {
	e := tooBig.Wrap(errors.New("root cause"), "size", 2000, "max", 1024, "index", offset(3), "field", "MaxBytes")
	b, err := errs.Marshal(fmt.Errorf("outer: %w", e))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"255.0.0.1","name":"TOO_BIG","message":"The thing is too big",` +
		`"detail":"errs_test: a thing above its bound; the fields carry both sizes","status":413,"exitCode":78,` +
		`"fields":{"size":2000,"max":1024,"index":3,"field":"MaxBytes"},"cause":"root cause"}`
	if string(b) != want {
		t.Fatalf("problem =\n%s\nwant\n%s", b, want)
	}
	got, err := errs.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got, tooBig) {
		t.Error("decoded problem does not match its static")
	}
	if !reflect.DeepEqual(got.Fields(), e.Fields()) {
		t.Errorf("fields = %#v, want %#v", got.Fields(), e.Fields())
	}
	if got.DeclaredStatus() != 413 || got.ExitCode() != 78 || got.Error() != e.Error() {
		t.Errorf("decoded = %q (%d, %d), want %q", got.Error(), got.DeclaredStatus(), got.ExitCode(), e.Error())
	}
	// And once more, through a struct field, as a client decodes a body.
	var body struct{ Err *errs.Error }
	if err := json.Unmarshal([]byte(`{"Err":`+string(b)+`}`), &body); err != nil || !errors.Is(body.Err, tooBig) {
		t.Errorf("UnmarshalJSON: %v, %v", body.Err, err)
	}
}

func TestProblemOfUndeclaredCode(t *testing.T) {
	in := `{"code":"0x7F_00_00_01","name":"ELSEWHERE","message":"m","detail":"d","status":409,"fields":{"n":18446744073709551615,"f":1.5,"o":{"a":[1]}}}`
	got, err := errs.Unmarshal([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got.Code() != 0x7F_00_00_01 || got.Name() != "ELSEWHERE" || errs.HTTPStatus(got) != 409 {
		t.Errorf("decoded = %v (%d)", got, errs.HTTPStatus(got))
	}
	// The exit code travels in the problem; one written without it exits
	// as its status implies.
	for _, c := range []struct {
		in   string
		exit int
	}{
		{in, 65},
		{`{"code":"127.0.0.2","name":"GONE","message":"m","status":404}`, 66},
		{`{"code":"127.0.0.3","name":"BUSY","message":"m","status":503,"exitCode":75}`, 75},
		{`{"code":"127.0.0.4","name":"BUSY","message":"m","status":503}`, 69},
		{`{"code":"127.0.0.5","name":"NONE","message":"m"}`, 1},
	} {
		e, err := errs.Unmarshal([]byte(c.in))
		if err != nil || errs.ExitCode(e) != c.exit {
			t.Errorf("exit code of %s = %d (%v), want %d", c.in, errs.ExitCode(e), err, c.exit)
		}
	}
	other, _ := errs.Unmarshal([]byte(`{"code":"127.0.0.1","name":"ELSEWHERE","message":"m"}`))
	if !errors.Is(got, other) {
		t.Error("two problems of one code do not match")
	}
	want := []errs.Field{{"n", uint64(18446744073709551615)}, {"f", 1.5}, {"o", `{"a":[1]}`}}
	if !reflect.DeepEqual(got.Fields(), want) {
		t.Errorf("fields = %#v, want %#v", got.Fields(), want)
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"code":"nope","name":"X"}`, `{"code":"1.2.3.4","name":"X","fields":[1]}`} {
		if e, err := errs.Unmarshal([]byte(bad)); err == nil {
			t.Errorf("Unmarshal(%q) = %v, want an error", bad, e)
		}
	}
	if _, err := errs.Marshal(errors.New("plain")); err == nil {
		t.Error("Marshal of an error with no code succeeded")
	}
}

func TestHTTPStatusAndExitCode(t *testing.T) {
	for _, c := range []struct {
		err        error
		status, ex int
	}{
		{tooBig.With("size", 1), 413, 78},
		{noStatusConfig, 400, 78},
		{fmt.Errorf("w: %w", noStatusIO.Wrap(errors.New("eio"))), 500, 74},
		{noStatusTemp, 503, 75},
		{noStatusInput, 404, 66},
		{noStatusNoExit, 500, 1},
		{errors.New("plain"), 500, 1},
		{nil, 200, 0},
	} {
		if got := errs.HTTPStatus(c.err); got != c.status {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c.err, got, c.status)
		}
		if got := errs.ExitCode(c.err); got != c.ex {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.ex)
		}
	}
	if s, ok := errs.Lookup(0xFF_00_00_02); !ok || s != noStatusConfig {
		t.Error("Lookup did not find a declared static")
	}
	if _, ok := errs.Lookup(0xFE_00_00_00); ok {
		t.Error("Lookup found an undeclared code")
	}
}
