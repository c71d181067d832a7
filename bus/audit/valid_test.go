package audit

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases are JSON texts and near misses on every branch of the
// grammar; they also seed FuzzValidJSON.
var validCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e3`, `-12.25E-2`, `1e+9`, `true`, `false`, `null`,
	` {"a" : [1, 2.0, {"b": null}] , "c":"\u00e9\n\"x\"\\\/\b\f\r\t"} `,
	`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`,
	`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `--1`, `0x10`, `1.5.2`, `NaN`, `Infinity`,
	`tru`, `nul`, `falsey`, `truex`, `[true false]`,
	`"abc`, `"a\qb"`, `"\u12"`, `"\u12G4"`, "\"a\x01b\"", "\"\xff\xfe\"", "\"\x7f\"",
	`{"a":1}{}`, `{"a":1} x`, `[`, `]`, `{`, `}`, `[[]`, `[]]`, `{"a":[}`, ``, ` `, "\t\r\n",
	`[1 2]`, `{"a":1,"a":2}`, `"\ud800"`,
}

// TestValidJSONAgreesWithEncodingJSON: the one-pass check gives
// encoding/json's answer on every seed, the limit of nesting included.
func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	cases := append([]string{}, validCases...)
	for _, depth := range []int{maxNesting - 1, maxNesting, maxNesting + 1} {
		cases = append(cases,
			strings.Repeat("[", depth)+strings.Repeat("]", depth),
			strings.Repeat(`{"a":`, depth)+"1"+strings.Repeat("}", depth))
	}
	for _, c := range cases {
		note := c
		if len(note) > 40 {
			note = note[:40] + "..."
		}
		t.Run(note, func(t *testing.T) {
			if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
				t.Fatalf("validJSON(%q) = %v, encoding/json says %v", note, got, want)
			}
		})
	}
}

// FuzzValidJSON holds validJSON to encoding/json's Valid.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	for _, body := range canonicalBodies(f) {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON = %v, encoding/json says %v, on %q", got, want, data)
		}
	})
}

// BenchmarkValidJSON checks a policy.decided record's data, the largest
// record of a trail, with both checks.
func BenchmarkValidJSON(b *testing.B) {
	proposal := `{"v":1,"id":"p-1234","tenant":"acme","kind":"action","action":"host_restart_service","class":"write",` +
		`"target":{"device_id":7,"service":"nginx","tags":["production","eu-west"]},"reason":"` + strings.Repeat("the service is wedged; ", 20) + `",` +
		`"blast_radius":"single_device","operator":{"id":"op-1","roles":["oncall"]},"requested_by":{"agent":"fixer","session":"s-9"},"created_at":"2026-11-01T09:00:00Z"}`
	data := []byte(`{"action":"host_restart_service","denies":[],"review":{"required":true,"persona":"reviewer","quorum":1,"why":"write"},` +
		`"input":{"proposal":` + proposal + `,"persona":"reviewer","now":"2026-11-01T09:00:00Z","history":[]},"sop":"sop-7","denied_tools":["run_shell"]}`)
	if !json.Valid(data) || !validJSON(data) {
		b.Fatal("the sample is not valid JSON")
	}
	for _, check := range []struct {
		note string
		fn   func([]byte) bool
	}{{"one-pass", validJSON}, {"encoding-json", json.Valid}} {
		b.Run(check.note, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if !check.fn(data) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
