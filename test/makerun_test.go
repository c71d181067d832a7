package test

import (
	"os/exec"
	"strings"
	"testing"
)

// make run says what it is about to do before it hands over to the go
// command, whose first build on a machine compiles for minutes before
// gated prints anything. The go command here is false: what make run
// printed before it is all there is.
func TestMakeRunSpeaksBeforeItBuilds(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not on PATH")
	}
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-s", "-C", "..", "run", "GO=false")
	out, err := cmd.Output()
	if err == nil {
		t.Fatal("make run with GO=false succeeded: it did not run the go command")
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if !strings.HasPrefix(first, "make run: building gated") || !strings.Contains(first, "takes a few minutes") {
		t.Errorf("make run printed %q before the build, want a line that says it builds and that the first build takes minutes", out)
	}
}
