package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// With GATED_EXAMPLE_MAIN set the test binary runs main instead of the
// tests, so a test can run the command with arguments and read its exit
// code as a user's shell would.
func TestMain(m *testing.M) {
	if os.Getenv("GATED_EXAMPLE_MAIN") != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestHelpExitsZero(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note string
		args []string
		exit int
		say  string
	}{
		{note: "-h", args: []string{"-h"}, exit: 0, say: "Usage of fleet:"},
		{note: "--help", args: []string{"--help"}, exit: 0, say: "-nats-url"},
		{note: "an unknown flag", args: []string{"--no-such-flag"}, exit: 1, say: "flag provided but not defined: -no-such-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			cmd := exec.Command(exe, tc.args...)
			cmd.Env = append(os.Environ(), "GATED_EXAMPLE_MAIN=1")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exit || !strings.Contains(out.String(), tc.say) {
				t.Errorf("fleet %v: exit %d, want %d saying %q\n%s", tc.args, code, tc.exit, tc.say, out.String())
			}
		})
	}
}
