package notify_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/bus/notify"
)

func TestParseConfigValid(t *testing.T) {
	data, err := os.ReadFile("testdata/config/valid_full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := notify.ParseConfig("notify.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Sinks) != 2 {
		t.Fatalf("got %d sinks, want 2", len(cfg.Sinks))
	}
	s := cfg.Sinks[0]
	switch {
	case s.Name != "oncall", s.Format != notify.FormatSlack, s.SecretFile != "oncall.secret",
		s.Timeout != 5*time.Second, s.MaxAttempts != 4, s.Backoff != 250*time.Millisecond,
		s.MaxAge != 2*time.Minute, s.Queue != 16, !slices.Equal(s.Tenants, []string{"acme", "globex"}),
		len(s.Kinds) != len(notify.Kinds):
		t.Errorf("sink 0 read as %+v", s)
	}
	if s.Endpoint() != "https://hooks.example.com" {
		t.Errorf("Endpoint() = %q: logs must name the scheme and host only, the token stays out", s.Endpoint())
	}
	d := cfg.Sinks[1]
	switch {
	case d.Format != notify.FormatJSON, d.Timeout != notify.DefaultTimeout, d.MaxAttempts != notify.DefaultMaxAttempts,
		d.Backoff != notify.DefaultBackoff, d.MaxAge != notify.DefaultMaxAge, d.Queue != notify.DefaultQueue,
		d.Tenants != nil, d.SecretEnv != "GATED_AUDIT_HOOK_SECRET":
		t.Errorf("sink 1 (defaults) read as %+v", d)
	}
	if !d.Takes(notify.KindAuditVerificationFailed, "_") || d.Takes(notify.KindDecided, "acme") {
		t.Error("a sink for every tenant must take its kinds for gated's own events and no other kind")
	}
	if s.Takes(notify.KindTimeout, "initech") || !s.Takes(notify.KindTimeout, "globex") || s.Takes(notify.KindPluginDown, "_") {
		t.Error("a sink scoped to tenants takes only their notifications")
	}
}

func TestParseConfigInvalid(t *testing.T) {
	sink := func(extra string) string {
		return "sinks:\n  - name: ops\n    url: https://ops.example.com/hook\n    events: [timeout]\n    secret_env: OPS_SECRET\n" + extra
	}
	cases := []struct {
		note, yaml string
		want       []string // every one in the error
	}{
		{note: "empty", yaml: "", want: []string{"empty"}},
		{note: "not a mapping", yaml: "- a\n", want: []string{":1:", "want a mapping"}},
		{note: "unknown top key", yaml: "sinks: []\nwebhooks: []\n", want: []string{":2:", `"webhooks": unknown key`}},
		{note: "no sinks", yaml: "sinks: []\n", want: []string{"lists no webhook"}},
		{note: "sinks not a list", yaml: "sinks: {a: b}\n", want: []string{":1:", "want a list"}},
		{note: "two documents", yaml: sink("") + "---\nsinks: []\n", want: []string{":6:", "one YAML document"}},
		{note: "bad yaml", yaml: "sinks:\n  - name: [\n", want: []string{"invalid notify file", "notify.yaml:"}},
		{note: "unknown sink key", yaml: sink("    retries: 3\n"), want: []string{":6:", "sinks[0]", `"retries": unknown key`}},
		{note: "key twice", yaml: sink("    format: json\n    format: slack\n"), want: []string{":7:", `"format": given twice`}},
		{note: "bad name", yaml: strings.Replace(sink(""), "name: ops", "name: Ops Team", 1), want: []string{":2:", "name: want a name"}},
		{note: "no name", yaml: strings.Replace(sink(""), "name: ops", "format: json", 1), want: []string{":2:", "sinks[0]: name is required"}},
		{note: "no url", yaml: strings.Replace(sink(""), "url: https://ops.example.com/hook", "format: json", 1), want: []string{"sinks[0]: (ops) url is required"}},
		{note: "ftp url", yaml: strings.Replace(sink(""), "https://ops.example.com/hook", "ftp://ops.example.com/", 1), want: []string{":3:", "url: want an http:// or https:// URL"}},
		{note: "relative url", yaml: strings.Replace(sink(""), "https://ops.example.com/hook", "/hook", 1), want: []string{":3:", "url: want an http"}},
		{note: "url with user", yaml: strings.Replace(sink(""), "https://ops.example.com/hook", "https://bob:pw@ops.example.com/", 1), want: []string{":3:", "user information"}},
		{note: "url without host", yaml: strings.Replace(sink(""), "https://ops.example.com/hook", "https:///hook", 1), want: []string{":3:", "names no host"}},
		{note: "no events", yaml: strings.Replace(sink(""), "events: [timeout]", "format: json", 1), want: []string{"(ops) events is required"}},
		{note: "empty events", yaml: strings.Replace(sink(""), "events: [timeout]", "events: []", 1), want: []string{":4:", "events: want a list of kinds"}},
		{note: "unknown kind", yaml: strings.Replace(sink(""), "[timeout]", "[timeout, approved]", 1), want: []string{"events: line 4:", `"approved": want one of awaiting_operator`}},
		{note: "kind twice", yaml: strings.Replace(sink(""), "[timeout]", "[timeout, timeout]", 1), want: []string{"timeout is listed twice"}},
		{note: "bad tenant", yaml: sink("    tenants: [Acme]\n"), want: []string{"tenants: line 6:", "tenant token"}},
		{note: "reserved tenant", yaml: sink("    tenants: [_]\n"), want: []string{"tenants: line 6:"}},
		{note: "tenant twice", yaml: sink("    tenants: [acme, acme]\n"), want: []string{"acme is listed twice"}},
		{note: "tenants not a list", yaml: sink("    tenants: acme\n"), want: []string{":6:", "want a list of tenant tokens"}},
		{note: "bad format", yaml: sink("    format: xml\n"), want: []string{":6:", `format: "xml": want json or slack`}},
		{note: "inline secret", yaml: sink("    secret: s3cr3t-s3cr3t-s3cr3t\n"), want: []string{":6:", "never written in the notify file"}},
		{note: "no secret", yaml: strings.Replace(sink(""), "secret_env: OPS_SECRET", "format: json", 1), want: []string{"secret_file or secret_env is required"}},
		{note: "both secrets", yaml: sink("    secret_file: ops.secret\n"), want: []string{"not both"}},
		{note: "bad env name", yaml: strings.Replace(sink(""), "OPS_SECRET", "OPS-SECRET", 1), want: []string{":5:", "secret_env: want the name"}},
		{note: "timeout not a duration", yaml: sink("    timeout: 10\n"), want: []string{":6:", `timeout: "10" is not a duration`}},
		{note: "timeout too short", yaml: sink("    timeout: 1ms\n"), want: []string{":6:", "timeout: 1ms is out of bounds"}},
		{note: "backoff too long", yaml: sink("    backoff: 2h\n"), want: []string{"backoff: 2h0m0s is out of bounds"}},
		{note: "max_age too long", yaml: sink("    max_age: 48h\n"), want: []string{"max_age: 48h0m0s is out of bounds"}},
		{note: "max_attempts zero", yaml: sink("    max_attempts: 0\n"), want: []string{":6:", "max_attempts: 0 is out of bounds"}},
		{note: "max_attempts text", yaml: sink("    max_attempts: many\n"), want: []string{`max_attempts: "many" is not a whole number`}},
		{note: "queue too big", yaml: sink("    queue: 1000000\n"), want: []string{"queue: 1000000 is out of bounds"}},
		{note: "name twice", yaml: sink("  - name: ops\n    url: https://b.example.com/\n    events: [timeout]\n    secret_env: B\n"), want: []string{":6:", "sinks[1]: name ops is sinks[0]'s too"}},
		{note: "item not a mapping", yaml: "sinks:\n  - ops\n", want: []string{":2:", "sinks[0]: want a mapping"}},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			_, err := notify.ParseConfig("notify.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, notify.ErrInvalidConfig) {
				t.Errorf("%v does not wrap ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q quotes the inline secret", err)
			}
		})
	}
}

func TestLoadConfigSecrets(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef"
	cases := []struct {
		note    string
		sink    string // the secret line
		file    string // content of ops.secret, "" for none
		env     map[string]string
		want    string // error substring; "" for success
		wantKey string
	}{
		{note: "file, trimmed", sink: "secret_file: ops.secret", file: secret + "\n", wantKey: secret},
		{note: "env", sink: "secret_env: OPS_SECRET", env: map[string]string{"OPS_SECRET": secret}, wantKey: secret},
		{note: "missing file", sink: "secret_file: ops.secret", want: "secret_file:"},
		{note: "unset env", sink: "secret_env: OPS_SECRET", want: "OPS_SECRET is empty or not set"},
		{note: "short secret", sink: "secret_env: OPS_SECRET", env: map[string]string{"OPS_SECRET": "zq9Xw"}, want: "the secret has 5 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "notify.yaml")
			body := "sinks:\n  - name: ops\n    url: https://ops.example.com/hook\n    events: [timeout]\n    " + tc.sink + "\n"
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, "ops.secret"), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := notify.LoadConfig(path, func(k string) string { return tc.env[k] })
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, notify.ErrInvalidConfig) {
					t.Fatalf("got %v, want an ErrInvalidConfig with %q", err, tc.want)
				}
				if strings.Contains(err.Error(), "zq9Xw") {
					t.Errorf("error %q quotes the secret", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(cfg.Sinks[0].Secret) != tc.wantKey {
				t.Errorf("secret %q, want %q", cfg.Sinks[0].Secret, tc.wantKey)
			}
		})
	}
}

// FuzzParseConfig feeds the notify file parser arbitrary bytes: it
// never panics, and what it accepts is a config whose every sink has the
// fields a notifier relies on, within bounds.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("sinks: [{name: a, url: 'http://x', events: [timeout], secret_env: A, queue: 1}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := notify.ParseConfig("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, notify.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if len(cfg.Sinks) == 0 {
			t.Fatal("accepted a config without sinks")
		}
		names := map[string]bool{}
		for _, s := range cfg.Sinks {
			switch {
			case s.Name == "" || names[s.Name]:
				t.Fatalf("sink name %q empty or repeated", s.Name)
			case s.URL == "" || len(s.Kinds) == 0:
				t.Fatalf("sink %s lacks a url or kinds", s.Name)
			case (s.SecretFile == "") == (s.SecretEnv == ""):
				t.Fatalf("sink %s has not exactly one secret source", s.Name)
			case s.Format != notify.FormatJSON && s.Format != notify.FormatSlack:
				t.Fatalf("sink %s has format %q", s.Name, s.Format)
			case s.Timeout <= 0 || s.MaxAttempts < 1 || s.Backoff <= 0 || s.MaxAge <= 0 || s.Queue < 1:
				t.Fatalf("sink %s has settings out of bounds: %+v", s.Name, s)
			case !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
				t.Fatalf("sink %s has url %q", s.Name, s.URL)
			}
			names[s.Name] = true
		}
	})
}
