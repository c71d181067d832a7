package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gated/gated/personas"
)

// personaFile is a persona file with the given frontmatter lines and body.
func personaFile(body string, frontmatter ...string) string {
	return "---\n" + strings.Join(frontmatter, "\n") + "\n---\n" + body + "\n"
}

func TestPersonasList(t *testing.T) {
	clearGatedEnv(t)
	t.Run("built-ins", func(t *testing.T) {
		code, out, err := runGated(t, "personas", "list")
		if code != 0 {
			t.Fatalf("exit %d: %v", code, err)
		}
		wantOutput(t, out,
			`(?m)^NAME +PLUGIN +MODEL +PERMISSION +TURNS +TIMEOUT +REQUIRED GATES +SOURCE$`,
			`(?m)^dba +sop +- +read-only +6 +- +sop_covers,no_parallel_operation,rollback_known +builtin/dba\.md$`,
			`(?m)^reviewer +sop +- +read-only +5 +- +sop_covers,no_parallel_operation,rollback_known +builtin/reviewer\.md$`)
	})

	dir := t.TempDir()
	local := writeFile(t, dir, "team/payments.md", personaFile("Review payment changes.",
		"name: payments", "model: anthropic/claude-sonnet-4-5", "permission_mode: read-only",
		"max_turns: 8", "timeout: 90s", "required_gates: [sop_covers, rollback_known]"))
	writeFile(t, dir, "team/broken.md", personaFile("Broken.", "name: broken", "max_turns: 0.5"))
	override := writeFile(t, dir, "reviewer.md", personaFile("Local reviewer.", "name: reviewer"))

	t.Run("text", func(t *testing.T) {
		code, out, err := runGated(t, "personas", "list", dir)
		if code != 0 {
			t.Fatalf("exit %d: %v", code, err)
		}
		wantOutput(t, out,
			`(?m)^payments +\(default\) +anthropic/claude-sonnet-4-5 +read-only +8 +1m30s +sop_covers,rollback_known +`+regexp.QuoteMeta(local)+`$`,
			// A file that replaces a built-in is listed with its file and
			// no plugin or permission of its own.
			`(?m)^reviewer +\(default\) +- +- +5 +- +- +`+regexp.QuoteMeta(override)+`$`,
			`(?m)^dba +sop `)
		if strings.Contains(out, "broken") {
			t.Errorf("a file that does not load is listed:\n%s", out)
		}
	})

	t.Run("json", func(t *testing.T) {
		code, out, err := runGated(t, "personas", "list", dir, "--format", "json")
		if code != 0 {
			t.Fatalf("exit %d: %v", code, err)
		}
		var doc struct {
			Dir      string                    `json:"dir"`
			Personas []personas.PersonaListing `json:"personas"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		var names []string
		for _, p := range doc.Personas {
			names = append(names, p.Name)
		}
		if doc.Dir != dir || strings.Join(names, ",") != "dba,payments,reviewer,run-reviewer" {
			t.Fatalf("dir %q personas %q, want %s and dba,payments,reviewer,run-reviewer", doc.Dir, names, dir)
		}
		p := doc.Personas[1]
		if p.Model != "anthropic/claude-sonnet-4-5" || p.Timeout != "1m30s" || p.MaxTurns != 8 || p.Origin != "file" ||
			p.Source != local || strings.Join(p.RequiredGates, ",") != "sop_covers,rollback_known" || p.Tools == nil {
			t.Errorf("payments listed as %+v", p)
		}
		if b := doc.Personas[0]; b.Origin != "builtin" || b.Source != "builtin/dba.md" || b.Timeout != "" {
			t.Errorf("dba listed as %+v", b)
		}
	})
}

func TestPersonasLint(t *testing.T) {
	clearGatedEnv(t)
	clean := t.TempDir()
	writeFile(t, clean, "ok.md", personaFile("Fine.", "name: fine", "permission_mode: read-only"))

	warned := t.TempDir()
	writeFile(t, warned, "a.md", personaFile("First.", "name: twin"))
	writeFile(t, warned, "b.md", personaFile("Second.", "colour: blue", "name: twin"))

	broken := t.TempDir()
	writeFile(t, broken, "good.md", personaFile("Good.", "name: good"))
	bad := writeFile(t, broken, "sub/bad.md", personaFile("Bad.",
		"name: bad", "model: azure/gpt-4o", "disallowed_tools: [\"[oops\"]", "max_turns: 80", "nickname: x"))

	tests := []struct {
		note string
		args []string
		code int
		want []string
		// not lists patterns the output must not match.
		not []string
	}{
		{
			note: "built-ins are clean",
			args: []string{"personas", "lint"},
			want: []string{`(?m)^ok: 3 personas load \(0 from files\), no problems$`},
		},
		{
			note: "clean directory",
			args: []string{"personas", "lint", clean},
			want: []string{`(?m)^ok: 4 personas load \(1 from files\), no problems$`},
		},
		{
			note: "warnings alone pass",
			args: []string{"personas", "lint", warned},
			want: []string{
				`(?m)^` + regexp.QuoteMeta(filepath.Join(warned, "b.md")) + `:2: warning: unknown frontmatter key "colour" ignored$`,
				`(?m)^` + regexp.QuoteMeta(filepath.Join(warned, "b.md")) + `:3: warning: persona "twin" is already defined by ` + regexp.QuoteMeta(filepath.Join(warned, "a.md")) + ` \(skipped\)$`,
				`(?m)^4 personas load \(1 from files\); 0 errors, 2 warnings$`,
			},
		},
		{
			note: "warnings fail with --strict",
			args: []string{"personas", "lint", warned, "--strict"},
			code: exitFailure,
			want: []string{`(?m)2 warnings$`},
		},
		{
			note: "errors fail with file and line",
			args: []string{"personas", "lint", broken},
			code: exitFailure,
			want: []string{
				`(?m)^` + regexp.QuoteMeta(bad) + `:3: error: model "azure/gpt-4o" names the unknown provider "azure"`,
				`(?m)^` + regexp.QuoteMeta(bad) + `:4: error: disallowed_tools\[0\] "\[oops": does not compile as a glob`,
				`(?m)^` + regexp.QuoteMeta(bad) + `:5: error: max_turns 80 must be between 1 and 50`,
				`(?m)^` + regexp.QuoteMeta(bad) + `:6: warning: unknown frontmatter key "nickname" ignored$`,
				`(?m)^4 personas load \(1 from files\); 3 errors, 1 warning$`,
			},
		},
		{
			note: "one file",
			args: []string{"personas", "lint", bad},
			code: exitFailure,
			want: []string{`(?m)^` + regexp.QuoteMeta(bad) + `:5: error: max_turns 80`, `(?m)^0 personas load \(0 from files\); 3 errors, 1 warning$`},
			not:  []string{`good`},
		},
		{
			note: "one clean file",
			args: []string{"personas", "lint", filepath.Join(clean, "ok.md")},
			want: []string{`(?m)^ok: 1 personas load \(1 from files\), no problems$`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, tc.code, out)
			}
			wantOutput(t, out, tc.want...)
			for _, p := range tc.not {
				if strings.Contains(out, p) {
					t.Errorf("output mentions %q:\n%s", p, out)
				}
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		code, out, err := runGated(t, "personas", "lint", broken, "--format", "json")
		if code != exitFailure || err == nil {
			t.Fatalf("exit %d (%v), want %d", code, err, exitFailure)
		}
		var doc personas.LintReport
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if doc.Errors != 3 || doc.Warnings != 1 || len(doc.Problems) != 4 || strings.Join(doc.Personas, ",") != "dba,good,reviewer,run-reviewer" {
			t.Fatalf("report %+v", doc)
		}
		for i, line := range []int{3, 4, 5, 6} {
			if p := doc.Problems[i]; p.File != bad || p.Line != line {
				t.Errorf("problem %d = %+v, want %s:%d", i, p, bad, line)
			}
		}
	})
}

func TestPersonasUsage(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		note string
		args []string
		code int
		want string
	}{
		{note: "list of a missing directory", args: []string{"personas", "list", filepath.Join(dir, "nope")}, code: exitUsage, want: "not a directory"},
		{note: "lint of a missing path", args: []string{"personas", "lint", filepath.Join(dir, "nope")}, code: exitUsage, want: "not a directory"},
		{note: "list takes one directory", args: []string{"personas", "list", dir, dir}, code: exitUsage, want: "accepts at most 1 arg"},
		{note: "bad list format", args: []string{"personas", "list", "--format", "yaml"}, code: exitUsage, want: "want text or json"},
		{note: "bad lint format", args: []string{"personas", "lint", "--format", "yaml"}, code: exitUsage, want: "want text or json"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			code, _, err := runGated(t, tc.args...)
			if code != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, err %v; want exit %d and %q", code, err, tc.code, tc.want)
			}
		})
	}
}

// TestRoutingByPersona shows the default policy and the built-in personas
// working together: a database action goes to the dba persona, and the
// dba persona may not review other changes.
func TestRoutingByPersona(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	proposal := func(name, action, reviewer string) string {
		return writeFile(t, dir, name+".json", `{"v":1,"id":"`+name+`","tenant":"acme","action":"`+action+`","class":"write",`+
			`"target":{"database":"orders"},"reason":"slow queries","blast_radius":"single_device",`+
			`"requested_by":{"agent":"db-agent"},"reviewer":"`+reviewer+`"}`)
	}

	code, out, err := runGated(t, "policy", "eval", "-f", proposal("db", "db_add_index", ""))
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	wantOutput(t, out, `(?m)^needs review by dba \(quorum 1\)$`, `(?m)^persona: +dba$`,
		`routed the review from persona reviewer to dba`, `(?m)^reviewer tools: +get_sop_text, get_verdict_history, get_proposal$`)

	// The agent cannot pick another reviewer for a routed action.
	code, out, err = runGated(t, "policy", "eval", "-f", proposal("db-own", "db_add_index", "reviewer"))
	if code != 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	wantOutput(t, out, `(?m)^needs review by dba`)

	// Nor send a host change to the database reviewer.
	code, out, _ = runGated(t, "policy", "eval", "-f", proposal("host", "host_restart_service", "dba"))
	if code != exitNotApproved {
		t.Fatalf("exit %d, want %d\n%s", code, exitNotApproved, out)
	}
	wantOutput(t, out, `(?m)^  deny persona_out_of_scope: persona "dba" reviews only the actions config\.persona_routes sends it`)
}
