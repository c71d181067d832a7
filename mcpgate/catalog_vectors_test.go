package mcpgate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// catalogVectors is test/vectors/catalogs.json: catalogs every reader of
// the format must read alike (the TypeScript client's integrations read
// the same file).
type catalogVectors struct {
	Catalogs []struct {
		Note     string `json:"note"`
		Data     string `json:"data"`
		Error    string `json:"error"`
		Mappings []struct {
			Tool           string   `json:"tool"`
			Action         string   `json:"action"`
			Class          string   `json:"class"`
			BlastRadius    string   `json:"blast_radius"`
			ReasonArgument string   `json:"reason_argument"`
			Reviewer       string   `json:"reviewer"`
			Labels         []string `json:"labels"`
			Calls          []struct {
				Arguments json.RawMessage `json:"arguments"`
				Target    map[string]any  `json:"target"`
				Reason    string          `json:"reason"`
				Forward   map[string]any  `json:"forward"`
				Error     string          `json:"error"`
			} `json:"calls"`
		} `json:"mappings"`
	} `json:"catalogs"`
}

func TestCatalogVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "test", "vectors", "catalogs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs catalogVectors
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs.Catalogs) == 0 {
		t.Fatal("no catalogs in the vectors")
	}
	for _, v := range vs.Catalogs {
		t.Run(v.Note, func(t *testing.T) {
			c, err := DecodeCatalog([]byte(v.Data))
			if v.Error != "" {
				if err == nil || !errors.Is(err, ErrInvalidCatalog) || !strings.Contains(err.Error(), v.Error) {
					t.Fatalf("got error %v, want ErrInvalidCatalog containing %q", err, v.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			for _, want := range v.Mappings {
				m := MappingOf(&mcp.Tool{Name: want.Tool}, c)
				got := [5]string{m.Action, string(m.Class), string(m.BlastRadius), m.ReasonArgument, m.Reviewer}
				exp := [5]string{want.Action, want.Class, want.BlastRadius, want.ReasonArgument, want.Reviewer}
				if got != exp {
					t.Errorf("tool %q maps to %q, want %q", want.Tool, got, exp)
				}
				if len(m.Labels) != 0 || len(want.Labels) != 0 {
					if !reflect.DeepEqual(m.Labels, want.Labels) {
						t.Errorf("tool %q has labels %q, want %q", want.Tool, m.Labels, want.Labels)
					}
				}
				for _, call := range want.Calls {
					r, err := m.Read(call.Arguments)
					if call.Error != "" {
						if err == nil || !errors.Is(err, ErrBadArguments) || !strings.Contains(err.Error(), call.Error) {
							t.Errorf("tool %q, arguments %s: got error %v, want ErrBadArguments naming %q", want.Tool, call.Arguments, err, call.Error)
						}
						continue
					}
					if err != nil {
						t.Errorf("tool %q, arguments %s: %v", want.Tool, call.Arguments, err)
						continue
					}
					var fwd map[string]any
					if err := json.Unmarshal(r.Forward, &fwd); err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(asJSON(t, r.Target), asJSON(t, call.Target)) || r.Reason != call.Reason || !reflect.DeepEqual(fwd, call.Forward) {
						t.Errorf("tool %q, arguments %s: got target %v, reason %q, forward %s; want %v, %q, %v",
							want.Tool, call.Arguments, r.Target, r.Reason, r.Forward, call.Target, call.Reason, call.Forward)
					}
				}
			}
		})
	}
}

// asJSON is v as encoding/json reads it back, so that values read from
// YAML (a catalog's fixed members) compare with the vectors' JSON.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
