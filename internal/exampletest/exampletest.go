// Package exampletest runs an example program's main from its own test
// binary, so a test can call the command with arguments and read its exit
// code and output as a user's shell would.
package exampletest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"
)

// runMainEnv, when set, makes the test binary run the program's main
// instead of its tests.
const runMainEnv = "GATED_EXAMPLE_MAIN"

// Main is the body of an example's TestMain: it runs main when the binary
// was started by Run, and the tests otherwise.
func Main(m *testing.M, main func()) {
	if os.Getenv(runMainEnv) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

// Run starts the test binary as the program with args and returns its exit
// code and everything it printed, standard output and error together.
func Run(t *testing.T, args ...string) (code int, out string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, buf.String()
}
