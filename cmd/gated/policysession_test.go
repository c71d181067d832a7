package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPolicyEvalSession: --session gives the policy the agent's flow
// state, so an author sees a flow rule decide as the gate would; without
// it a bundle whose flow rules are on denies for want of a state, and a
// file that is not a flow state is a usage error, never an empty state.
func TestPolicyEvalSession(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := write("flows.yaml", `gated:
  config:
    flows:
      labels: {read_secret: [secret], send_email: [egress]}
      window: 1h
      rules: {egress_after_private: true}
`)
	send := write("send.json", `{"v":1,"id":"send-1","tenant":"acme","kind":"action","action":"send_email","class":"write",
"blast_radius":"single_device","target":{"to":"x@example.com"},"reason":"the weekly report","requested_by":{"agent":"mail-agent"}}`)
	const now = "2026-12-08T10:00:00Z"
	read := write("read.json", `{"recent":[{"proposal_id":"r-1","action":"read_secret","labels":["secret"],"at":"2026-12-08T09:30:00Z"}]}`)
	old := write("old.json", `{"recent":[{"proposal_id":"r-1","action":"read_secret","labels":["secret"],"at":"2026-12-08T08:30:00Z"}]}`)
	tests := []struct {
		name    string
		session []string
		code    int
		want    string
	}{
		{"no state", nil, exitNotApproved, `(?m)^  deny flow_state_unreadable: `},
		{"a secret read within the window", []string{"--session", read}, exitNotApproved,
			`(?m)^  deny flow_egress_after_private: send_email sends outside \(egress\) after read_secret \(proposal r-1\)`},
		{"a secret read before the window", []string{"--session", old}, 0, `(?m)^needs review by reviewer`},
		{"not a flow state", []string{"--session", write("bad.json", `{"recnt":[]}`)}, exitUsage, `unknown field "recnt"`},
		{"an action without a time", []string{"--session", write("notime.json", `{"recent":[{"action":"read_secret","labels":["secret"]}]}`)},
			exitUsage, `recent\[0\] needs an action and an at time`},
		{"a bad label", []string{"--session", write("label.json", `{"recent":[{"action":"read_secret","labels":["Secret"],"at":"2026-12-08T09:30:00Z"}]}`)},
			exitUsage, `label "Secret" must match`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"policy", "eval", "-f", send, "--policy-data", data, "--now", now}, tc.session...)
			code, out, err := runGated(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tc.code, err, out)
			}
			text := out
			if err != nil {
				text += err.Error()
			}
			wantOutput(t, text, tc.want)
		})
	}
}
