package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// textBomb expands a 1 KiB scalar 10^4 times: few values, much text.
var textBomb = "a: &a " + strings.Repeat("x", 1024) + "\n" +
	"b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
	"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
	"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n" +
	"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n" +
	"f: [*e]\n"

func TestParseDataYAMLValues(t *testing.T) {
	tests := []struct {
		name, in string
		want     any
	}{
		{"timestamp stays a string", "at: 2026-12-24T00:00:00Z", map[string]any{"at": "2026-12-24T00:00:00Z"}},
		{"date stays a string", "on: 2026-12-24", map[string]any{"on": "2026-12-24"}},
		{"timestamp key", "2026-12-24: xmas", map[string]any{"2026-12-24": "xmas"}},
		{"ints", "a: 42\nb: -7\nc: 0x1F\nd: 1_000\ne: 0o17", map[string]any{
			"a": json.Number("42"), "b": json.Number("-7"), "c": json.Number("31"), "d": json.Number("1000"), "e": json.Number("15"),
		}},
		{"floats", "a: 1.5\nb: 1e3\nc: -0.25\nd: 12345678901234567890123", map[string]any{
			"a": json.Number("1.5"), "b": json.Number("1000"), "c": json.Number("-0.25"), "d": json.Number("1.2345678901234568e+22"),
		}},
		{"yaml 1.2 booleans only", "a: true\nb: False\nc: yes\nd: off", map[string]any{"a": true, "b": false, "c": "yes", "d": "off"}},
		{"nulls", "a: ~\nb: null\nc:", map[string]any{"a": nil, "b": nil, "c": nil}},
		{"quoted stays a string", `a: "42"`, map[string]any{"a": "42"}},
		{"explicit string tag", "a: !!str 42", map[string]any{"a": "42"}},
		{"block string", "a: |\n  line one\n  line two\n", map[string]any{"a": "line one\nline two\n"}},
		{"empty collections", "a: {}\nb: []", map[string]any{"a": map[string]any{}, "b": []any{}}},
		{"top-level array", "- 1\n- two", []any{json.Number("1"), "two"}},
		{"aliases expand", "base: &b [1, 2]\ncopy: *b", map[string]any{
			"base": []any{json.Number("1"), json.Number("2")}, "copy": []any{json.Number("1"), json.Number("2")},
		}},
		{"merge key", "base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3", map[string]any{
			"base": map[string]any{"x": json.Number("1"), "y": json.Number("2")},
			"m":    map[string]any{"x": json.Number("1"), "y": json.Number("3")},
		}},
		{"merge sequence first wins", "a: &a {k: 1}\nb: &b {k: 2, j: 2}\nm:\n  <<: [*a, *b]", map[string]any{
			"a": map[string]any{"k": json.Number("1")},
			"b": map[string]any{"k": json.Number("2"), "j": json.Number("2")},
			"m": map[string]any{"k": json.Number("1"), "j": json.Number("2")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDataYAML([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseDataJSONValues(t *testing.T) {
	got, err := parseDataJSON([]byte(`{"a": 1, "b": 1.50, "c": [true, null, "s"], "d": {}, "e": 1e400}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": json.Number("1"), "b": json.Number("1.50"), "c": []any{true, nil, "s"}, "d": map[string]any{}, "e": json.Number("1e400"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
}

func TestParseDataAllowsMaxDepth(t *testing.T) {
	deep := strings.Repeat("[", maxDataDepth) + strings.Repeat("]", maxDataDepth)
	if _, err := parseDataJSON([]byte(deep)); err != nil {
		t.Errorf("JSON nested %d levels: %v", maxDataDepth, err)
	}
	if _, err := parseDataYAML([]byte(deep)); err != nil {
		t.Errorf("YAML nested %d levels: %v", maxDataDepth, err)
	}
}

func TestParseDataErrorsArePositioned(t *testing.T) {
	deep := strings.Repeat("[", maxDataDepth+1) + strings.Repeat("]", maxDataDepth+1)
	deepObject := strings.Repeat(`{"a": `, maxDataDepth+1) + "1" + strings.Repeat("}", maxDataDepth+1)
	tests := []struct {
		name  string
		parse func([]byte) (any, error)
		in    string
		want  string
	}{
		{"json duplicate", parseDataJSON, "{\"a\": 1,\n \"é\": 2, \"é\": 3}", `2:10: duplicate key "é" (first at line 2)`},
		{"json duplicate nested", parseDataJSON, "[{}, {\"a\": {\"b\": 1, \"b\": 1}}]", `1:21: duplicate key "b" (first at line 1)`},
		{"json bad escape", parseDataJSON, "{\"a\":\n\"\\x\"}", `2:3: invalid character 'x' in string escape code`},
		{"json too deep", parseDataJSON, deep, "1:1001: nested deeper than 1000 levels"},
		{"json object too deep", parseDataJSON, deepObject, "1:6001: nested deeper than 1000 levels"},
		{"json empty", parseDataJSON, "", "is empty"},
		{"json huge exponent", parseDataJSON, "{\n\"a\": 1e100000}", "2:6: number too large or too small for Rego"},
		{"yaml too deep", parseDataYAML, deep, "1: nested deeper than 1000 levels"},
		{"yaml duplicate in flow", parseDataYAML, "a: {x: 1, x: 2}", `1: duplicate key "x" (first at line 1)`},
		{"yaml mapping key", parseDataYAML, "? [a]\n: 1", "1: a key must be a string, not a mapping or sequence"},
		{"yaml null key", parseDataYAML, "~: 1", "1: key ~ is not a string: quote it"},
		{"yaml nan", parseDataYAML, "a:\n  - .nan", "2: .nan is not a finite number"},
		{"yaml bad float", parseDataYAML, "a: !!float abc", "1: cannot decode !!str `abc` as a !!float"},
		{"yaml merge of a scalar", parseDataYAML, "a:\n  <<: 1", "2: a merge key (<<) needs a mapping or a sequence of mappings"},
		{"yaml two merge keys", parseDataYAML, "a: &a {x: 1}\nb:\n  <<: *a\n  <<: *a", `4: duplicate key "<<" (first at line 3)`},
		{"yaml custom tag", parseDataYAML, "a: !secret x", "1: unsupported YAML tag !secret"},
		{"yaml set", parseDataYAML, "a: !!set {x}", "1: unsupported YAML tag !!set"},
		{"yaml empty", parseDataYAML, "\n\n", "is empty"},
		{"yaml alias text bomb", parseDataYAML, textBomb, "1: aliases expand to more than 8 MiB of text"},
		// yaml.v3 gives its parser's errors 0-based lines, its scanner's
		// 1-based ones.
		{"yaml parser error", parseDataYAML, "a: 1\n- b\n", "2: did not find expected key"},
		{"yaml parser error on line 1", parseDataYAML, "a: [1, }", "1: did not find expected node content"},
		{"yaml parser error in flow", parseDataYAML, "a: 1\nb: [1, 2\nc: 3\n", "2: did not find expected ',' or ']'"},
		{"yaml scanner error", parseDataYAML, "a: 1\nb: @x\n", "2: found character that cannot start any token"},
		{"yaml scanner error in block", parseDataYAML, "a: 1\nb: 2\n  c: 3\n", "3: mapping values are not allowed in this context"},
		{"yaml unknown anchor", parseDataYAML, "a: 1\nb: *nope\n", "unknown anchor 'nope' referenced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("parsed to %#v, want an error", v)
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q, want %q", err, tt.want)
			}
		})
	}
}

// checkDataValue fails unless v survives a JSON round trip unchanged and
// converts to a Rego value.
func checkDataValue(t *testing.T, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%#v): %v", v, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var back any
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	if !reflect.DeepEqual(v, back) {
		t.Fatalf("JSON round trip changed the value:\n%#v\n%#v", v, back)
	}
	if _, err := ast.InterfaceToValue(v); err != nil {
		t.Fatalf("ast.InterfaceToValue: %v", err)
	}
}

// checkDataError fails unless err is a positioned data error.
func checkDataError(t *testing.T, err error) {
	t.Helper()
	if _, ok := errors.AsType[*fileError](err); !ok {
		t.Fatalf("error %v is a %T, not a *fileError", err, err)
	}
}

var dataSeeds = []string{
	`{"gated": {"config": {"default_persona": "reviewer", "production_tags": ["production", "prod"]}}}`,
	`{"a": 1, "a": 2}`,
	`[1, 2.5, -3e7, true, null, "x\u00e9"]`,
	"gated:\n  config:\n    default_persona: operator\n    frozen_until: 2026-12-24T00:00:00Z\n    limits: {replicas: 10, ratio: 0.5}\n",
	"base: &b {x: 1}\nm:\n  <<: *b\n  y: [0x1F, 1_000, .inf, ~]\n",
	"sops:\n  - id: SOP-9\n    steps: |\n      one\n      two\n    actions: [a, 'b', \"c\"]\n",
	"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n",
	"---\n- 1\n...\n",
	"a: \xff\n",
	"a: \"\\ud800\"\n",
	"{\"\xff\": 1, \"\xfe\": 2}",
	"k: &k v\n*k : 1\n",
	"a: !!str {x: 1}\n",
	"? - a\n: 1\n",
	"a: 2001-12-14t21:59:43.10-05:00\nb: !!timestamp x\nc: !!int '0x10'\n",
	"1e100000", // found by FuzzParseDataJSON: valid JSON, out of Rego's range
}

func FuzzParseDataJSON(f *testing.F) {
	for _, s := range dataSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := parseDataJSON(raw)
		if err != nil {
			checkDataError(t, err)
			return
		}
		checkDataValue(t, v)
		// Whatever parses must be valid JSON that encoding/json reads alike,
		// duplicate keys aside.
		var std any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("parseDataJSON accepted what encoding/json refuses: %v", err)
		}
		if !reflect.DeepEqual(v, std) {
			t.Fatalf("parseDataJSON and encoding/json disagree:\n%#v\n%#v", v, std)
		}
	})
}

func FuzzParseDataYAML(f *testing.F) {
	for _, s := range dataSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := parseDataYAML(raw)
		if err != nil {
			checkDataError(t, err)
			return
		}
		checkDataValue(t, v)
	})
}
