// Package strictjson checks that a body is one JSON text every reader reads
// alike (RFC 8259): valid UTF-8, one value with only white space around it,
// and no object naming a member twice. Go's encoding/json takes the last of
// two equal names and replaces invalid UTF-8 with U+FFFD, other parsers
// keep the first or refuse: a body they would read differently is refused
// here instead, before anything of it is written.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Error says why a body is not strict JSON, and where.
type Error struct {
	// Offset is the byte offset the problem was found at (for a duplicate
	// name, just after it).
	Offset int64
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (at byte %d)", e.Reason, e.Offset) }

// Check returns nil when b is strict JSON, else an *Error.
func Check(b []byte) error {
	if !utf8.Valid(b) {
		return &Error{Offset: int64(firstInvalidUTF8(b)), Reason: "not valid UTF-8"}
	}
	if !json.Valid(b) {
		return &Error{Offset: syntaxOffset(b), Reason: "not one valid JSON value"}
	}
	if bytes.IndexByte(b, '{') < 0 {
		return nil // no object, no name to repeat
	}
	return checkNames(b)
}

// checkNames walks the tokens of b, valid JSON, keeping each open object's
// names (unescaped, so "a" and "\u0061" are one name).
func checkNames(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	// One frame per open object or array: names seen (nil for an array),
	// and whether the next string token is a name.
	type frame struct {
		names  map[string]struct{}
		isName bool
	}
	var stack []frame
	// valueStarts notes, in the object that holds it, that a member's value
	// began: the object's next string is a name again.
	valueStarts := func() {
		if top := len(stack) - 1; top >= 0 && stack[top].names != nil {
			stack[top].isName = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &Error{Offset: dec.InputOffset(), Reason: "not one valid JSON value: " + err.Error()}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				valueStarts()
				stack = append(stack, frame{names: map[string]struct{}{}, isName: true})
			case '[':
				valueStarts()
				stack = append(stack, frame{})
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
			}
		case string:
			top := len(stack) - 1
			if top >= 0 && stack[top].names != nil && stack[top].isName {
				if _, dup := stack[top].names[t]; dup {
					return &Error{Offset: dec.InputOffset(), Reason: fmt.Sprintf("the member name %q appears twice in one object", t)}
				}
				stack[top].names[t] = struct{}{}
				stack[top].isName = false
				continue
			}
			valueStarts()
		default: // a number, a boolean or null
			valueStarts()
		}
	}
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func syntaxOffset(b []byte) int64 {
	var v any
	var se *json.SyntaxError
	if err := json.Unmarshal(b, &v); errors.As(err, &se) {
		return se.Offset
	}
	return int64(len(b))
}
