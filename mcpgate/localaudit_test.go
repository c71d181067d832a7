package mcpgate

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gated/gated"
)

// batches is a LocalReporter that keeps what it is sent, or fails.
type batches struct {
	mu   sync.Mutex
	got  []gated.LocalBatch
	fail bool
	sent chan struct{}
}

func (b *batches) ReportLocal(_ context.Context, lb gated.LocalBatch) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		return errors.New("gated is unreachable")
	}
	b.got = append(b.got, lb)
	b.sent <- struct{}{}
	return nil
}

// TestLocalDecisionReported: a read the precheck approves carries its
// gated/verdict (decided locally, audit pending) and its decision,
// under the same id, is sent to gated.
func TestLocalDecisionReported(t *testing.T) {
	u := newSessionUpstream()
	rep := &batches{sent: make(chan struct{}, 16)}
	g := sessionGate(t, u, Config{Dial: u.dial, Local: rep, PolicyRevision: "rev-1"})
	a := agentWith(t, g, new(atomic.Int64))
	res, err := a.CallTool(t.Context(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{"x": 1}})
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	v, _ := res.Meta[VerdictMetaKey].(map[string]any)
	if v["decided"] != "locally" || v["audit"] != "pending" || v["outcome"] != "approved" || v["policy_revision"] != "rev-1" || v["tenant"] != "acme" {
		t.Fatalf("gated/verdict %v", res.Meta)
	}
	<-rep.sent // the test's deadline bounds it
	rep.mu.Lock()
	defer rep.mu.Unlock()
	d := rep.got[0].Decisions[0]
	if rep.got[0].Tenant != "acme" || d.ID != v["proposal_id"] || d.Method != "tools/call" || d.Name != "whoami" || d.Agent != "a" || d.PolicyRevision != "rev-1" {
		t.Fatalf("reported %+v, result's verdict %v", rep.got[0], v)
	}
	// What gated takes in.
	if _, err := gated.DecodeLocalBatch(func() []byte { b, _ := json.Marshal(rep.got[0]); return b }()); err != nil {
		t.Fatal(err)
	}
}

// TestLocalDecisionLost: when gated cannot be told, the read is still
// answered, and its decision is counted lost rather than dropped unseen.
func TestLocalDecisionLost(t *testing.T) {
	u := newSessionUpstream()
	rep := &batches{fail: true}
	g := sessionGate(t, u, Config{Dial: u.dial, Local: rep})
	a := agentWith(t, g, new(atomic.Int64))
	if _, isErr := callText(t, a, "whoami"); isErr {
		t.Fatal("the read failed")
	}
	for g.LocalLost() == 0 {
		time.Sleep(10 * time.Millisecond) // the test's deadline bounds it
	}
	if n := g.LocalLost(); n != 1 {
		t.Fatalf("lost %d, want 1", n)
	}
}
