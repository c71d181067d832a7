package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// cases are JSON texts and near misses on every branch of the grammar;
// they also seed the fuzz targets.
var cases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e3`, `-12.25E-2`, `1e+9`, `true`, `false`, `null`,
	` {"a" : [1, 2.0, {"b": null}] , "c":"\u00e9\n\"x\"\\\/\b\f\r\t"} `,
	`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`,
	`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `--1`, `0x10`, `1.5.2`, `NaN`, `Infinity`,
	`tru`, `nul`, `falsey`, `truex`, `[true false]`,
	`"abc`, `"a\qb"`, `"\u12"`, `"\u12G4"`, "\"a\x01b\"", "\"\xff\xfe\"", "\"\x7f\"",
	`{"a":1}{}`, `{"a":1} x`, `[`, `]`, `{`, `}`, `[[]`, `[]]`, `{"a":[}`, ``, ` `, "\t\r\n",
	`[1 2]`, `{"a":1,"a":2}`, `"\ud800"`, `"\`, `"\u`, `["a\"]`, `{"k\u0041":[1,{"x":"]"}]}`,
}

// TestValidAgreesWithEncodingJSON: Valid gives encoding/json's answer on
// every case, the limit of nesting included.
func TestValidAgreesWithEncodingJSON(t *testing.T) {
	all := append([]string{}, cases...)
	for _, depth := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		all = append(all,
			strings.Repeat("[", depth)+strings.Repeat("]", depth),
			strings.Repeat(`{"a":`, depth)+"1"+strings.Repeat("}", depth))
	}
	for _, c := range all {
		note := c
		if len(note) > 40 {
			note = note[:40] + "…"
		}
		t.Run(note, func(t *testing.T) {
			if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
				t.Fatalf("Valid(%q) = %v, encoding/json says %v", note, got, want)
			}
		})
	}
}

// TestEnds: each reader stops where its value ends, and says -1 where
// data[i:] does not start with one.
func TestEnds(t *testing.T) {
	for _, tc := range []struct {
		note string
		read func([]byte, int) int
		data string
		i    int
		want int
	}{
		{"value stops after a scalar", Value, `12,3`, 0, 2},
		{"value reads nested containers", Value, `[{"a":[1]},2] x`, 0, 13},
		{"value at an offset", Value, `x: true}`, 3, 7},
		{"value past the end", Value, `1`, 1, -1},
		{"value at a negative offset", Value, `1`, -1, -1},
		{"value with white space before it", Value, ` 1`, 0, -1},
		{"string with escapes", String, `"a\"\u00e9" `, 0, 11},
		{"string not at a quote", String, `a"`, 0, -1},
		{"string unterminated", String, `"abc`, 0, -1},
		{"string with a control byte", String, "\"a\nb\"", 0, -1},
		{"number stops at what follows", Number, `-1.5e+3]`, 0, 7},
		{"number leading zero", Number, `01`, 0, 1},
		{"space", Space, " \t\r\nx", 0, 4},
		{"space at the end", Space, "  ", 1, 2},
		{"skip string over escapes", SkipString, `"a\"b",`, 0, 6},
		{"skip string that does not close", SkipString, `"ab\"`, 0, -1},
		{"skip value of a string that does not close", SkipValue, `["ab`, 0, 4},
		{"plain string", PlainString, `"a b~",`, 0, 6},
		{"plain string with an escape", PlainString, `"a\nb"`, 0, -1},
		{"plain string outside ASCII", PlainString, "\"\xc3\xa9\"", 0, -1},
		{"plain string not at a quote", PlainString, `x"a"`, 0, -1},
		{"skip value of a container", SkipValue, `{"a":"}"} ,`, 0, 9},
		{"skip value of a scalar", SkipValue, `123 ,`, 0, 3},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if got := tc.read([]byte(tc.data), tc.i); got != tc.want {
				t.Fatalf("read(%q, %d) = %d, want %d", tc.data, tc.i, got, tc.want)
			}
		})
	}
}

// TestMembersAndItems: the splitters hand out each member and item as
// written, and refuse what their callers cannot compare as bytes.
func TestMembersAndItems(t *testing.T) {
	var got []string
	ok := Members([]byte(` { "a" : [1, "]"] , "b":{"c":null} } `), func(k, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	})
	if want := []string{`a=[1, "]"]`, `b={"c":null}`}; !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Members = %q, %v; want %q, true", got, ok, want)
	}
	for _, doc := range []string{`{"\u0061":1}`, "{\"\xc3\xa9\":1}", `[1]`, `{"a":1} {}`} {
		if Members([]byte(doc), func(k, v []byte) bool { return true }) {
			t.Errorf("Members(%q) is ok; want refused", doc)
		}
	}
	if Members([]byte(`{"a":1,"b":2}`), func(k, v []byte) bool { return string(k) != "b" }) {
		t.Error("Members went on after fn returned false")
	}
	got = nil
	ok = Items([]byte(`[ 1 , "a,b" ,{"x":[]}]`), func(v []byte) bool {
		got = append(got, string(v))
		return true
	})
	if want := []string{`1`, `"a,b"`, `{"x":[]}`}; !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Items = %q, %v; want %q, true", got, ok, want)
	}
	if !Items([]byte(` [ ] `), func([]byte) bool { return false }) || Items([]byte(`{}`), func([]byte) bool { return true }) {
		t.Error("Items: an empty array is ok, an object is not")
	}
}

// maxOffsets bounds the inputs read at every offset, which costs the
// square of their length.
const maxOffsets = 1 << 8

func seed(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
}

// FuzzValue holds the checking readers to encoding/json at every offset:
// what Value, String and Number accept is valid JSON, and a valid
// document is read to its end.
func FuzzValue(f *testing.F) {
	seed(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid = %v, encoding/json says %v, on %q", got, want, data)
		}
		if len(data) > maxOffsets {
			return
		}
		for i := 0; i <= len(data); i++ {
			rest := data[i:]
			whole := i < len(data) && Space(data, i) == i && json.Valid(rest)
			for _, r := range []struct {
				name string
				read func([]byte, int) int
				at   func(byte) bool
			}{
				{"Value", Value, func(byte) bool { return true }},
				{"String", String, func(c byte) bool { return c == '"' }},
				{"Number", Number, func(c byte) bool { return c == '-' || c >= '0' && c <= '9' }},
			} {
				end := r.read(data, i)
				if end >= 0 && (end <= i || end > len(data) || !json.Valid(data[i:end])) {
					t.Fatalf("%s(%q, %d) = %d: not a valid value", r.name, data, i, end)
				}
				if whole && r.at(data[i]) && (end < 0 || Space(data, end) != len(data)) {
					t.Fatalf("%s(%q, %d) = %d, encoding/json takes %q whole", r.name, data, i, end, rest)
				}
			}
		}
	})
}

// FuzzSkip holds the assuming readers to the checking ones on valid
// JSON: they end where Value ends, and Members and Items hand out a
// document that encoding/json reads as the original.
func FuzzSkip(f *testing.F) {
	seed(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for i := 0; i < len(data) && i < maxOffsets; i++ {
			end := Value(data, i)
			if end < 0 {
				// Not valid: the skipping readers only must not panic.
				SkipValue(data, i)
				if data[i] == '"' {
					SkipString(data, i)
				}
				continue
			}
			if got := SkipValue(data[:end], i); got != end {
				t.Fatalf("SkipValue(%q, %d) = %d, Value says %d", data[:end], i, got, end)
			}
			if p := PlainString(data, i); p >= 0 && p != end {
				t.Fatalf("PlainString(%q, %d) = %d, Value says %d", data, i, p, end)
			}
			if data[i] == '"' {
				if got := SkipString(data[:end], i); got != end {
					t.Fatalf("SkipString(%q, %d) = %d, Value says %d", data[:end], i, got, end)
				}
			}
		}
		valid := json.Valid(data)
		var rebuilt bytes.Buffer
		rebuilt.WriteByte('{')
		ok := Members(data, func(k, v []byte) bool {
			if rebuilt.Len() > 1 {
				rebuilt.WriteByte(',')
			}
			rebuilt.WriteString(`"` + string(k) + `":`)
			rebuilt.Write(v)
			return true
		})
		rebuilt.WriteByte('}')
		if ok && valid {
			same(t, data, rebuilt.Bytes())
		}
		rebuilt.Reset()
		rebuilt.WriteByte('[')
		ok = Items(data, func(v []byte) bool {
			if rebuilt.Len() > 1 {
				rebuilt.WriteByte(',')
			}
			rebuilt.Write(v)
			return true
		})
		rebuilt.WriteByte(']')
		if ok && valid {
			same(t, data, rebuilt.Bytes())
		}
	})
}

// same fails unless encoding/json reads a and b as the same value.
func same(t *testing.T, a, b []byte) {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("reading %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil || !reflect.DeepEqual(va, vb) {
		t.Fatalf("%q split and joined is %q (%v), another value", a, b, err)
	}
}

func BenchmarkValid(b *testing.B) {
	data := []byte(`{"id":"p-1","tenant":"acme","action":{"tool":"shell","args":{"cmd":"ls -la \"/tmp\"","n":[1,2.5,-3e2,true,false,null]}},"note":"caf\u00e9"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if !Valid(data) {
			b.Fatal("not valid")
		}
	}
}
