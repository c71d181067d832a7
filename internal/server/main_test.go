package server

import (
	"fmt"
	"os"
	"testing"
)

// TestMain serves a bundled reviewer when the server under test launches
// this binary as one, as gated's own binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 3 && os.Args[1] == "plugin" && os.Args[2] == "run" {
		if err := ServeBundledPlugin(os.Args[3], "test"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
