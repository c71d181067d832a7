package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unusedArgTest is a test file that plain compilation accepts and stock
// `opa check --strict` refuses: the helper's argument x is never used.
const unusedArgTest = `package mine_test

helper(x) := true

test_helper if helper(1)
`

// TestPolicyCheckStrict: check refuses in strict mode, its default, what
// stock `opa check --strict` refuses, test files included; --strict=false
// compiles as the gate does.
func TestPolicyCheckStrict(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		src      string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "unused function argument in a test file", file: "mine_test.rego", src: unusedArgTest,
			wantCode: exitFailure, wantErr: "mine_test.rego:3: rego_compile_error: unused argument x"},
		{name: "unused import in a test file", file: "imports_test.rego",
			src:      "package mine_test\n\nimport data.gated\n\ntest_ok if true\n",
			wantCode: exitFailure, wantErr: "imports_test.rego:3: rego_compile_error: import data.gated unused"},
		{name: "unused function argument, not strict", file: "mine_test.rego", src: unusedArgTest,
			args: []string{"--strict=false"}, wantCode: 0},
		{name: "sound test file", file: "sound_test.rego",
			src:      "package mine_test\n\nimport data.gated\n\ntest_ok if gated.default_persona == \"reviewer\"\n",
			wantCode: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, err := runGated(t, append([]string{"policy", "check", dir}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tc.wantCode, err, out)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want it to name %q", err, tc.wantErr)
			}
			if tc.wantCode == 0 && !strings.Contains(out, "ok: revision") {
				t.Fatalf("no ok line:\n%s", out)
			}
		})
	}
}
