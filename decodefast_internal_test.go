package gated

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// fastSeeds are proposals in the forms the fast reader reads and the
// forms it leaves to encoding/json, each a seed of FuzzDecodeFast.
var fastSeeds = []string{
	`{"v":1,"id":"p1","tenant":"acme","action":"host_restart_service","class":"read"}`,
	`{"v": 1, "id": "p1", "tenant": "acme", "kind": "action", "action": "x", "class": "write", "blast_radius": "cluster", "target": {"n": -0.5e+3, "s": "a\"b\u00e9", "l": [true, false, null, {}, []], "o": {"k": 0}}, "flags": {"skip_review": false, "user_confirmed": true}}`,
	"{\n\t\"v\" : 1 ,\r\n \"id\":\"p1\",\"reason\":\"line\\nbreak \\ud83d\\ude00\",\"operator\":{\"id\":\"u\",\"roles\":[\"sre\",\"admin\"]},\"requested_by\":{\"agent\":\"a\",\"session\":\"s\"}}\n",
	`{"v":null,"id":null,"target":null,"operator":null,"requested_by":null,"flags":null,"criteria":null,"run":null,"created_at":null}`,
	`{"criteria":[],"operator":{"roles":[]},"created_at":"2026-01-02T15:04:05.123+01:00"}`,
	`{"created_at":"2026-01-02T15:04:05Z"}`,
	`{"created_at":"2026-01-02 15:04:05Z"}`,
	`{"created_at":"2026-01-02T15:04:05\u005a"}`,
	`{"v":-0}`, `{"v":01}`, `{"v":1.0}`, `{"v":1e0}`, `{"v":99999999999999999999}`, `{"v":"1"}`,
	`{"id":"a","id":"b"}`, `{"ID":"a"}`, `{"i\u0064":"a"}`, `{"target":{"a":1,"a":2}}`, `{"target":{"\u0061":1}}`,
	`{"target":[1]}`, `{"target":{"x":01}}`, `{"target":{"x":1.}}`, `{"target":{"x":-}}`, `{"target":{"x":tru}}`,
	`{"flags":{"skip_review":"true"}}`, `{"flags":{"Skip_review":true}}`, `{"operator":{"roles":[null]}}`,
	`{"operator":{"roles":"sre"}}`, `{"criteria":[{}]}`, `{"run":{}}`, `{"extra":1}`,
	`{"v":1} {}`, `{"v":1}]`, `{"v":1`, `{"v":1,}`, `{,"v":1}`, `{"v"1}`, `[]`, `null`, `"x"`, ``, `   `,
	`{"labels":["secret","egress"]}`, `{"labels":[]}`, `{"labels":null}`, `{"labels":"secret"}`, `{"labels":[1]}`,
	`{"labels":["a"],"labels":["b"]}`, `{"Labels":["a"]}`,
	"{\"reason\":\"tab\there\"}", `{"reason":"bad \q escape"}`, `{"reason":"\u12"}`,
}

// FuzzDecodeFast holds the fast reading to encoding/json's: whenever
// decodeFast reads a proposal, decodeStrict reads the same one.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	for _, name := range testProposals(f) {
		f.Add(name.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // DecodeProposal refuses it before either reading
		}
		fast, ok := decodeFast(data)
		if !ok {
			return
		}
		strict, err := decodeStrict(data)
		if err != nil {
			t.Fatalf("the fast reading accepts what encoding/json refuses (%v):\n%s", err, data)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("the readings differ:\nfast   %#v\nstrict %#v\ndata %s", fast, strict, data)
		}
	})
}

// TestDecodeFastReadsTheCommonForms: every valid proposal of the test
// data that is an action is read by the fast reader, written compactly
// or indented as Python and TypeScript clients write it, and reads as
// encoding/json reads it; a seed the fast reader leaves to encoding/json
// is one it must leave.
func TestDecodeFastReadsTheCommonForms(t *testing.T) {
	for _, tp := range testProposals(t) {
		if !strings.HasPrefix(tp.name, "valid-") || strings.Contains(tp.name, "run") {
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, tp.data); err != nil {
			t.Fatal(err)
		}
		var spaced bytes.Buffer // Python's json.dumps: ", " and ": "
		if err := json.Indent(&spaced, compact.Bytes(), "", ""); err != nil {
			t.Fatal(err)
		}
		for _, form := range [][]byte{tp.data, compact.Bytes(), bytes.ReplaceAll(spaced.Bytes(), []byte("\n"), []byte(" "))} {
			fast, ok := decodeFast(form)
			if !ok {
				t.Errorf("%s: the fast reader leaves %s to encoding/json", tp.name, form)
				continue
			}
			strict, err := decodeStrict(form)
			if err != nil || !reflect.DeepEqual(fast, strict) {
				t.Errorf("%s: fast %#v, strict %#v (%v)", tp.name, fast, strict, err)
			}
		}
	}
	for _, s := range []string{`{"v":01}`, `{"id":"a","id":"b"}`, `{"ID":"a"}`, `{"target":{"a":1,"a":2}}`, `{"v":1} {}`, `{"criteria":[{}]}`, `{"run":{}}`} {
		if _, ok := decodeFast([]byte(s)); ok {
			t.Errorf("the fast reader read %s", s)
		}
	}
}

type testProposal struct {
	name string
	data []byte
}

func testProposals(t testing.TB) []testProposal {
	t.Helper()
	dir := filepath.Join("engine", "testdata", "proposals")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []testProposal
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, testProposal{e.Name(), data})
	}
	return out
}
