package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

type pin struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		note string
		in   string
		want pin
		err  string // "" means no error
		is   error
	}{
		{note: "object", in: `{"name":"a","count":2}`, want: pin{"a", 2}},
		{note: "white space around", in: " \n{\"name\":\"a\"}\n\t", want: pin{Name: "a"}},
		{note: "empty", in: "", is: io.EOF},
		{note: "blank", in: " \n", is: io.EOF},
		{note: "unknown member", in: `{"name":"a","extra":1}`, err: `unknown field "extra"`},
		{note: "wrong type", in: `{"count":"2"}`, err: "cannot unmarshal string"},
		{note: "second value", in: `{"name":"a"} {}`, is: ErrTrailingData},
		{note: "stray close brace", in: `{"name":"a"}}`, is: ErrTrailingData},
		{note: "stray close bracket", in: `{"name":"a"}]`, is: ErrTrailingData},
		{note: "stray comma", in: `{"name":"a"},`, is: ErrTrailingData},
		{note: "garbage", in: `{"name":"a"}x`, is: ErrTrailingData},
		{note: "syntax", in: `{"name":}`, err: "invalid character"},
		{note: "truncated", in: `{"name":"a"`, is: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var got pin
			err := Decode([]byte(tc.in), &got)
			switch {
			case tc.err == "" && tc.is == nil:
				if err != nil || got != tc.want {
					t.Fatalf("Decode = %+v, %v; want %+v", got, err, tc.want)
				}
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("Decode error %v, want %v", err, tc.is)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Decode error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestDecodeUseNumber(t *testing.T) {
	var v any
	if err := Decode([]byte(`{"n":12345678901234567890}`), &v, UseNumber()); err != nil {
		t.Fatal(err)
	}
	if n := v.(map[string]any)["n"]; n != json.Number("12345678901234567890") {
		t.Fatalf("n = %#v, want the json.Number with every digit", n)
	}
}

func TestPosition(t *testing.T) {
	data := []byte("{\n  \"café\": 1,\n\t\"b\": x\n}")
	for _, tc := range []struct {
		note      string
		off       int64
		line, col int
	}{
		{note: "start", off: 0, line: 1, col: 1},
		{note: "before a clamped negative offset", off: -5, line: 1, col: 1},
		{note: "the newline is the end of its line", off: 1, line: 1, col: 2},
		{note: "start of the second line", off: 2, line: 2, col: 1},
		{note: "after a multi-byte character", off: int64(bytes.Index(data, []byte(`":`))), line: 2, col: 8},
		{note: "a tab is one character", off: int64(bytes.IndexByte(data, 'x')), line: 3, col: 7},
		{note: "past the end", off: 1000, line: 4, col: 2},
	} {
		t.Run(tc.note, func(t *testing.T) {
			line, col := Position(data, tc.off)
			if line != tc.line || col != tc.col {
				t.Fatalf("Position(%d) = %d:%d, want %d:%d", tc.off, line, col, tc.line, tc.col)
			}
		})
	}
}

func TestErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		note      string
		in        string
		line, col int
		ok        bool
	}{
		{note: "syntax error after a multi-byte key", in: "{\"é\": ,}", line: 1, col: 7, ok: true},
		{note: "syntax error on the second line", in: "{\n  \"name\": }", line: 2, col: 11, ok: true},
		{note: "type error", in: "{\n\"count\": \"1\"}", line: 2, ok: true},
		{note: "unknown field has no position", in: `{"x":1}`},
		{note: "trailing data has no position", in: `{} {}`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			err := Decode([]byte(tc.in), new(pin))
			if err == nil {
				t.Fatal("Decode succeeded")
			}
			line, col, ok := ErrorPosition([]byte(tc.in), err)
			if ok != tc.ok || line != tc.line || (tc.col != 0 && col != tc.col) {
				t.Fatalf("ErrorPosition(%v) = %d:%d %v, want %d:%d %v", err, line, col, ok, tc.line, tc.col, tc.ok)
			}
		})
	}
}

// FuzzDecode checks Decode against encoding/json's own validator: into an
// empty interface, where no member can be unknown, Decode accepts exactly
// the inputs that are one valid JSON value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `{"a":1}}`, `[]]`, `1 2`, ``, ` "x" `, `{"a":`, `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		err := Decode(data, &v, UseNumber())
		if want := json.Valid(data); (err == nil) != want {
			t.Fatalf("Decode(%q) error %v; json.Valid says %v", data, err, want)
		}
		if err == nil {
			return
		}
		if line, col, ok := ErrorPosition(data, err); ok && (line < 1 || col < 1) {
			t.Fatalf("ErrorPosition(%q) = %d:%d", data, line, col)
		}
	})
}

// FuzzPosition checks Position against its definition: the text before
// the offset has line-1 newlines, and the last line of it col-1 characters.
func FuzzPosition(f *testing.F) {
	f.Add([]byte("a\nbé\nc"), int64(5))
	f.Add([]byte(""), int64(-1))
	f.Fuzz(func(t *testing.T, data []byte, off int64) {
		line, col := Position(data, off)
		end := max(0, min(off, int64(len(data))))
		lines := strings.Split(string(data[:end]), "\n")
		if line != len(lines) || col != utf8.RuneCountInString(lines[len(lines)-1])+1 {
			t.Fatalf("Position(%q, %d) = %d:%d", data, off, line, col)
		}
	})
}

func TestObject(t *testing.T) {
	for _, tc := range []struct {
		note   string
		in     string
		keys   string // the members fn saw, in order
		is     error
		member string // the key of a *MemberError
	}{
		{note: "members in order", in: `{"b":1,"a":[2],"c":{"a":1,"a":2}}`, keys: "b a c"},
		{note: "empty object", in: " {}\n"},
		{note: "not an object", in: `[1]`, is: ErrNotObject},
		{note: "a string", in: `"x"`, is: ErrNotObject},
		{note: "empty", in: "", is: io.EOF},
		{note: "member twice", in: `{"a":1,"b":2,"a":3}`, keys: "a b", is: ErrDuplicateMember, member: "a"},
		{note: "member twice, spelled with an escape", in: `{"a":1,"\u0061":3}`, keys: "a", is: ErrDuplicateMember, member: "a"},
		{note: "bad value", in: `{"a":1,"b":tru}`, keys: "a", member: "b"},
		{note: "truncated", in: `{"a":1,`, keys: "a", is: io.EOF},
		{note: "trailing object", in: `{"a":1} {}`, keys: "a", is: ErrTrailingData},
		{note: "stray brace", in: `{}}`, is: ErrTrailingData},
	} {
		t.Run(tc.note, func(t *testing.T) {
			var keys []string
			err := Object([]byte(tc.in), func(key string, value json.RawMessage) error {
				if !json.Valid(value) {
					t.Errorf("member %q: value %q is not JSON", key, value)
				}
				keys = append(keys, key)
				return nil
			})
			if got := strings.Join(keys, " "); got != tc.keys {
				t.Errorf("fn saw %q, want %q", got, tc.keys)
			}
			if tc.is == nil && tc.member == "" {
				if err != nil {
					t.Fatalf("Object: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Object succeeded, want an error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) && !(tc.is == io.EOF && errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("Object error %v, want %v", err, tc.is)
			}
			var me *MemberError
			if errors.As(err, &me) != (tc.member != "") || (me != nil && me.Key != tc.member) {
				t.Fatalf("Object error %v, want a member error of %q", err, tc.member)
			}
		})
	}
	t.Run("an error of fn is returned as it is", func(t *testing.T) {
		stop := errors.New("stop")
		var n int
		err := Object([]byte(`{"a":1,"b":2}`), func(string, json.RawMessage) error { n++; return stop })
		if err != stop || n != 1 {
			t.Fatalf("Object = %v after %d calls, want stop after 1", err, n)
		}
	})
}

// FuzzObject checks Object against encoding/json: it accepts exactly the
// inputs that are one valid JSON object whose members are all distinct,
// and hands fn every member once with the value encoding/json reads.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[{}]}`, `{"a":1,"a":2}`, `{"a":1}}`, `[1]`, `{"a":`, `{"\u0061":1,"a":2}`, ` {"x":"y"} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := map[string]json.RawMessage{}
		err := Object(data, func(key string, value json.RawMessage) error {
			if _, dup := got[key]; dup {
				t.Fatalf("fn saw %q twice", key)
			}
			got[key] = value
			return nil
		})
		var want map[string]json.RawMessage
		isObject := json.Valid(data) && json.Unmarshal(data, &want) == nil
		switch {
		case err == nil && !isObject:
			t.Fatalf("Object(%q) accepted what is not one JSON object", data)
		case err == nil && len(want) != len(got):
			t.Fatalf("Object(%q) saw %d members, encoding/json %d", data, len(got), len(want))
		case err != nil && isObject && !errors.Is(err, ErrDuplicateMember):
			t.Fatalf("Object(%q) refused a JSON object: %v", data, err)
		}
		if err != nil {
			return
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("member %q: fn saw %s, encoding/json reads %s", k, got[k], v)
			}
		}
	})
}
