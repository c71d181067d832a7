// Package strictjson reads JSON the way every gated input is read: one
// value, no member the target type lacks, nothing after the value.
// CheckKeys goes further for documents that other parsers read too (a
// proposal): no key twice in one object, and every key a field of the
// schema byte for byte. The package also turns an error's byte offset into
// the line and column a person finds in an editor.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"
)

// ErrTrailingData is returned by Decode when the input holds more than
// the one JSON value: another value, or a stray closing bracket or brace.
var ErrTrailingData = errors.New("unexpected data after the JSON value")

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
