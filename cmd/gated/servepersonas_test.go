package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// serve refuses a --personas that names no directory, as personas list
// does, before anything starts: it would otherwise serve the built-in
// personas alone, without a word.
func TestServeRefusesAMissingPersonasDir(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "reviewer.md", "---\nname: reviewer\n---\n")
	for _, path := range []string{filepath.Join(dir, "typo"), file} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data := filepath.Join(dir, "data")
			// A serve that is not refused runs until its context ends.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			err := run(ctx, []string{"serve", "--personas", path, "--data-dir", data, "--nats-listen", "127.0.0.1:0",
				"--log-level", "error", "--log-format", "json"})
			if code := exitCode(err); code != exitUsage {
				t.Fatalf("serve --personas %s: exit %d (%v), want %d", path, code, err, exitUsage)
			}
			wantUsageError(t, err, "--personas "+path+": not a directory of persona files")
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the refused serve made its data directory (%v)", err)
			}
		})
	}
}
