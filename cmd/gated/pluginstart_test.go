package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated/plugins"
)

// exitAsPluginEnv makes the test binary a Go plugin that fails before its
// handshake: it writes two lines on stderr and exits with status 3.
const exitAsPluginEnv = "GATED_TEST_EXIT_AS_PLUGIN"

func exitAsPlugin() {
	fmt.Fprintln(os.Stderr, "reading the reviewer's settings")
	fmt.Fprintln(os.Stderr, "reviewer.toml: no such file or directory")
	os.Exit(3)
}

// pythonWithoutGated is a Python reviewer plugin run by an interpreter
// that cannot import gated, as a plugin whose shebang names a Python
// outside the SDK's virtual environment: -I -S keep every site directory
// off its path.
func pythonWithoutGated(t *testing.T, dir string) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	path := filepath.Join(dir, "reviewer.py")
	writeExe(t, path, "#!"+python+" -IS\nfrom gated.plugin import serve\n")
	return path
}

// A plugin that exits before its handshake is reported with how it exited
// and the last lines it wrote on stderr, by gated plugins test and by
// serve, which does not start; never with go-plugin's guesses about the
// architecture or the mode of the file.
func TestPluginThatExitsBeforeItsHandshake(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	py := pythonWithoutGated(t, dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	goName := strings.TrimSuffix(filepath.Base(self), filepath.Ext(self))
	tests := []struct {
		note, path, name string
		env              []string
		want             string
	}{
		{
			note: "python", path: py, name: "reviewer",
			want: `starting plugin "reviewer": no handshake: the plugin exited with status 1 before writing one; its last lines on stderr:\n` +
				`  Traceback \(most recent call last\):\n` +
				`(?:  .*\n)*` +
				`  ModuleNotFoundError: No module named 'gated'\n`,
		},
		{
			note: "go", path: self, name: goName, env: []string{exitAsPluginEnv + "=1"},
			want: `starting plugin "` + goName + `": no handshake: the plugin exited with status 3 before writing one; its last lines on stderr:\n` +
				`  reading the reviewer's settings\n  reviewer.toml: no such file or directory\n`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.note+"/plugins test", func(t *testing.T) {
			args := []string{"plugins", "test", tc.path}
			for _, e := range tc.env {
				args = append(args, "--env", e)
			}
			code, out, err := runGated(t, args...)
			if code != exitFailure {
				t.Fatalf("exit %d (%v), want %d", code, err, exitFailure)
			}
			wantOutput(t, out, `FAIL\s+handshake\s+`+tc.want, `\n0 of 1 checks passed\n`)
			noGuesses(t, out)
		})
		t.Run(tc.note+"/serve", func(t *testing.T) {
			sum, err := plugins.FileSHA256(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			env := ""
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				env += fmt.Sprintf("    env: {%s: %q}\n", k, v)
			}
			config := writeFile(t, t.TempDir(), "gated.yaml", fmt.Sprintf(
				"default_plugin: %s\nplugins:\n  - name: %s\n    path: %s\n    sha256: %s\n%s", tc.name, tc.name, tc.path, sum, env))
			code, _, err := runGated(t, "serve", "--config", config, "--log-level", "error", "--log-format", "json",
				"--data-dir", filepath.Join(t.TempDir(), "data"), "--nats-listen", "127.0.0.1:0")
			if code != exitFailure || err == nil {
				t.Fatalf("serve: exit %d, err %v; want %d", code, err, exitFailure)
			}
			wantOutput(t, err.Error()+"\n", "^"+tc.want+"$")
			noGuesses(t, err.Error())
		})
	}
}

// noGuesses fails when out holds go-plugin's notes on a missing
// handshake, which describe the sealed copy gated runs, not the plugin.
func noGuesses(t *testing.T, out string) {
	t.Helper()
	for _, guess := range []string{"compiled for this architecture", "Mode:", "Unrecognized remote plugin message"} {
		if strings.Contains(out, guess) {
			t.Errorf("output holds go-plugin's note %q:\n%s", guess, out)
		}
	}
}
