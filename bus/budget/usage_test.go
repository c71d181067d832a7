package budget_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gated/gated/bus/budget"
)

// TestRateJSON: a rate is written as {"max", "interval"} and read back
// with a budgets file's checks; what a budgets file refuses is refused.
func TestRateJSON(t *testing.T) {
	cases := []struct {
		note string
		data string
		want budget.Rate
		bad  bool
	}{
		{note: "a rate", data: `{"max":60,"interval":"1m"}`, want: budget.Rate{Max: 60, Interval: time.Minute}},
		{note: "unlimited", data: `{"max":0,"interval":"1m"}`, want: budget.Rate{Interval: time.Minute}},
		{note: "the longest interval", data: `{"max":1,"interval":"24h"}`, want: budget.Rate{Max: 1, Interval: 24 * time.Hour}},
		{note: "a negative max", data: `{"max":-1,"interval":"1m"}`, bad: true},
		{note: "a zero interval", data: `{"max":1,"interval":"0s"}`, bad: true},
		{note: "a negative interval", data: `{"max":1,"interval":"-1m"}`, bad: true},
		{note: "an interval past a day", data: `{"max":1,"interval":"25h"}`, bad: true},
		{note: "part of a second", data: `{"max":1,"interval":"1500ms"}`, bad: true},
		{note: "no interval", data: `{"max":1}`, bad: true},
		{note: "no max", data: `{"interval":"1m"}`, bad: true},
		{note: "an unknown field", data: `{"max":1,"interval":"1m","burst":2}`, bad: true},
		{note: "not an object", data: `"60/1m"`, bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			var r budget.Rate
			err := json.Unmarshal([]byte(tc.data), &r)
			if tc.bad {
				if !errors.Is(err, budget.ErrInvalidConfig) {
					t.Fatalf("%s read as %+v, %v; want an ErrInvalidConfig", tc.data, r, err)
				}
				return
			}
			if err != nil || r != tc.want {
				t.Fatalf("%s read as %+v, %v; want %+v", tc.data, r, err, tc.want)
			}
			out, err := json.Marshal(r)
			if err != nil || string(out) != tc.data {
				t.Fatalf("%+v written as %s, %v; want %s", r, out, err, tc.data)
			}
		})
	}
}

// FuzzRateJSON: whatever bytes come, a rate either reads within a budgets
// file's bounds and writes back to what reads the same, or is refused
// with ErrInvalidConfig.
func FuzzRateJSON(f *testing.F) {
	for _, s := range []string{`{"max":60,"interval":"1m"}`, `{"max":0,"interval":"24h"}`, `{"max":-1,"interval":"1s"}`, `{}`, `null`, `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r budget.Rate
		if err := json.Unmarshal(data, &r); err != nil {
			var syntax *json.SyntaxError
			if !errors.Is(err, budget.ErrInvalidConfig) && !errors.As(err, &syntax) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if r.Max < 0 || r.Interval < time.Second || r.Interval > budget.MaxInterval || r.Interval%time.Second != 0 {
			t.Fatalf("%q read as %+v", data, r)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var again budget.Rate
		if err := json.Unmarshal(out, &again); err != nil || again != r {
			t.Fatalf("%+v written as %s read back as %+v, %v", r, out, again, err)
		}
	})
}
