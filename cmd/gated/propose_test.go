package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewWaitSources checks that --review-wait reaches serve's
// validation from the command line, the environment and a config file,
// and that a refused value stops serve before it starts anything.
func TestReviewWaitSources(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gated.yaml")
	if err := os.WriteFile(cfg, []byte("review_wait: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		note string
		env  string
		args []string
	}{
		{note: "flag", args: []string{"--review-wait", "0s"}},
		{note: "environment", env: "-1s"},
		{note: "config file", args: []string{"--config", cfg}},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GATED_REVIEW_WAIT", tc.env)
			}
			code, _, err := runGated(t, append([]string{"serve", "--data-dir", t.TempDir()}, tc.args...)...)
			if code != exitUsage || err == nil || !strings.Contains(err.Error(), "--review-wait") {
				t.Fatalf("exit %d, err %v; want exit %d about --review-wait", code, err, exitUsage)
			}
		})
	}
}

func TestProposeUsageErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(`{"tenant":"acme","id":"p1","action":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"propose", "-f", file, "--wait", "0s"},
		{"propose", "-f", file, "--via-service=maybe"},
		{"propose", "--via-service"},
		{"propose", "-f", file, "--watch", "--via-service"},
		{"propose", "-f", file, "--json"},
		{"propose", "-f", file, "--watch=maybe"},
	} {
		if code, _, err := runGated(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d (%v), want %d", args, code, err, exitUsage)
		}
	}
}
