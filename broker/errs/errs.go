// Package errs is PicoMQ's coded error: a refusal with a stable code, a name,
// a message for people, a detail for operators, the HTTP status and process
// exit code it maps to, and the structured fields that explain it — the two
// sizes, the two offsets, the field name — never the payload.
//
// A package declares each refusal once, as a static:
//
//	RecordTooLarge = errs.Static(CodeRecordTooLarge, "RECORD_TOO_LARGE",
//		"The record exceeds the stream's configured maximum size", "...", 413, 78)
//
// and returns an instance of it carrying the fields of one occurrence:
//
//	return RecordTooLarge.With("index", 3, "size", 2000, "max", 1024)
//
// An instance, however deeply wrapped, matches its static under errors.Is,
// because errors.Is compares codes. The same holds across the wire: a
// problem decoded by Unmarshal carries the code it was encoded with, so a
// remote client returns errors that callers test exactly as they test the
// local ones.
package errs

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Error is one coded refusal: either a static, declared once by a package, or
// an instance of one made by With or Wrap. Its value never changes after it
// is made, so statics can be shared by every goroutine.
type Error struct {
	code       Code
	name       string
	message    string
	detail     string
	httpStatus int
	exitCode   int

	fields []Field
	cause  error
}

// Field is one named value explaining a refusal. Values are kept in the few
// shapes a JSON problem can carry back unchanged: see With.
type Field struct {
	Key   string
	Value any
}

// registry maps every declared code to its static, so that a problem decoded
// from the wire is given back its HTTP status and exit code, and so that two
// packages cannot claim the same code.
var registry sync.Map // Code -> *Error

// Static declares a refusal: its code, its NAME_IN_CAPITALS, the message a
// person reads, the detail an operator reads, the HTTP status it maps to (0
// when the refusal has no status of its own: see HTTPStatus) and the process
// exit code a command-line tool ends with (sysexits.h values).
//
// It is meant for package-level variables. A code declared twice panics at
// start-up, because two refusals sharing a code would match each other under
// errors.Is.
func Static(code Code, name, message, detail string, httpStatus, exitCode int) *Error {
	e := &Error{code: code, name: name, message: message, detail: detail, httpStatus: httpStatus, exitCode: exitCode}
	if prev, loaded := registry.LoadOrStore(code, e); loaded {
		panic(fmt.Sprintf("errs: code %s (%s) declared twice: %s and %s", code, code.Hex(), prev.(*Error).name, name))
	}
	return e
}

// Lookup returns the static declared with code, if any package in this
// binary declared one.
func Lookup(code Code) (*Error, bool) {
	e, ok := registry.Load(code)
	if !ok {
		return nil, false
	}
	return e.(*Error), true
}

// With returns a new instance of e carrying the fields given as alternating
// keys and values: With("size", 2000, "max", 1024). A key already present
// takes the new value in its old place; the receiver is not changed.
//
// Values are normalized to what survives a JSON round trip: every integer to
// int64 (uint64 only above the int64 range), floats to float64, strings and
// booleans as they are, a value with a String or Error method to that string
// (so time.Duration reads "1.5s"), and nil. (A float with no fraction comes
// back from a problem as int64, as JSON does not tell 2.0 from 2.) A []byte becomes "[N bytes]" and
// any other value only its type's name, so that a payload cannot reach a log
// or a response by accident. A key without a value gets nil; a non-string key
// is formatted with %v.
func (e *Error) With(kv ...any) *Error {
	n := e.clone()
	for i := 0; i < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if !ok {
			key = fmt.Sprint(kv[i])
		}
		var v any
		if i+1 < len(kv) {
			v = normalize(kv[i+1])
		}
		n.set(key, v)
	}
	return n
}

// Wrap returns a new instance of e with cause as the error it wraps, plus the
// fields kv as With takes them. errors.Is and errors.As see through it to the
// cause.
func (e *Error) Wrap(cause error, kv ...any) *Error {
	n := e.With(kv...)
	n.cause = cause
	return n
}

func (e *Error) clone() *Error {
	n := *e
	n.fields = append([]Field(nil), e.fields...)
	return &n
}

func (e *Error) set(key string, v any) {
	for i := range e.fields {
		if e.fields[i].Key == key {
			e.fields[i].Value = v
			return
		}
	}
	e.fields = append(e.fields, Field{Key: key, Value: v})
}

// Code returns the refusal's code.
func (e *Error) Code() Code { return e.code }

// Name returns the refusal's name, such as RECORD_TOO_LARGE.
func (e *Error) Name() string { return e.name }

// Message returns the sentence a person reads.
func (e *Error) Message() string { return e.message }

// Detail returns the sentence an operator reads: where the refusal comes from
// and what its fields mean.
func (e *Error) Detail() string { return e.detail }

// ExitCode returns the exit code declared with the static.
func (e *Error) ExitCode() int { return e.exitCode }

// DeclaredStatus returns the HTTP status declared with the static, 0 when it
// declared none. HTTPStatus is what a server answers.
func (e *Error) DeclaredStatus() int { return e.httpStatus }

// Fields returns a copy of the instance's fields, in the order they were set.
func (e *Error) Fields() []Field { return append([]Field(nil), e.fields...) }

// Field returns the value of the field key, and whether it is set.
func (e *Error) Field(key string) (any, bool) {
	for _, f := range e.fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// Unwrap returns the cause given to Wrap, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is a coded error with the same code: a static,
// any instance of it, and any problem decoded with its code all match.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.code == e.code
}

// Error reads NAME (0.2.38.2): message [key=value ...]: cause.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s", e.name, e.code, e.message)
	if len(e.fields) > 0 {
		b.WriteString(" [")
		for i, f := range e.fields {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%v", f.Key, f.Value)
		}
		b.WriteByte(']')
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

// As returns the outermost coded error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// FieldOf returns the field key of the outermost coded error in err's chain.
func FieldOf(err error, key string) (any, bool) {
	e, ok := As(err)
	if !ok {
		return nil, false
	}
	return e.Field(key)
}

// HTTPStatus returns the status a server answers err with.
//
// A coded error answers the status declared with its static. One declared
// with 0 has no status of its own, and gets one from its exit code, which
// says whose fault it is (sysexits.h):
//
//	64 EX_USAGE, 65 EX_DATAERR, 78 EX_CONFIG  -> 400 Bad Request: the request, or the configuration it carries, is refused
//	66 EX_NOINPUT                             -> 404 Not Found
//	69 EX_UNAVAILABLE, 75 EX_TEMPFAIL         -> 503 Service Unavailable: retrying later may succeed
//	anything else (70 EX_SOFTWARE, 74 EX_IOERR, ...) -> 500 Internal Server Error
//
// A configuration refused at a server's start-up (a stream directory it cannot
// use, say) is EX_CONFIG too and would read 400; it ends the process and is
// not meant to answer a request, so a server that does report one over HTTP
// overrides the status. An error with no code in its chain is 500; nil is 200.
func HTTPStatus(err error) int {
	if err == nil {
		return 200
	}
	e, ok := As(err)
	if !ok {
		return 500
	}
	if e.httpStatus != 0 {
		return e.httpStatus
	}
	switch e.exitCode {
	case 64, 65, 78:
		return 400
	case 66:
		return 404
	case 69, 75:
		return 503
	default:
		return 500
	}
}

// ExitCode returns the code a command-line tool ends with after err: 0 for
// nil, the declared exit code of a coded error (1 if it declared 0), and 1 for
// an error with no code.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := As(err); ok && e.exitCode != 0 {
		return e.exitCode
	}
	return 1
}
