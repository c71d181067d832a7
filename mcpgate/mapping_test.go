package mcpgate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/strictjson"
)

func TestMappingRead(t *testing.T) {
	whole := Mapping{Tool: "restart", ReasonArgument: "_reason"}
	mapped := Mapping{Tool: "restart", ReasonArgument: "_reason",
		Target:      map[string]string{"host": "/host", "first": "/hosts/0", "odd": "/a~1b~0c"},
		TargetFixed: map[string]any{"tags": []any{"production"}}}
	fixedOnly := Mapping{Tool: "restart", ReasonArgument: "_reason", TargetFixed: map[string]any{"tags": "prod"}}
	for _, tc := range []struct {
		note    string
		m       Mapping
		args    string
		target  string // JSON of the target
		reason  string
		forward string
		err     string
	}{
		{note: "no arguments", m: whole, args: "", target: `{}`, forward: `{}`},
		{note: "null arguments", m: whole, args: "null", target: `{}`, forward: `{}`},
		{note: "whole arguments, reason stripped", m: whole, args: `{"host":"web-1","_reason":"leak"}`,
			target: `{"host":"web-1"}`, reason: "leak", forward: `{"host":"web-1"}`},
		{note: "big numbers keep their digits", m: whole, args: `{"n":12345678901234567890}`,
			target: `{"n":12345678901234567890}`, forward: `{"n":12345678901234567890}`},
		{note: "pointers and fixed members", m: mapped, args: `{"host":"web-1","hosts":["a","b"],"a/b~c":1,"other":true}`,
			target: `{"first":"a","host":"web-1","odd":1,"tags":["production"]}`, forward: `{"a/b~c":1,"host":"web-1","hosts":["a","b"],"other":true}`},
		{note: "fixed members are not forwarded", m: fixedOnly, args: `{"host":"web-1"}`,
			target: `{"host":"web-1","tags":"prod"}`, forward: `{"host":"web-1"}`},
		{note: "a pointer that names nothing", m: mapped, args: `{"hosts":["a"],"a/b~c":1}`, err: "target member host of restart (/host): no such argument"},
		{note: "an index out of range", m: mapped, args: `{"host":"h","hosts":[],"a/b~c":1}`, err: "target member first"},
		{note: "not an object", m: whole, args: `[1,2]`, err: "not a JSON object"},
		{note: "not JSON", m: whole, args: `{"host":`, err: "cannot become a proposal"},
		{note: "a key twice", m: whole, args: `{"host":"web-1","host":"db-1"}`, err: `duplicate key "host"`},
		{note: "a key twice, nested", m: whole, args: `{"x":{"a":1,"a":2}}`, err: `duplicate key "a"`},
		{note: "a reason that is not a string", m: whole, args: `{"_reason":["x"]}`, err: "must be a string"},
		{note: "too deep", m: whole, args: strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70), err: "nested too deeply"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			c, err := tc.m.Read(json.RawMessage(tc.args))
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrBadArguments) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want ErrBadArguments mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(c.Target); string(got) != tc.target {
				t.Errorf("target %s, want %s", got, tc.target)
			}
			if c.Reason != tc.reason {
				t.Errorf("reason %q, want %q", c.Reason, tc.reason)
			}
			if string(c.Forward) != tc.forward {
				t.Errorf("forwarded %s, want %s", c.Forward, tc.forward)
			}
		})
	}
}

func TestMappingOf(t *testing.T) {
	yes := true
	tool := &mcp.Tool{Name: "db.drop", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}}
	t.Run("defaults", func(t *testing.T) {
		m := MappingOf(tool, nil)
		if m.Action != "db_drop" || m.Class != gated.ClassDestructive || m.ClassFrom != "annotations" ||
			m.BlastRadius != gated.BlastSingleDevice || m.ReasonArgument != DefaultReasonArgument || m.Target != nil {
			t.Errorf("%+v", m)
		}
	})
	t.Run("catalog", func(t *testing.T) {
		c, err := DecodeCatalog([]byte("reason_argument: why\nblast_radius: cluster\ntools:\n  db.drop: {action: db_drop_table, class: write, reason_argument: because}\n"))
		if err != nil {
			t.Fatal(err)
		}
		m := MappingOf(tool, c)
		if m.Action != "db_drop_table" || m.Class != gated.ClassWrite || m.ClassFrom != "catalog" ||
			m.BlastRadius != gated.BlastCluster || m.ReasonArgument != "because" {
			t.Errorf("%+v", m)
		}
		other := MappingOf(&mcp.Tool{Name: "other"}, c)
		if other.ReasonArgument != "why" || other.BlastRadius != gated.BlastCluster {
			t.Errorf("catalog defaults not applied: %+v", other)
		}
	})
}

// fuzzSchema is a closed input schema FuzzMappingRead holds half its
// inputs to.
var fuzzSchema = func() *jsonschema.Resolved {
	r, err := resolveSchema(&mcp.Tool{Name: "t", InputSchema: map[string]any{"type": "object", "additionalProperties": false,
		"properties": map[string]any{"host": map[string]any{"type": "string"}, "a": map[string]any{}, "o": map[string]any{"type": "object"}}}})
	if err != nil {
		panic(err)
	}
	return r
}()

func FuzzMappingRead(f *testing.F) {
	for _, seed := range []struct{ args, ptr string }{
		{`{"host":"web-1","_reason":"x"}`, "/host"},
		{`{"a":[1,{"b":2}]}`, "/a/1/b"},
		{`{"a/b":1}`, "/a~1b"},
		{`[1]`, ""},
		{`{"a":1,"a":2}`, "/a"},
		{`null`, "/x"},
		{`{"_reason":5}`, ""},
		{`{"host":"a","ho\u017ft":"b"}`, "/host"},
		{`{"o":{"K":1,"\u212a":2}}`, "/o"},
	} {
		f.Add([]byte(seed.args), seed.ptr)
	}
	f.Fuzz(func(t *testing.T, args []byte, ptr string) {
		m := Mapping{Tool: "t", ReasonArgument: "_reason"}
		if len(args)%2 == 0 {
			// Half the inputs are held to a closed schema as well.
			m.schema = fuzzSchema
		}
		if _, err := parsePointer(ptr); err == nil {
			m.Target = map[string]string{"x": ptr}
		}
		c, err := m.Read(args)
		if err != nil {
			if !errors.Is(err, ErrBadArguments) {
				t.Fatalf("error %v does not wrap ErrBadArguments", err)
			}
			return
		}
		// What is forwarded is one JSON object without the reason, and it
		// reads back to the same object: the server acts on what gated
		// decided on.
		var fwd map[string]any
		if err := json.Unmarshal(c.Forward, &fwd); err != nil || fwd == nil {
			t.Fatalf("forwarded %q: %v", c.Forward, err)
		}
		if _, ok := fwd["_reason"]; ok {
			t.Fatalf("the reason was forwarded: %s", c.Forward)
		}
		again, err := m.Read(c.Forward)
		if err != nil {
			t.Fatalf("the forwarded arguments do not read back: %v", err)
		}
		if string(again.Forward) != string(c.Forward) {
			t.Fatalf("forwarding is not stable: %s then %s", c.Forward, again.Forward)
		}
		if _, err := json.Marshal(c.Target); err != nil {
			t.Fatalf("the target does not encode: %v", err)
		}
		// The proposal's arguments are what is forwarded, byte for byte,
		// and no two of their member names fold together.
		if enc, err := json.Marshal(c.Arguments); err != nil || (len(c.Arguments) > 0 && string(enc) != string(c.Forward)) {
			t.Fatalf("the proposal's arguments encode as %s (%v); forwarded %s", enc, err, c.Forward)
		}
		if err := strictjson.CheckFolded(c.Arguments); err != nil {
			t.Fatalf("read arguments whose names fold together: %v", err)
		}
	})
}

func TestDecodeLine(t *testing.T) {
	for _, tc := range []struct {
		note, line string
		code       int64
		id         any
	}{
		{note: "a request", line: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{note: "a notification", line: `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{note: "not JSON", line: `{nope`, code: jsonrpc.CodeParseError},
		{note: "empty", line: ``, code: jsonrpc.CodeParseError},
		{note: "a batch", line: `[]`, code: jsonrpc.CodeInvalidRequest},
		{note: "a string", line: `"x"`, code: jsonrpc.CodeInvalidRequest},
		{note: "a key twice", line: `{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, code: jsonrpc.CodeInvalidRequest},
		{note: "version 1.0 keeps its id", line: `{"jsonrpc":"1.0","id":"r7","method":"tools/list"}`, code: jsonrpc.CodeInvalidRequest, id: "r7"},
		{note: "an object id is not echoed", line: `{"jsonrpc":"2.0","id":{},"method":"tools/list"}`, code: jsonrpc.CodeInvalidRequest},
		{note: "no method and no id", line: `{"jsonrpc":"2.0"}`, code: jsonrpc.CodeInvalidRequest},
	} {
		t.Run(tc.note, func(t *testing.T) {
			msg, lerr := DecodeLine([]byte(tc.line))
			if tc.code == 0 {
				if lerr != nil || msg == nil {
					t.Fatalf("got %v", lerr)
				}
				return
			}
			if lerr == nil || lerr.Code != tc.code {
				t.Fatalf("got %v, want code %d", lerr, tc.code)
			}
			var resp struct {
				JSONRPC string               `json:"jsonrpc"`
				ID      json.RawMessage      `json:"id"`
				Error   struct{ Code int64 } `json:"error"`
			}
			if err := json.Unmarshal(lerr.Response(), &resp); err != nil {
				t.Fatalf("response %s: %v", lerr.Response(), err)
			}
			wantID := "null"
			if tc.id != nil {
				b, _ := json.Marshal(tc.id)
				wantID = string(b)
			}
			if resp.JSONRPC != "2.0" || resp.Error.Code != tc.code || string(resp.ID) != wantID {
				t.Errorf("response %s, want code %d and id %s", lerr.Response(), tc.code, wantID)
			}
		})
	}
}

func FuzzDecodeLine(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{nope`, `[]`, `{"jsonrpc":"1.0","id":"x"}`, `{"id":1.5e300}`, `{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		msg, lerr := DecodeLine(line)
		if (msg == nil) == (lerr == nil) {
			t.Fatalf("message %v and error %v", msg, lerr)
		}
		if lerr != nil {
			var resp map[string]any
			if err := json.Unmarshal(lerr.Response(), &resp); err != nil {
				t.Fatalf("error response %q is not JSON: %v", lerr.Response(), err)
			}
			if lerr.Code != jsonrpc.CodeParseError && lerr.Code != jsonrpc.CodeInvalidRequest {
				t.Fatalf("code %d", lerr.Code)
			}
			return
		}
		if _, err := jsonrpc.EncodeMessage(msg); err != nil {
			t.Fatalf("an accepted message does not encode: %v", err)
		}
	})
}
