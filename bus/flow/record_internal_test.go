package flow

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeRecord: a record decodes only into one that encodes back to
// what decodes the same, and nothing panics.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"recent":[]}`,
		`{"v":1,"recent":[{"proposal_id":"p1","action":"read_secret","labels":["secret"],"at":"2026-01-01T12:00:00Z"}]}`,
		`{"v":2,"recent":[]}`, `{"v":1,"recent":[{"proposal_id":"p.1","action":"a","labels":[],"at":"2026-01-01T12:00:00Z"}]}`,
		`{"v":1,"recent":[{"proposal_id":"p1","action":"a","labels":["Secret"],"at":"2026-01-01T12:00:00Z"}]}`,
		`{"v":1,"recent":[],"x":1}`, `{"v":1} {}`, `null`, ``, `{"v":1,"recent":[{"proposal_id":"p1","action":"a","labels":[]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("a decoded record does not decode again: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normal(back), normal(r)) {
			t.Fatalf("the record changed on the way back:\n%+v\n%+v", r, back)
		}
	})
}

// normal drops what the wire does not tell apart: times' locations.
func normal(r record) record {
	for i := range r.Recent {
		r.Recent[i].At = r.Recent[i].At.UTC()
	}
	return r
}
