package audit_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
)

// memberByMember is how a text line read an event's data before it read
// it through the event's type: each member of the text line's list the
// data has, a string as its text and any other value as its JSON.
func memberByMember(ev gated.AuditEvent) string {
	var b strings.Builder
	var data map[string]json.RawMessage
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &data) == nil {
		for _, k := range []string{"outcome", "stage", "action", "operator", "persona", "plugin", "tool", "revision", "error", "reason"} {
			raw, ok := data[k]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				s = string(raw)
			}
			fmt.Fprintf(&b, " %s=%s", k, strconv.Quote(s))
		}
	}
	return b.String()
}

// withHead is data, an event's own, under the head's members it does not
// name itself, as the engine writes an event of a proposal.
func withHead(t *testing.T, data []byte) []byte {
	t.Helper()
	var own map[string]json.RawMessage
	if err := json.Unmarshal(data, &own); err != nil {
		t.Fatal(err)
	}
	out := "{"
	for _, m := range bustest.AuditHeadSample {
		if _, named := own[m[0]]; !named {
			out += `"` + m[0] + `":` + m[1] + `,`
		}
	}
	if len(own) == 0 {
		return []byte(strings.TrimSuffix(out, ",") + "}")
	}
	return append([]byte(out), data[1:]...)
}

// TestTextLineReadsThroughTheTypes: the text line, which reads each
// event's data through its declared type, shows what reading the data
// member by member shows, for every event: its sample, with and without
// the head, and the sample written through its type with each string
// member empty in turn (a member the type leaves out when empty, or
// writes as "").
func TestTextLineReadsThroughTheTypes(t *testing.T) {
	cases := 0
	check := func(name, what string, data []byte) {
		t.Helper()
		cases++
		ev := gated.AuditEvent{V: gated.SchemaVersion, Event: name, Tenant: "acme", ProposalID: "p1", Data: data}
		if got, want := audit.TextMembers(ev), memberByMember(ev); got != want {
			t.Errorf("%s (%s) %s:\n got%s\nwant%s", name, what, data, got, want)
		}
	}
	for _, name := range gated.AuditEventNames() {
		sample := []byte(bustest.AuditEventSamples[name])
		check(name, "sample", sample)
		check(name, "sample under the head", withHead(t, sample))
		d, _ := gated.NewAuditEventData(name)
		if err := json.Unmarshal(sample, d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v := reflect.ValueOf(d).Elem()
		for _, f := range stringFields(v) {
			old := f.String()
			f.SetString("")
			data := gated.MarshalAuditData(d)
			check(name, "typed, one member empty", data)
			check(name, "typed, one member empty, under the head", withHead(t, data))
			f.SetString(old)
		}
	}
	check(gated.EventVerdict, "not the type's JSON", []byte(`{"outcome":7,"reason":{"a":1},"tool":"x"}`))
	check("no.such_event", "an event gated does not declare", []byte(`{"persona":"p","revision":3}`))
	if cases < 150 {
		t.Fatalf("only %d cases", cases)
	}
}

// stringFields are the settable string fields of the struct v, those of
// embedded structs included.
func stringFields(v reflect.Value) []reflect.Value {
	if v.Kind() != reflect.Struct {
		return nil
	}
	var out []reflect.Value
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case !v.Type().Field(i).IsExported():
		case f.Kind() == reflect.String:
			out = append(out, f)
		case v.Type().Field(i).Anonymous:
			out = append(out, stringFields(f)...)
		}
	}
	return out
}
