package main

import (
	"strings"
	"testing"

	"github.com/gated/gated/internal/exampletest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

func TestHelpExitsZero(t *testing.T) {
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
			code, out := exampletest.Run(t, tc.args...)
			if code != tc.exit || !strings.Contains(out, tc.say) {
				t.Errorf("fleet %v: exit %d, want %d saying %q\n%s", tc.args, code, tc.exit, tc.say, out)
			}
		})
	}
}
