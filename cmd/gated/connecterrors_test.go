package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/internal/natstest"
)

// connectingArgs are, for every command that connects to gated's NATS,
// arguments that take it as far as connecting.
func connectingArgs(t *testing.T) map[string][]string {
	t.Helper()
	dir := t.TempDir()
	seed := filepath.Join(dir, "alice.seed")
	if _, err := operator.WriteSeed(seed); err != nil {
		t.Fatal(err)
	}
	proposal := writeFile(t, dir, "p.json", `{"v":1,"id":"p1","tenant":"acme","action":"host_list_services","class":"read"}`)
	ck := filepath.Join(dir, "ck.key")
	if code, _, err := runGated(t, "audit", "checkpoint", "--checkpoint-key-file", ck, "--create-key", "gated.example.com"); code != 0 {
		t.Fatalf("creating a checkpoint key: exit %d, %v", code, err)
	}
	return map[string][]string{
		"gated audit checkpoint":     {"--checkpoint-key-file", ck},
		"gated audit export":         {"--tenant", "acme", "--checkpoint-key-file", ck},
		"gated audit prove":          {"acme", "p1", "--checkpoint-key-file", ck},
		"gated audit query":          nil,
		"gated audit tail":           nil,
		"gated audit verify":         nil,
		"gated budgets reset":        {"acme"},
		"gated budgets show":         nil,
		"gated grants keys":          nil,
		"gated mcp":                  {"--tenant", "acme", "--agent", "ops-agent", "--upstream", "http://127.0.0.1:1/mcp"},
		"gated operator decide":      {"acme", "p1", "--approve", "--operator", "alice", "--seed-file", seed},
		"gated operator clear-flow":  {"acme", "mailer", "--reason", "cleared", "--operator", "alice", "--seed-file", seed},
		"gated policy replay":        {"--policies", "../../examples/policies"},
		"gated policy shadow report": nil,
		"gated propose":              {"-f", proposal},
		"gated report reviewers":     nil,
		"gated verdict get":          {"acme", "p1"},
	}
}

// Every command that connects to gated's NATS (serve, which is that
// NATS's server or client, aside) asks whether gated serve runs when no
// NATS server answers at --nats-url, and refuses at once a --nats-url
// that is not a NATS URL (an http:// one, gated's web listener), instead
// of failing with a bare EOF once its connection times out.
func TestConnectingCommandsSayWhatIsWrong(t *testing.T) {
	clearGatedEnv(t)
	args := connectingArgs(t)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("nats-url") != nil && c.Name() != "serve" {
			if _, ok := args[c.CommandPath()]; !ok {
				t.Errorf("%s connects to NATS: give it arguments in connectingArgs", c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd())

	// An HTTP listener that accepts and never answers: a NATS client
	// would wait for its greeting until its connection times out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nobody := "nats://" + natstest.FreeAddr(t)
	for path, extra := range args {
		t.Run(path, func(t *testing.T) {
			argv := append(strings.Fields(path)[1:], extra...)
			code, _, err := runGated(t, append(argv, "--nats-url", nobody)...)
			if code != exitFailure || err == nil || !strings.HasSuffix(err.Error(), "(is gated serve running?)") {
				t.Errorf("--nats-url %s, where nothing listens: exit %d, %v; want %d and a question whether gated serve runs", nobody, code, err, exitFailure)
			}
			web := "http://" + ln.Addr().String()
			code, _, err = runGated(t, append(argv, "--nats-url", web)...)
			want := "--nats-url " + web + ": http:// is not a NATS URL; give nats://HOST:PORT"
			if code != exitUsage || err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("--nats-url %s: exit %d, %v; want %d and %q", web, code, err, exitUsage, want)
			}
		})
	}
}

// serve refuses a --nats-url that is not a NATS URL before it starts
// anything.
func TestServeRefusesAnHTTPNATSURL(t *testing.T) {
	clearGatedEnv(t)
	for _, url := range []string{"http://127.0.0.1:8080", "nats://a:4222,HTTPS://b:443"} {
		err := run(t.Context(), []string{"serve", "--nats-url", url, "--data-dir", filepath.Join(t.TempDir(), "data"), "--log-level", "error"})
		wantUsageError(t, err, "is not a NATS URL; give nats://HOST:PORT")
	}
}

// propose names the line and column where a proposal file's JSON breaks,
// or where a file cut short ends.
func TestProposeSaysWhereTheJSONBreaks(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	tests := []struct {
		note, content, want string
	}{
		{note: "cut short", content: "{\n  \"v\": 1,\n  \"id\": \"p1\",\n  \"tenant\": \"ac",
			want: `p.json:4:16: not valid JSON: it ends before the JSON does (is the file cut short?)`},
		{note: "a bare word", content: "{\n  \"v\": 1,\n  \"tenant\": acme\n}\n",
			want: `p.json:3:13: not valid JSON: invalid character 'a' looking for beginning of value`},
		{note: "after the object", content: "{\"v\": 1}\n,\n",
			want: `p.json:2:1: not valid JSON: invalid character ',' after top-level value`},
		{note: "empty", content: "",
			want: `p.json:1:1: not valid JSON: it ends before the JSON does (is the file cut short?)`},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			file := writeFile(t, dir, "p.json", tc.content)
			code, _, err := runGated(t, "propose", "-f", file, "--nats-url", "nats://"+natstest.FreeAddr(t))
			if code != exitUsage || err == nil || err.Error() != filepath.Join(dir, tc.want) {
				t.Errorf("exit %d, %v; want %d and %q", code, err, exitUsage, filepath.Join(dir, tc.want))
			}
		})
	}
}

// A command short of its arguments says which, by name.
func TestMissingArgumentsAreNamed(t *testing.T) {
	clearGatedEnv(t)
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"verdict", "get", "acme"}, want: "missing ID: usage: gated verdict get TENANT ID"},
		{args: []string{"verdict", "get"}, want: "missing TENANT and ID: usage: gated verdict get TENANT ID"},
		{args: []string{"verdict", "get", "acme", "p1", "p2"}, want: "3 arguments, want 2: usage: gated verdict get TENANT ID"},
		{args: []string{"operator", "decide", "acme", "--approve"}, want: "missing PROPOSAL_ID: usage: gated operator decide TENANT PROPOSAL_ID"},
	}
	for _, tc := range tests {
		code, _, err := runGated(t, tc.args...)
		if code != exitUsage || err == nil || err.Error() != tc.want {
			t.Errorf("gated %s: exit %d, %v; want %d and %q", strings.Join(tc.args, " "), code, err, exitUsage, tc.want)
		}
	}
}
