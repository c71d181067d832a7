package main

import (
	"strings"
	"testing"
	"time"
)

// waitLocalDecided waits until gated has recorded the local.decided
// event of the call id that gated mcp approved itself, then checks the
// audit stream with serve's audit key.
func (h *mcpHarness) waitLocalDecided(t *testing.T, id string) {
	t.Helper()
	var out string
	for range 200 {
		var code int
		code, out, _ = runGated(t, "audit", "tail", "--nats-url", h.natsURL, "--tenant", "acme", "--json")
		if code == 0 && strings.Contains(out, `"local.decided"`) && strings.Contains(out, id) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out, id) {
		t.Fatalf("no local.decided of %s in the audit stream:\n%s", id, out)
	}
	code, out, err := runGated(t, "audit", "verify", "--nats-url", h.natsURL, "--audit-key-file", h.auditKey)
	if code != 0 {
		t.Fatalf("audit verify: exit %d, %v\n%s", code, err, out)
	}
}
