package server

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/gated/gated/personas"
)

func TestPersonasWithoutPlugin(t *testing.T) {
	examples, _, err := personas.Load(filepath.Join("..", "..", "examples", "personas"))
	if err != nil {
		t.Fatal(err)
	}
	builtin, err := personas.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note       string
		reg        *personas.Registry
		configured []string
		want       []unroutedPersona
	}{
		{note: "examples with the bundled sop", reg: examples, configured: []string{"sop"},
			want: []unroutedPersona{{Persona: "incident", Plugin: "incident"}}},
		{note: "examples with the incident plugin", reg: examples, configured: []string{"sop", "incident"}},
		{note: "built-ins with the bundled sop", reg: builtin, configured: []string{"sop", "llm"}},
		{note: "built-ins with llm alone", reg: builtin, configured: []string{"llm"},
			want: []unroutedPersona{{"dba", "sop"}, {"reviewer", "sop"}, {"run-reviewer", "sop"}}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			got := personasWithoutPlugin(tc.reg.Snapshot(), tc.configured)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
