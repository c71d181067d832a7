// Package strictjson reads JSON the way every gated input is read: one
// value, no member the target type lacks, no key twice, nothing after the
// value. Decode reads into a Go value; Object walks one object member by
// member, in order, for decoders that name the member at fault in their
// own words; ReadValue reads any value; CheckKeys holds a document that
// other parsers read too (a proposal) to a schema, every key a field of
// it byte for byte. The package also turns an error's byte offset into
// the line and column a person finds in an editor.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// ErrTrailingData is returned by Decode and Object when the input holds
// more than the one JSON value: another value, or a stray closing bracket
// or brace.
var ErrTrailingData = errors.New("unexpected data after the JSON value")

// ErrNotObject is returned by Object when the input's value is valid JSON
// but not an object.
var ErrNotObject = errors.New("not a JSON object")

// ErrDuplicateMember is wrapped by the *MemberError of Object for a member
// that appears a second time in the object.
var ErrDuplicateMember = errors.New("member appears twice")

// MemberError is an error of Object in one member of the object: Err is
// ErrDuplicateMember, or encoding/json's error reading the member's value.
type MemberError struct {
	// Key is the member's name, as the input spells it once unquoted.
	Key string
	Err error
}

// Error names the member and the problem.
func (e *MemberError) Error() string {
	return fmt.Sprintf("member %q: %v", e.Key, e.Err)
}

// Unwrap returns the member's problem.
func (e *MemberError) Unwrap() error { return e.Err }

// Option changes how Decode reads numbers.
type Option func(*json.Decoder)

// UseNumber makes Decode store numbers in an interface{} as json.Number
// instead of float64, so that large integers keep every digit.
func UseNumber() Option {
	return func(d *json.Decoder) { d.UseNumber() }
}

// Decode decodes data, which must hold exactly one JSON value and white
// space around it, into v. A member v does not have is an error, as is
// anything after the value (ErrTrailingData). Other errors are
// encoding/json's own (*json.SyntaxError, *json.UnmarshalTypeError, io.EOF
// for empty input, ...), unwrapped, so callers can word them in their own
// terms.
func Decode(data []byte, v any, opts ...Option) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	for _, o := range opts {
		o(dec)
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Token, unlike More, sees a stray ] or } after the value.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailingData
	}
	return nil
}

// Object reads data, which must hold exactly one JSON object and white
// space around it, and calls fn with each member's name and value, in the
// order of the input, so a caller can check each member by hand (its
// type, its range, that it is known) and name the member at fault. It
// refuses a value that is not an object (ErrNotObject), a member given
// twice (a *MemberError wrapping ErrDuplicateMember, before fn sees the
// second), a member whose value is not JSON (a *MemberError wrapping
// encoding/json's error), and anything after the object
// (ErrTrailingData). Other syntax errors are encoding/json's own,
// unwrapped, as in Decode. An error of fn stops the walk and is returned
// as it is.
func Object(data []byte, fn func(key string, value json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return ErrNotObject
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // Token returns an object's keys as strings
		if seen[key] {
			return &MemberError{Key: key, Err: ErrDuplicateMember}
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return &MemberError{Key: key, Err: err}
		}
		if err := fn(key, value); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailingData
	}
	return nil
}

// Position is the line and column of byte offset off of data, both
// 1-based. Columns count characters (UTF-8 code points), not bytes, as
// editors and compilers' file:line:col do, so "café": puts the colon in
// column 7. An offset outside data is clamped to it.
func Position(data []byte, off int64) (line, col int) {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	start := bytes.LastIndexByte(before, '\n') + 1
	return bytes.Count(before, []byte("\n")) + 1, utf8.RuneCount(before[start:]) + 1
}

// ErrorPosition is the line and column in data of a syntax or type error
// of encoding/json: for a syntax error the offending byte, for a type
// error the end of the value of the wrong type. ok is false for any other
// error.
func ErrorPosition(data []byte, err error) (line, col int, ok bool) {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		// Offset counts the offending byte; point at it.
		line, col = Position(data, syn.Offset-1)
	case errors.As(err, &typ):
		line, col = Position(data, typ.Offset)
	default:
		return 0, 0, false
	}
	return line, col, true
}
