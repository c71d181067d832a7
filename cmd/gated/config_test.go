package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/server"
	"github.com/spf13/cobra"
)

// clearGatedEnv hides the caller's GATED_* variables from a test, which
// would otherwise set flags.
func clearGatedEnv(t testing.TB) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GATED_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// wantUsageError fails the test unless err is a usage error (exit status
// 2) whose message says want.
func wantUsageError(t *testing.T, err error, want string) {
	t.Helper()
	if exitCode(err) != exitUsage {
		t.Fatalf("err = %v, want a usage error", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to say %q", err, want)
	}
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// probeValues are the flags of the probe command, as it saw them.
type probeValues struct {
	natsURL    string
	timeout    time.Duration
	maxInFlt   int
	watch      bool
	data       []string
	pluginsDir string
	cfg        *server.ConfigFile
}

// runProbe runs a small command tree wired like gated's: a persistent
// --config on the root, bindEnv on the commands, and a probe command
// with flags of the usual types. Another command owns only-other.
func runProbe(t *testing.T, args ...string) (probeValues, error) {
	t.Helper()
	var v probeValues
	root := &cobra.Command{Use: "gated", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("config", "", "")
	probe := &cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, _ []string) error {
		v.cfg = server.ConfigFileOf(cmd.Context())
		return nil
	}}
	f := probe.Flags()
	f.StringVar(&v.natsURL, "nats-url", "nats://default:4222", "")
	f.DurationVar(&v.timeout, "review-timeout", time.Minute, "")
	f.IntVar(&v.maxInFlt, "max-in-flight", 1024, "")
	f.BoolVar(&v.watch, "policy-watch", true, "")
	f.StringArrayVar(&v.data, "policy-data", nil, "")
	f.StringVar(&v.pluginsDir, "plugins-dir", "", "")
	_ = probe.MarkFlagDirname("plugins-dir")
	other := &cobra.Command{Use: "other", RunE: func(*cobra.Command, []string) error { return nil }}
	other.Flags().Int("only-other", 0, "")
	root.AddCommand(probe, other)
	for _, c := range root.Commands() {
		bindEnv(c)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return v, err
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "gated.yaml", `
nats_url: nats://file:4222
review-timeout: 90s
max_in_flight: 7
policy_watch: false
policy_data: [a.yaml, /abs/b.yaml]
plugins_dir: plugins
`)
	for _, tc := range []struct {
		note string
		env  map[string]string
		args []string
		want probeValues
	}{
		{
			note: "defaults without a file",
			want: probeValues{natsURL: "nats://default:4222", timeout: time.Minute, maxInFlt: 1024, watch: true},
		},
		{
			note: "file over defaults",
			args: []string{"--config", cfg},
			want: probeValues{natsURL: "nats://file:4222", timeout: 90 * time.Second, maxInFlt: 7, watch: false,
				data: []string{"a.yaml", "/abs/b.yaml"}, pluginsDir: filepath.Join(dir, "plugins")},
		},
		{
			note: "environment over file",
			env:  map[string]string{"GATED_NATS_URL": "nats://env:4222", "GATED_PLUGINS_DIR": "rel"},
			args: []string{"--config", cfg},
			want: probeValues{natsURL: "nats://env:4222", timeout: 90 * time.Second, maxInFlt: 7, watch: false,
				data: []string{"a.yaml", "/abs/b.yaml"}, pluginsDir: "rel"},
		},
		{
			note: "flag over environment over file",
			env:  map[string]string{"GATED_NATS_URL": "nats://env:4222", "GATED_MAX_IN_FLIGHT": "3"},
			args: []string{"--config", cfg, "--nats-url", "nats://flag:4222", "--policy-data", "c.yaml", "--policy-watch=true"},
			want: probeValues{natsURL: "nats://flag:4222", timeout: 90 * time.Second, maxInFlt: 3, watch: true,
				data: []string{"c.yaml"}, pluginsDir: filepath.Join(dir, "plugins")},
		},
		{
			note: "file named by the environment",
			env:  map[string]string{"GATED_CONFIG": cfg},
			want: probeValues{natsURL: "nats://file:4222", timeout: 90 * time.Second, maxInFlt: 7, watch: false,
				data: []string{"a.yaml", "/abs/b.yaml"}, pluginsDir: filepath.Join(dir, "plugins")},
		},
	} {
		t.Run(tc.note, func(t *testing.T) {
			clearGatedEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := runProbe(t, append([]string{"probe"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			got.cfg = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A key another command owns is checked but does not disturb this one,
// so one file serves serve, propose and plugins alike.
func TestConfigKeyOfAnotherCommand(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "only_other: 5\nnats_url: nats://file:4222\n")
	got, err := runProbe(t, "probe", "--config", good)
	if err != nil {
		t.Fatal(err)
	}
	if got.natsURL != "nats://file:4222" {
		t.Errorf("nats url = %q", got.natsURL)
	}
	bad := writeFile(t, dir, "bad.yaml", "nats_url: nats://file:4222\nonly_other: five\n")
	_, err = runProbe(t, "probe", "--config", bad)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:2: only_other:") {
		t.Fatalf("err = %v, want the bad value of another command's flag named", err)
	}
}

func TestConfigErrors(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		note string
		file string
		want string // after "FILE:"
	}{
		{note: "unknown key", file: "nats_url: x\n\nnats_urll: y\n", want: "3: nats_urll: unknown key"},
		{note: "help is no key", file: "help: true\n", want: "1: help: unknown key"},
		{note: "mapping for a value", file: "nats_url:\n  host: x\n", want: "2: nats_url: want a value or a list"},
		{note: "not a number", file: "max_in_flight: ten\n", want: `1: max_in_flight: invalid int value "ten"`},
		{note: "not a duration", file: "review_timeout: 5\n", want: `1: review_timeout: invalid duration value "5"`},
		{note: "not a bool", file: "policy_watch: maybe\n", want: `1: policy_watch: invalid bool value`},
		{note: "list for a single value", file: "nats_url: [a, b]\n", want: "1: nats_url: want a single string value, not a list"},
		{note: "null value", file: "nats_url:\n", want: "1: nats_url: no value"},
		{note: "both spellings", file: "nats_url: a\nnats-url: b\n", want: "2: nats-url: already set at line 1"},
		{note: "config in config", file: "config: other.yaml\n", want: "1: config: a config file cannot name another one"},
		{note: "not a mapping", file: "- a\n- b\n", want: "1: the config must be a mapping"},
		{note: "two documents", file: "nats_url: a\n---\nnats_url: b\n", want: "2: a config file holds one YAML document"},
		{note: "yaml syntax", file: "nats_url: [a\n", want: "2: did not find expected ',' or ']'"},
		{note: "yaml parser error on line 2", file: "policy_watch: true\nnats_url: [a, b\nmax_in_flight: 3\n", want: "2: did not find expected ',' or ']'"},
		{note: "plugins not a list", file: "plugins: {name: x}\n", want: "1: plugins: want a list"},
		{note: "plugin bad sha", file: "plugins:\n  - name: x\n    path: x\n    sha256: abc\n", want: `4: plugins[0].sha256: "abc" is not 64 lower-case hex digits`},
		{note: "plugin sha not hex", file: "plugins:\n  - name: x\n    path: x\n    sha256: " + strings.Repeat("zz", 32) + "\n", want: "4: plugins[0].sha256:"},
		{note: "plugin without sha", file: "plugins:\n  - name: x\n    path: x\n", want: "2: plugins[0]: sha256 is required"},
		{note: "plugin without path", file: "plugins:\n  - name: x\n    sha256: " + sha + "\n", want: "2: plugins[0]: path is required"},
		{note: "plugin unknown key", file: "plugins:\n  - name: x\n    path: x\n    sha: " + sha + "\n", want: "4: plugins[0].sha: unknown key"},
		{note: "plugin bad name", file: "plugins:\n  - name: X.Y\n    path: x\n    sha256: " + sha + "\n", want: `2: plugins[0].name: "X.Y"`},
		{note: "plugin named sop", file: "plugins:\n  - {name: sop, path: x, sha256: " + sha + "}\n", want: `2: plugins[0].name: "sop" is the bundled reviewer`},
		{
			note: "duplicate plugin",
			file: "plugins:\n  - {name: a, path: x, sha256: " + sha + "}\n  - {name: a, path: y, sha256: " + sha + "}\n",
			want: `3: plugins[1].name: plugin "a" is already configured at line 2`,
		},
		{note: "plugin bad env", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", env: [NOEQUALS]}\n", want: `2: plugins[0].env: "NOEQUALS": want NAME=VALUE`},
		{note: "plugin env scalar", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", env: A=1}\n", want: "2: plugins[0].env: want a mapping"},
		{note: "plugin bad timeout", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", start_timeout: 20}\n", want: `2: plugins[0].start_timeout: "20": want a positive duration`},
		{note: "plugin bad health interval", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", health_interval: 0s}\n", want: `2: plugins[0].health_interval: "0s": want a positive duration`},
		{note: "plugin bad health misses", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", health_misses: 0}\n", want: `2: plugins[0].health_misses: "0": want a whole number, 1 or more`},
		{note: "plugin negative concurrency", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", max_concurrency: -1}\n", want: "2: plugins[0].max_concurrency:"},
		{note: "plugin args not a list", file: "plugins:\n  - {name: a, path: x, sha256: " + sha + ", args: --x}\n", want: "2: plugins[0].args: want a list"},
	} {
		t.Run(tc.note, func(t *testing.T) {
			clearGatedEnv(t)
			path := writeFile(t, t.TempDir(), "gated.yaml", tc.file)
			_, err := runProbe(t, "probe", "--config", path)
			if err == nil {
				t.Fatal("a bad config was accepted")
			}
			if want := path + ":" + tc.want; !strings.Contains(err.Error(), want) {
				t.Errorf("error\n  %v\ndoes not contain\n  %s", err, want)
			}
			if code := exitCode(err); code != exitUsage {
				t.Errorf("exit code %d, want %d", code, exitUsage)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		clearGatedEnv(t)
		missing := filepath.Join(t.TempDir(), "nope.yaml")
		_, err := runProbe(t, "probe", "--config", missing)
		if err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("err = %v, want the missing file named", err)
		}
	})
}

func TestConfigPlugins(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	sha := strings.Repeat("AB", 32)
	path := writeFile(t, dir, "conf/gated.yaml", `
plugins:
  - name: acme
    path: bin/acme
    sha256: `+sha+`
    args: [--quiet, -v]
    env: {ZONE: eu, API: "https://x", EMPTY: }
    max_concurrency: 4
    start-timeout: 20s
    health_interval: 2s
    health-misses: 5
  - name: abs_1
    path: /opt/reviewer
    sha256: `+strings.ToLower(sha)+`
    env: [A=1, B=x=y]
`)
	got, err := runProbe(t, "probe", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := got.cfg // as the command receives it
	if len(cfg.Plugins) != 2 {
		t.Fatalf("plugins = %+v", cfg.Plugins)
	}
	a, b := cfg.Plugins[0], cfg.Plugins[1]
	if want := filepath.Join(dir, "conf", "bin", "acme"); a.Path != want {
		t.Errorf("relative path = %q, want %q (relative to the config file)", a.Path, want)
	}
	if a.SHA256 != strings.ToLower(sha) {
		t.Errorf("sha256 = %q, want lower case", a.SHA256)
	}
	if want := []string{"--quiet", "-v"}; !reflect.DeepEqual(a.Args, want) {
		t.Errorf("args = %q", a.Args)
	}
	if want := []string{"API=https://x", "EMPTY=", "ZONE=eu"}; !reflect.DeepEqual(a.Env, want) {
		t.Errorf("env = %q, want %q", a.Env, want)
	}
	if a.MaxConcurrency != 4 || a.StartTimeout != 20*time.Second || a.HealthInterval != 2*time.Second || a.HealthMisses != 5 {
		t.Errorf("limits = %d, %s, health every %s, %d misses", a.MaxConcurrency, a.StartTimeout, a.HealthInterval, a.HealthMisses)
	}
	if b.Name != "abs_1" || b.Path != "/opt/reviewer" {
		t.Errorf("second plugin = %+v", b)
	}
	if want := []string{"A=1", "B=x=y"}; !reflect.DeepEqual(b.Env, want) {
		t.Errorf("env list = %q", b.Env)
	}
}

func TestConfigEmptyFile(t *testing.T) {
	clearGatedEnv(t)
	for _, content := range []string{"", "# nothing yet\n", "---\n"} {
		path := writeFile(t, t.TempDir(), "gated.yaml", content)
		got, err := runProbe(t, "probe", "--config", path)
		if err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		if got.natsURL != "nats://default:4222" || len(got.cfg.Plugins) != 0 {
			t.Errorf("%q: got %+v", content, got)
		}
	}
}
