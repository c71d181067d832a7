package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/llm"
	"github.com/gated/gated/plugins/sop"
	"github.com/spf13/cobra"
)

// The test binary doubles as gated when a host launches it as the bundled
// reviewer (`plugin run sop`): plugins.Bundled pins the running
// executable, which under `go test` is this binary.
//
// With runAsGatedEnv set it runs as gated with its arguments, so a test
// can start a gated process (gated mcp serving stdio) without a prebuilt
// binary.
func TestMain(m *testing.M) {
	if os.Getenv(runAsGatedEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[1:])
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "gated:", err)
		}
		os.Exit(exitCode(err))
	}
	if os.Getenv(exitAsPluginEnv) == "1" {
		exitAsPlugin()
	}
	if os.Getenv(runAsBareProxyEnv) == "1" {
		os.Exit(runBareMCPProxy(os.Args[1:]))
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "run" {
		if err := run(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(exitCode(err))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// exitCode is the status main would exit with after err.
func exitCode(err error) int {
	err = fromServer(err)
	if err == nil {
		return 0
	}
	var ex *exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	return exitFailure
}

// runGated runs gated with args in this process and returns the exit
// status main would give, what it printed on stdout, and its error.
// Tests that use it must not run in parallel: it swaps os.Stdout.
func runGated(t *testing.T, args ...string) (int, string, error) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = out
	runErr := run(t.Context(), args)
	os.Stdout = saved
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return exitCode(runErr), string(data), runErr
}

// wantOutput fails unless every pattern matches out.
func wantOutput(t *testing.T, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("output does not match %q:\n%s", p, out)
		}
	}
}

func writeExe(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// pluginSetup is a config file pinning one plugin (acme) and naming a
// plugin directory (pd) holding two (alpha, beta), not yet locked.
type pluginSetup struct {
	dir, config, pd string
}

func newPluginSetup(t *testing.T) pluginSetup {
	t.Helper()
	clearGatedEnv(t)
	dir := t.TempDir()
	s := pluginSetup{dir: dir, pd: filepath.Join(dir, "pd")}
	writeExe(t, filepath.Join(dir, "bin", "acme"), "acme v1")
	writeExe(t, filepath.Join(s.pd, "alpha"), "alpha v1")
	writeExe(t, filepath.Join(s.pd, "beta"), "beta v1")
	s.config = writeFile(t, dir, "gated.yaml", `plugins_dir: pd
plugins:
  - name: acme
    path: bin/acme
    sha256: `+digest.SHA256([]byte("acme v1"))+"\n")
	return s
}

func TestPluginsLockListVerify(t *testing.T) {
	s := newPluginSetup(t)
	cfg := "--config=" + s.config

	code, out, err := runGated(t, "plugins", "list", cfg)
	if code != 0 {
		t.Fatalf("list before locking: exit %d: %v", code, err)
	}
	wantOutput(t, out,
		`(?m)^sop\s+bundled\s+ok\s+[0-9a-f]{12}\s`,
		`(?m)^acme\s+config\s+ok\s+`+digest.SHA256([]byte("acme v1"))[:12]+`\s+`+regexp.QuoteMeta(filepath.Join(s.dir, "bin", "acme"))+`$`,
		`(?m)^alpha\s+dir\s+unpinned\s+-\s`,
		"run `gated plugins lock "+regexp.QuoteMeta(s.pd)+"`")

	code, _, err = runGated(t, "plugins", "verify", cfg)
	if code != exitFailure || !errors.Is(err, plugins.ErrNoLock) {
		t.Fatalf("verify without a lock: exit %d, err %v; want 1 and ErrNoLock", code, err)
	}

	code, out, err = runGated(t, "plugins", "lock", cfg)
	if code != 0 {
		t.Fatalf("lock: exit %d: %v", code, err)
	}
	wantOutput(t, out,
		`(?m)^pinned\s+alpha\s+`+digest.SHA256([]byte("alpha v1"))+`\s+new$`,
		`(?m)^pinned\s+beta\s+`,
		`wrote .*gated-plugins.lock: plugins pinned: 2`)

	code, out, err = runGated(t, "plugins", "verify", cfg)
	if code != 0 {
		t.Fatalf("verify after locking: exit %d: %v\n%s", code, err, out)
	}
	wantOutput(t, out, `(?m)^ok\s+acme\s+config\s`, `(?m)^ok\s+alpha\s+dir\s`, `(?m)^ok\s+beta\s+dir\s`)

	// Tamper: a binary replaced, one added, one removed, and the config's
	// plugin replaced too.
	writeExe(t, filepath.Join(s.pd, "alpha"), "alpha v2")
	writeExe(t, filepath.Join(s.pd, "gamma"), "gamma v1")
	if err := os.Remove(filepath.Join(s.pd, "beta")); err != nil {
		t.Fatal(err)
	}
	writeExe(t, filepath.Join(s.dir, "bin", "acme"), "acme v2")

	code, out, err = runGated(t, "plugins", "verify", cfg)
	if code != exitFailure {
		t.Fatalf("verify after tampering: exit %d, want 1: %v\n%s", code, err, out)
	}
	if !strings.Contains(err.Error(), "4 of 4 plugins do not match") {
		t.Errorf("error %q does not count the mismatches", err)
	}
	wantOutput(t, out,
		`(?m)^modified\s+acme\s+config\s.*pinned `+digest.SHA256([]byte("acme v1"))+`, file has `+digest.SHA256([]byte("acme v2"))+`$`,
		`(?m)^modified\s+alpha\s+dir\s.*pinned `+digest.SHA256([]byte("alpha v1"))+`, file has `+digest.SHA256([]byte("alpha v2"))+`$`,
		`(?m)^missing\s+beta\s+dir\s`,
		`(?m)^unpinned\s+gamma\s+dir\s.*file has `+digest.SHA256([]byte("gamma v1")))

	code, out, err = runGated(t, "plugins", "list", cfg, "--format", "json")
	if code != 0 {
		t.Fatalf("list --format json: exit %d: %v", code, err)
	}
	var rows []struct {
		Name   string            `json:"name"`
		Source string            `json:"source"`
		Status plugins.PinStatus `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list --format json: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Name] = r.Source + " " + string(r.Status)
	}
	want := map[string]string{
		"sop": "bundled ok", "acme": "config modified", "alpha": "dir modified",
		"beta": "dir missing", "gamma": "dir unpinned",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("list json = %v, want %v", got, want)
	}

	code, out, err = runGated(t, "plugins", "lock", s.pd)
	if code != 0 {
		t.Fatalf("re-lock: exit %d: %v", code, err)
	}
	wantOutput(t, out,
		`(?m)^pinned\s+alpha\s+`+digest.SHA256([]byte("alpha v2"))+`\s+changed, was `+digest.SHA256([]byte("alpha v1"))[:12]+`$`,
		`(?m)^pinned\s+gamma\s+\S+\s+new$`,
		`(?m)^dropped\s+beta\s`)
}

func TestPluginsDirPrecedence(t *testing.T) {
	s := newPluginSetup(t)
	other := filepath.Join(s.dir, "other")
	writeExe(t, filepath.Join(other, "omega"), "omega")
	for _, tc := range []struct {
		note string
		env  string
		args []string
		want string
	}{
		{note: "config file", want: "alpha"},
		{note: "environment over config file", env: other, want: "omega"},
		{note: "flag over config file", args: []string{"--plugins-dir", other}, want: "omega"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GATED_PLUGINS_DIR", tc.env)
			}
			code, out, err := runGated(t, append([]string{"plugins", "list", "--config", s.config}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %v", code, err)
			}
			wantOutput(t, out, `(?m)^`+tc.want+`\s+dir\s`)
		})
	}
}

func TestPluginsUsage(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		note string
		args []string
		code int
		want string
	}{
		{note: "lock needs a directory", args: []string{"plugins", "lock"}, code: exitUsage, want: "DIR or --plugins-dir"},
		{note: "lock takes one directory", args: []string{"plugins", "lock", dir, dir}, code: exitUsage, want: "accepts at most 1 arg"},
		{note: "bad format", args: []string{"plugins", "list", "--format", "yaml"}, code: exitUsage, want: "want text or json"},
		{note: "missing config file", args: []string{"plugins", "list", "--config", filepath.Join(dir, "nope.yaml")}, code: exitUsage, want: "nope.yaml"},
		{note: "missing plugin directory", args: []string{"plugins", "verify", filepath.Join(dir, "nope")}, code: exitFailure, want: "reading plugin directory"},
		{note: "unpinned names in directory", args: []string{"plugins", "lock", writeBadDir(t)}, code: exitFailure, want: "plugin name must be"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			code, _, err := runGated(t, tc.args...)
			if code != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, err %v; want exit %d and %q", code, err, tc.code, tc.want)
			}
		})
	}
	t.Run("nothing to verify", func(t *testing.T) {
		code, out, err := runGated(t, "plugins", "verify")
		if code != 0 {
			t.Fatalf("exit %d: %v", code, err)
		}
		wantOutput(t, out, "no plugins to verify")
	})
}

// writeBadDir returns a plugin directory holding an executable whose name
// is not a plugin name.
func writeBadDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeExe(t, filepath.Join(dir, "Bad.Name"), "x")
	return dir
}

func TestPluginSpecs(t *testing.T) {
	s := newPluginSetup(t)
	if _, err := plugins.WriteLock(s.pd); err != nil {
		t.Fatal(err)
	}
	probe := &cobra.Command{Use: "probe"}
	probe.Flags().String("config", s.config, "")
	probe.Flags().String("plugins-dir", "", "")
	cfg, err := server.LoadConfigFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// withFile adds what the config file names, as serve does.
	withFile := func(o server.Config) server.Config {
		o.ConfigFile, o.ConfigPlugins = cfg.Path, cfg.Plugins
		return o
	}

	specs, def, err := server.PluginSpecs(ctx, withFile(server.Config{PluginsDir: s.pd, DefaultPlugin: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range specs {
		names = append(names, sp.Name)
	}
	if got := strings.Join(names, ","); got != "sop,acme,alpha,beta" || def != "alpha" {
		t.Fatalf("specs %s, default %q", got, def)
	}
	if specs[0].Args[len(specs[0].Args)-1] != sop.Name {
		t.Errorf("bundled spec = %+v", specs[0])
	}
	// A binary changed after locking keeps the digest from the lock, so
	// the host refuses it at launch.
	writeExe(t, filepath.Join(s.pd, "alpha"), "alpha v2")
	specs, _, err = server.PluginSpecs(ctx, withFile(server.Config{PluginsDir: s.pd, DefaultPlugin: sop.Name}))
	if err != nil {
		t.Fatal(err)
	}
	if specs[2].SHA256 != digest.SHA256([]byte("alpha v1")) {
		t.Errorf("alpha pinned to %s, want the lock's digest", specs[2].SHA256)
	}

	for _, tc := range []struct {
		note string
		o    server.Config
		prep func(t *testing.T)
		code int
		is   error
		want string
	}{
		{note: "unknown default", o: server.Config{DefaultPlugin: "nope"}, code: exitUsage, want: `--default-plugin "nope" is not a configured plugin (have: acme, sop)`},
		{note: "empty default", o: server.Config{DefaultPlugin: ""}, code: exitUsage, want: "is not a configured plugin"},
		{
			note: "same name in config and directory",
			o:    server.Config{PluginsDir: s.pd, DefaultPlugin: sop.Name},
			prep: func(t *testing.T) {
				writeExe(t, filepath.Join(s.pd, "acme"), "another acme")
				if _, err := plugins.WriteLock(s.pd); err != nil {
					t.Fatal(err)
				}
			},
			code: exitUsage, want: `plugin "acme" is configured twice: in config file ` + s.config + ` and in plugin directory ` + s.pd,
		},
		{
			note: "unpinned executable",
			o:    server.Config{PluginsDir: s.pd, DefaultPlugin: sop.Name},
			prep: func(t *testing.T) { writeExe(t, filepath.Join(s.pd, "zeta"), "z") },
			code: exitFailure, is: plugins.ErrUnpinned, want: "zeta",
		},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if tc.prep != nil {
				tc.prep(t)
			}
			_, _, err := server.PluginSpecs(ctx, withFile(tc.o))
			if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (exit %d); want exit %d and %q", err, exitCode(err), tc.code, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want %v", err, tc.is)
			}
		})
	}
}

// serve runs what the lock pins and nothing else: a directory binary
// swapped after locking stops serve before it opens NATS.
func TestServeRefusesModifiedDirPlugin(t *testing.T) {
	s := newPluginSetup(t)
	if err := os.Remove(filepath.Join(s.dir, "bin", "acme")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.pd, "beta")); err != nil {
		t.Fatal(err)
	}
	if _, err := plugins.WriteLock(s.pd); err != nil {
		t.Fatal(err)
	}
	writeExe(t, filepath.Join(s.pd, "alpha"), "swapped")
	code, _, err := runGated(t, "serve", "--plugins-dir", s.pd, "--log-level", "error", "--log-format", "json",
		"--data-dir", filepath.Join(s.dir, "data"), "--nats-listen", "127.0.0.1:0")
	if code != exitFailure || !errors.Is(err, plugins.ErrChecksum) {
		t.Fatalf("serve: exit %d, err %v; want 1 and ErrChecksum", code, err)
	}
	if !strings.Contains(err.Error(), `"alpha"`) {
		t.Errorf("error %q does not name the plugin", err)
	}

	code, _, err = runGated(t, "serve", "--config", s.config, "--default-plugin", "nope", "--log-level", "error",
		"--log-format", "json", "--data-dir", filepath.Join(s.dir, "data"), "--nats-listen", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(err.Error(), `--default-plugin "nope"`) {
		t.Fatalf("serve with an unknown default plugin: exit %d, err %v; want 2", code, err)
	}
}

// The bundled llm reviewer runs as many reviews at once as
// --llm-max-concurrency says, not the host's small default: its reviews
// wait on a provider, not on this machine.
func TestLLMSpecTakesItsConcurrency(t *testing.T) {
	specs, _, err := server.PluginSpecs(t.Context(), server.Config{DefaultPlugin: llm.Name, LLMMaxConcurrency: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[1].Name != llm.Name || specs[1].MaxConcurrency != 2048 {
		t.Fatalf("specs = %+v", specs)
	}
	if specs[0].MaxConcurrency != 0 {
		t.Errorf("sop keeps its own limit, got %d", specs[0].MaxConcurrency)
	}
}

// `gated plugins test` on a wrapper script whose child holds the
// wrapper's output open and never completes the handshake fails the
// handshake check at the start timeout, naming it, instead of waiting for
// the child; the child is ended with the wrapper's process group.
func TestPluginsTestWrapperThatNeverHandshakes(t *testing.T) {
	bustest.SkipShort(t)
	clearGatedEnv(t)
	dir := t.TempDir()
	natural := filepath.Join(dir, "natural")
	wrapper := filepath.Join(dir, "wrapper")
	writeExe(t, wrapper, "#!/bin/sh\n( sleep 40; echo done > '"+natural+"' ) &\nwait\n")
	code, out, err := runGated(t, "plugins", "test", wrapper)
	if _, serr := os.Stat(natural); serr == nil {
		t.Fatal("plugins test returned only once the wrapper's child had finished on its own")
	}
	if code != exitFailure {
		t.Fatalf("exit %d (%v), want %d", code, err, exitFailure)
	}
	wantOutput(t, out, `FAIL\s+handshake\s+starting plugin "wrapper": no answer within its start timeout of 10s`)
}
