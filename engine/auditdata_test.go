package engine

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/strictjson"
)

// TestEveryEventHasADataType: every event name the engine declares (a
// constant Event...) has its data type in auditEventData, so that a new
// event cannot be recorded without one, and every type it names decodes
// the JSON of its own zero value.
func TestEveryEventHasADataType(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	declared := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					declared[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
			return true
		})
	}
	if len(declared) < 20 {
		t.Fatalf("found only %d event names: %v", len(declared), declared)
	}
	for c, name := range declared {
		d, ok := NewAuditEventData(name)
		if !ok {
			t.Errorf("%s (%q) has no data type in auditEventData", c, name)
			continue
		}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := json.Unmarshal(raw, d); err != nil {
			t.Errorf("%s: its type does not read its own JSON %s: %v", name, raw, err)
		}
	}
	if len(AuditEventNames()) != len(declared) {
		t.Errorf("auditEventData names %d events, the engine declares %d", len(AuditEventNames()), len(declared))
	}
}

// TestWritersDataIsTheDeclaredType: what the engine's own writers record
// decodes strictly (no member unknown) into the declared type.
func TestWritersDataIsTheDeclaredType(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		data any
		into any
	}{
		{EventPolicyDecided, policyFailedData{Error: "boom", ShadowRevision: "r2"}, new(PolicyDecidedData)},
		{EventPolicyDecided, policyDecidedCases()[0], new(PolicyDecidedData)},
		{EventPolicyRechecked, recheckedData{policyDecidedData: policyDecidedCases()[0], Changed: []string{"x"}}, new(PolicyRecheckedData)},
		{EventReceived, receivedData{Bytes: 1, SHA256: "ab", Subject: "s"}, new(ReceivedData)},
		{EventOperatorAwaited, map[string]any{"deadline": now.Format(time.RFC3339Nano), "reason": "r", "rule": "x"}, new(OperatorAwaitedData)},
	} {
		raw := mustJSON(tc.data)
		if err := strictjson.Decode(raw, tc.into); err != nil {
			t.Errorf("%s: %s does not decode into %T: %v", tc.name, raw, tc.into, err)
		}
		want, _ := NewAuditEventData(tc.name)
		if got, want := typeName(tc.into), typeName(want); got != want {
			t.Errorf("%s: the test decodes into %s, the declared type is %s", tc.name, got, want)
		}
	}
}

func typeName(v any) string {
	return strings.TrimPrefix(strings.TrimPrefix(fmtType(v), "*engine."), "engine.")
}

func fmtType(v any) string { return reflect.TypeOf(v).String() }
