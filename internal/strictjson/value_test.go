package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReadValue(t *testing.T) {
	small := func(n json.Number) error {
		if len(n) > 3 {
			return errors.New("number too long")
		}
		return nil
	}
	for _, tc := range []struct {
		note   string
		in     string
		o      ValueOptions
		want   any
		is     error  // the *ValueError's cause, or nil
		offset int64  // of the *ValueError
		first  int64  // of a duplicate key's first occurrence
		syntax string // part of a *json.SyntaxError's text
	}{
		{note: "object", in: `{"a": [1, "x", true, null]}`,
			want: map[string]any{"a": []any{json.Number("1"), "x", true, nil}}},
		{note: "scalar with white space", in: " \n 12.5e3 \t", want: json.Number("12.5e3")},
		{note: "same key in two objects", in: `[{"a":1},{"a":2}]`,
			want: []any{map[string]any{"a": json.Number("1")}, map[string]any{"a": json.Number("2")}}},
		{note: "duplicate key", in: `{"a": 1, "b": 2, "a": 3}`, is: ErrDuplicateKey, offset: 17, first: 1},
		{note: "duplicate nested key", in: `[{}, {"x": {"b": 1,` + "\n" + `"b": 1}}]`, is: ErrDuplicateKey, offset: 20, first: 12},
		{note: "depth at the limit", in: `[[1]]`, o: ValueOptions{MaxDepth: 2},
			want: []any{[]any{json.Number("1")}}},
		{note: "too deep", in: `[[[1]]]`, o: ValueOptions{MaxDepth: 2}, is: ErrTooDeep, offset: 2},
		{note: "too deep object", in: `{"a": {"b": {}}}`, o: ValueOptions{MaxDepth: 2}, is: ErrTooDeep, offset: 12},
		{note: "no depth limit", in: strings.Repeat("[", 50) + strings.Repeat("]", 50),
			want: nest(49)},
		{note: "number refused", in: `{"a": 1, "b": 12345}`, o: ValueOptions{Number: small}, offset: 14},
		{note: "empty", in: "", syntax: "unexpected end of JSON input"},
		{note: "second value", in: `{} {}`, syntax: "after top-level value"},
		{note: "stray bracket", in: `[1]]`, syntax: "after top-level value"},
		{note: "truncated", in: `{"a":`, syntax: "unexpected end of JSON input"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			got, err := ReadValue([]byte(tc.in), tc.o)
			if tc.syntax != "" {
				se, ok := errors.AsType[*json.SyntaxError](err)
				if !ok || !strings.Contains(se.Error(), tc.syntax) {
					t.Fatalf("ReadValue(%q) error %v, want a syntax error with %q", tc.in, err, tc.syntax)
				}
				return
			}
			if tc.want != nil {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("ReadValue(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
				}
				return
			}
			ve, ok := errors.AsType[*ValueError](err)
			if !ok {
				t.Fatalf("ReadValue(%q) error %v, want a *ValueError", tc.in, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v, want %v", err, tc.is)
			}
			if ve.Offset != tc.offset || ve.First != tc.first {
				t.Errorf("error at %d (first %d), want %d (first %d)", ve.Offset, ve.First, tc.offset, tc.first)
			}
		})
	}
}

// nest is n arrays inside one another around an empty one.
func nest(n int) any {
	v := any([]any{})
	for range n {
		v = []any{v}
	}
	return v
}

// FuzzReadValue checks ReadValue against encoding/json: it accepts only
// valid JSON, reads what encoding/json reads when no object repeats a
// key, and points a duplicate key's error at the repeated key.
func FuzzReadValue(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `{"a":1,"a":2}`, `[[[[]]]]`, `1 2`, ``, ` "x" `, `{"a":`, `{"é":{"b":1e999}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ReadValue(data, ValueOptions{MaxDepth: 3})
		if err != nil && json.Valid(data) {
			ve, ok := errors.AsType[*ValueError](err)
			if !ok {
				t.Fatalf("ReadValue(%q) of valid JSON: %v", data, err)
			}
			if ve.Offset < 0 || ve.Offset >= int64(len(data)) {
				t.Fatalf("ReadValue(%q): error offset %d outside the input", data, ve.Offset)
			}
			if errors.Is(err, ErrDuplicateKey) && (ve.First >= ve.Offset || !bytes.HasPrefix(data[ve.Offset:], data[ve.First:ve.First+1])) {
				t.Fatalf("ReadValue(%q): duplicate %q at %d, first at %d", data, ve.Key, ve.Offset, ve.First)
			}
			return
		}
		if err != nil {
			if _, ok := errors.AsType[*json.SyntaxError](err); !ok {
				t.Fatalf("ReadValue(%q) of invalid JSON: %v, want a *json.SyntaxError", data, err)
			}
			return
		}
		var std any
		if err := Decode(data, &std, UseNumber()); err != nil {
			t.Fatalf("ReadValue accepted %q, which Decode refuses: %v", data, err)
		}
		if !reflect.DeepEqual(v, std) {
			t.Fatalf("ReadValue(%q) = %#v; encoding/json reads %#v", data, v, std)
		}
	})
}
