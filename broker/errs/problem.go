package errs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
)

// A problem is how a coded error travels over HTTP, the body a server answers
// a refusal with:
//
//	{
//	  "code": "0.2.38.2",
//	  "name": "RECORD_TOO_LARGE",
//	  "message": "The record exceeds the stream's configured maximum size",
//	  "detail": "core/data/stream: ...",
//	  "status": 413,
//	  "fields": {"index": 3, "size": 2000, "max": 1024},
//	  "cause": "..."
//	}
//
// code, name and message are always present; detail, status, fields and
// cause only when set. Fields keep their order. The shape is stable: members
// may be added, none renamed or removed.
type problem struct {
	Code    Code            `json:"code"`
	Name    string          `json:"name"`
	Message string          `json:"message"`
	Detail  string          `json:"detail,omitempty"`
	Status  int             `json:"status,omitempty"`
	Exit    int             `json:"exitCode,omitempty"`
	Fields  json.RawMessage `json:"fields,omitempty"`
	Cause   string          `json:"cause,omitempty"`
}

// MarshalJSON writes e as a problem. The cause, if any, travels as its
// message only: the receiving side gets it back as a plain error.
func (e *Error) MarshalJSON() ([]byte, error) {
	p := problem{Code: e.code, Name: e.name, Message: e.message, Detail: e.detail, Status: HTTPStatus(e), Exit: e.exitCode}
	if len(e.fields) > 0 {
		// Written by hand because a Go map would lose the fields' order.
		var b bytes.Buffer
		b.WriteByte('{')
		for i, f := range e.fields {
			if i > 0 {
				b.WriteByte(',')
			}
			k, err := json.Marshal(f.Key)
			if err != nil {
				return nil, err
			}
			v, err := json.Marshal(f.Value)
			if err != nil {
				return nil, fmt.Errorf("errs: field %q: %w", f.Key, err)
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
		p.Fields = b.Bytes()
	}
	if e.cause != nil {
		p.Cause = e.cause.Error()
	}
	return json.Marshal(p)
}

// Marshal writes the outermost coded error in err's chain as a problem. An
// error with no code has no problem to write, and is refused.
func Marshal(err error) ([]byte, error) {
	e, ok := As(err)
	if !ok {
		return nil, fmt.Errorf("errs: %w has no code to marshal", err)
	}
	return e.MarshalJSON()
}

// Unmarshal reads a problem back into a coded error.
//
// When its code was declared in this binary, the error takes name, message,
// detail, HTTP status and exit code from that static — the local declaration
// is the authority — and matches it under errors.Is. A code nobody here
// declared still gives an error with the problem's own name, message,
// detail, status and exit code (a problem written before it carried one:
// the exit code its status implies), matching any other problem of that
// code — so that a command-line tool exits as the server's declaration
// says without linking every package that declares codes.
func Unmarshal(data []byte) (*Error, error) {
	var p problem
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("errs: not a problem: %w", err)
	}
	if p.Name == "" {
		return nil, errors.New("errs: not a problem: no name")
	}
	var e *Error
	if s, ok := Lookup(p.Code); ok {
		e = s.clone()
	} else {
		e = &Error{code: p.Code, name: p.Name, message: p.Message, detail: p.Detail, httpStatus: p.Status, exitCode: p.Exit}
		if e.exitCode == 0 {
			e.exitCode = exitCodeOfStatus(p.Status)
		}
	}
	if len(p.Fields) > 0 && !bytes.Equal(p.Fields, []byte("null")) {
		fields, err := decodeFields(p.Fields)
		if err != nil {
			return nil, err
		}
		e.fields = fields
	}
	if p.Cause != "" {
		e.cause = errors.New(p.Cause)
	}
	return e, nil
}

// exitCodeOfStatus is the sysexits code an HTTP status implies, the
// inverse of HTTPStatus's mapping: 0 (ExitCode reads 1) for none.
func exitCodeOfStatus(status int) int {
	switch {
	case status == 404:
		return 66 // EX_NOINPUT
	case status == 401 || status == 403:
		return 77 // EX_NOPERM
	case status == 503:
		return 69 // EX_UNAVAILABLE
	case status >= 400 && status < 500:
		return 65 // EX_DATAERR
	case status >= 500:
		return 70 // EX_SOFTWARE
	}
	return 0
}

// UnmarshalJSON reads a problem into e, as Unmarshal does.
func (e *Error) UnmarshalJSON(data []byte) error {
	d, err := Unmarshal(data)
	if err != nil {
		return err
	}
	*e = *d
	return nil
}

// decodeFields reads the fields object token by token, to keep its order.
func decodeFields(raw []byte) ([]Field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("errs: problem fields are not an object")
	}
	var fields []Field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("errs: problem fields: %w", err)
		}
		key := t.(string) // inside an object, a token before a value is its key
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("errs: problem field %q: %w", key, err)
		}
		fields = append(fields, Field{Key: key, Value: normalize(v)})
	}
	return fields, nil
}

// normalize brings a field's value to the shape it has after a JSON round
// trip, so that a field read locally and one read from a problem compare
// equal. See With.
func normalize(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int64, float64:
		return x
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return fromUint(x)
	case float32:
		return float64(x)
	case []byte:
		return fmt.Sprintf("[%d bytes]", len(x))
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u
		}
		f, _ := x.Float64()
		return f
	case map[string]any, []any:
		// A nested JSON value: kept as its compact text rather than as a
		// structure With would not have produced.
		b, _ := json.Marshal(x)
		return string(b)
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	// Named types without a String method, such as an offset type over
	// uint64, by their kind.
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fromUint(r.Uint())
	case reflect.Float32, reflect.Float64:
		return r.Float()
	case reflect.String:
		return r.String()
	case reflect.Bool:
		return r.Bool()
	}
	return fmt.Sprintf("%T", v)
}

func fromUint(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u
}
