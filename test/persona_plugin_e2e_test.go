package test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pluginWarnings returns, persona by persona, the plugin each warning of
// gated's logs says is named but not configured.
func pluginWarnings(logs string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var line struct {
			Level, Msg      string
			Persona, Plugin string
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Level != "warn" || !strings.Contains(line.Msg, "not configured") {
			continue
		}
		out[line.Persona] = line.Plugin
	}
	return out
}

// TestServeWarnsOfPersonaWithoutPlugin checks that serve says, at start
// and at each persona reload, which persona names a plugin that it does
// not run: that persona's reviews would be blocked without a word.
func TestServeWarnsOfPersonaWithoutPlugin(t *testing.T) {
	t.Run("examples at start", func(t *testing.T) {
		g := startGated(t) // --personas ../examples/personas
		got := pluginWarnings(g.logs.String())
		if got["incident"] != "incident" {
			t.Errorf("no warning that persona incident names plugin incident, which is not configured; warnings %v\n%s", got, g.logs.String())
		}
		if plugin, ok := got["operator"]; ok {
			t.Errorf("warning for persona operator (plugin %q), whose plugin sop runs", plugin)
		}
		if len(got) != 1 {
			t.Errorf("warnings %v; want one, for incident", got)
		}
	})
	t.Run("a persona added later", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, plugin string) {
			t.Helper()
			body := "---\nname: " + name + "\ndescription: test persona\npermission_mode: read-only\nplugin: " + plugin + "\n---\nReview.\n"
			if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("first", "sop")
		g := startGated(t, "--personas", dir)
		if got := pluginWarnings(g.logs.String()); len(got) != 0 {
			t.Fatalf("warnings %v at start; every persona's plugin runs", got)
		}
		write("second", "nowhere")
		waitFor(t, "a warning about persona second", func() bool { return pluginWarnings(g.logs.String())["second"] == "nowhere" })
		if got := pluginWarnings(g.logs.String()); len(got) != 1 {
			t.Errorf("warnings %v; want one, for second", got)
		}
	})
}
