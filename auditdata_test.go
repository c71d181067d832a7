package gated

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryEventHasADataType: every event name package gated declares (a
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
		t.Errorf("auditEventData names %d events, package gated declares %d", len(AuditEventNames()), len(declared))
	}
}
