package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/strictjson"
	"github.com/gated/gated/policies"
)

// holdingPolicy is the default bundle configured to hold every action
// of tenant acme that starts with dns_ for an operator, within 15 minutes.
var holdingPolicy = sync.OnceValues(func() (*policies.Evaluator, error) {
	b, err := policies.Default()
	if err != nil {
		return nil, err
	}
	config := b.Data["gated"].(map[string]any)["config"].(map[string]any)
	config["operator_holds"] = map[string]any{
		"tenant_wide_destructive": true,
		"actions":                 map[string]any{"acme": []any{"dns_*"}},
		"deadline":                "15m",
	}
	return policies.Compile(context.Background(), b)
})

const holdSubject = "gated.proposals.acme.dns_delete_zone"

func holdHarness(t *testing.T) *harness {
	t.Helper()
	ev, err := holdingPolicy()
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, func(h *harness) { h.cfg.Policy = ev })
}

func heldProposal(t *testing.T, override map[string]any) []byte {
	m := map[string]any{"action": "dns_delete_zone", "target": map[string]any{"zone": "example.org"}}
	for k, v := range override {
		m[k] = v
	}
	return proposalJSON(t, m)
}

func decideHeld(t *testing.T, h *harness) *gated.Verdict {
	t.Helper()
	v, tr := h.mustDecide(t, holdSubject, heldProposal(t, nil), "")
	if v.Outcome != gated.OutcomeBlocked || v.Approved || v.AwaitingOperator == nil || v.Final() {
		t.Fatalf("verdict %s awaiting %+v: %s", v.Outcome, v.AwaitingOperator, v.Reason)
	}
	if h.reviewer.calls() != 0 {
		t.Errorf("a held action was sent to a reviewer %d times", h.reviewer.calls())
	}
	if want := h.now.Add(15 * time.Minute); !v.AwaitingOperator.Deadline.Equal(want) || v.AwaitingOperator.Rule != "hold_listed_action" {
		t.Errorf("hold %+v, want deadline %s by hold_listed_action", v.AwaitingOperator, want)
	}
	if !slices.Contains(tr.names(), gated.EventOperatorAwaited) {
		t.Errorf("events %v lack %s", tr.names(), gated.EventOperatorAwaited)
	}
	return v
}

func actionDecision(v *gated.Verdict, decision string) engine.OperatorDecision {
	return engine.OperatorDecision{Tenant: v.Tenant, ProposalID: v.ProposalID, ProposalSHA256: v.ProposalSHA256,
		Operator: "alice", Key: "UKEY", Decision: decision, Reason: "change window agreed"}
}

func TestHeldActionSettles(t *testing.T) {
	t.Run("approve", func(t *testing.T) {
		h := holdHarness(t)
		held := decideHeld(t, h)
		tr := h.stream.trail()
		v, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), tr)
		if err != nil {
			t.Fatal(err)
		}
		if v.Outcome != gated.OutcomeApproved || !v.Approved || v.Stage != gated.StageOperator || v.AwaitingOperator != nil || !v.Final() {
			t.Fatalf("verdict %s at %s: %s", v.Outcome, v.Stage, v.Reason)
		}
		if v.Operator == nil || v.Operator.ID != "alice" || v.Operator.Key != "UKEY" || v.Operator.Reason != "change window agreed" {
			t.Errorf("operator %+v", v.Operator)
		}
		if got, want := tr.names(), []string{gated.EventOperatorDecided, gated.EventVerdict}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		checkDecidedOperator(t, tr.all(), "alice")
		if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != gated.OutcomeApproved {
			t.Errorf("store holds %s", stored.Outcome)
		}
		if _, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorReject), h.stream.trail()); !errors.Is(err, gated.ErrNotAwaiting) {
			t.Errorf("second decision: %v, want ErrNotAwaiting", err)
		}
	})
	t.Run("reject", func(t *testing.T) {
		h := holdHarness(t)
		held := decideHeld(t, h)
		v, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorReject), h.stream.trail())
		if err != nil || v.Outcome != gated.OutcomeRejected || v.Approved || !strings.Contains(v.Reason, "alice rejected") {
			t.Fatalf("verdict %+v, %v", v, err)
		}
	})
	t.Run("deadline times out, never approves", func(t *testing.T) {
		h := holdHarness(t)
		held := decideHeld(t, h)
		if _, err := h.eng.Expire(t.Context(), "acme", "p1", h.stream.trail()); !errors.Is(err, gated.ErrNotDue) {
			t.Fatalf("Expire before the deadline: %v, want ErrNotDue", err)
		}
		h.advance(15 * time.Minute)
		if _, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), h.stream.trail()); !errors.Is(err, gated.ErrNotAwaiting) {
			t.Fatalf("approval at the deadline: %v, want ErrNotAwaiting", err)
		}
		tr := h.stream.trail()
		v, err := h.eng.Expire(t.Context(), "acme", "p1", tr)
		if err != nil || v.Outcome != gated.OutcomeTimeout || v.Approved || v.Stage != gated.StageOperator {
			t.Fatalf("verdict %+v, %v", v, err)
		}
		if got := tr.names(); !slices.Equal(got, []string{gated.EventVerdict}) {
			t.Errorf("events %v", got)
		}
		if _, err := h.eng.Expire(t.Context(), "acme", "p1", h.stream.trail()); !errors.Is(err, gated.ErrNotAwaiting) {
			t.Errorf("second timeout: %v, want ErrNotAwaiting", err)
		}
	})
	t.Run("mismatches are refused", func(t *testing.T) {
		h := holdHarness(t)
		held := decideHeld(t, h)
		for _, tc := range []struct {
			note string
			edit func(*engine.OperatorDecision)
		}{
			{"another digest", func(d *engine.OperatorDecision) { d.ProposalSHA256 = strings.Repeat("0", 64) }},
			{"no decision", func(d *engine.OperatorDecision) { d.Decision = "" }},
			{"unknown decision", func(d *engine.OperatorDecision) { d.Decision = "approve with caveats" }},
			{"criteria for an action", func(d *engine.OperatorDecision) {
				d.Criteria = []engine.OperatorFinding{{ID: "signoff", Pass: true}}
			}},
			{"no operator", func(d *engine.OperatorDecision) { d.Operator = "" }},
		} {
			d := actionDecision(held, engine.OperatorApprove)
			tc.edit(&d)
			tr := h.stream.trail()
			if _, err := h.eng.Resolve(t.Context(), d, tr); !errors.Is(err, gated.ErrDecisionMismatch) {
				t.Errorf("%s: %v, want ErrDecisionMismatch", tc.note, err)
			}
			if len(tr.names()) != 0 {
				t.Errorf("%s: a refused decision recorded %v", tc.note, tr.names())
			}
		}
		if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != gated.OutcomeBlocked {
			t.Errorf("after refusals the store holds %s", stored.Outcome)
		}
	})
	t.Run("a held verdict without a digest is refused", func(t *testing.T) {
		// gated stores every held verdict with its proposal's digest: one
		// without it names no proposal, and a decision without a digest
		// must not approve it.
		h := holdHarness(t)
		held := decideHeld(t, h)
		held.ProposalSHA256 = ""
		raw, err := json.Marshal(held)
		if err != nil {
			t.Fatal(err)
		}
		h.store.mu.Lock()
		h.store.m["acme.p1"] = raw
		h.store.mu.Unlock()
		tr := h.stream.trail()
		if _, err := h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), tr); !errors.Is(err, gated.ErrDecisionMismatch) {
			t.Errorf("Resolve: %v, want ErrDecisionMismatch", err)
		}
		if len(tr.names()) != 0 {
			t.Errorf("a refused decision recorded %v", tr.names())
		}
	})
	t.Run("a denied action is rejected, never held", func(t *testing.T) {
		h := holdHarness(t)
		v, _ := h.mustDecide(t, holdSubject, heldProposal(t, map[string]any{"flags": map[string]any{"skip_review": true}}), "")
		if v.Outcome != gated.OutcomeRejected || v.AwaitingOperator != nil {
			t.Fatalf("verdict %s awaiting %+v: %s", v.Outcome, v.AwaitingOperator, v.Reason)
		}
		// So no decision can approve it.
		_, err := h.eng.Resolve(t.Context(), actionDecision(v, engine.OperatorApprove), h.stream.trail())
		if !errors.Is(err, gated.ErrNotAwaiting) {
			t.Errorf("approving a denied action: %v, want ErrNotAwaiting", err)
		}
		if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != gated.OutcomeRejected {
			t.Errorf("store holds %s", stored.Outcome)
		}
	})
	t.Run("a replay gets the held verdict", func(t *testing.T) {
		h := holdHarness(t)
		held := decideHeld(t, h)
		again, err := h.decideOn(t.Context(), h.stream.trail(), holdSubject, heldProposal(t, nil), "")
		if err != nil {
			t.Fatal(err)
		}
		if again.AuditSeq != held.AuditSeq || again.AwaitingOperator == nil {
			t.Errorf("replay %+v, want the held verdict", again)
		}
	})
}

// TestHeldActionDecisionRacesTheDeadline: a decision and the deadline
// that meet settle the verdict exactly once, whichever comes first.
func TestHeldActionDecisionRacesTheDeadline(t *testing.T) {
	for _, first := range []string{"decision", "deadline"} {
		t.Run(first+" first", func(t *testing.T) {
			h := holdHarness(t)
			held := decideHeld(t, h)
			h.advance(15*time.Minute - time.Millisecond)
			decide := func() (*gated.Verdict, error) {
				return h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), h.stream.trail())
			}
			expire := func() (*gated.Verdict, error) {
				h.advance(time.Millisecond)
				return h.eng.Expire(t.Context(), "acme", "p1", h.stream.trail())
			}
			a, b := decide, expire
			want := gated.OutcomeApproved
			if first == "deadline" {
				a, b, want = expire, decide, gated.OutcomeTimeout
			}
			v, err := a()
			if err != nil || v.Outcome != want {
				t.Fatalf("first: %+v, %v", v, err)
			}
			if _, err := b(); !errors.Is(err, gated.ErrNotAwaiting) {
				t.Fatalf("second: %v, want ErrNotAwaiting", err)
			}
			if stored := h.store.stored(t, "acme", "p1"); stored.Outcome != want {
				t.Errorf("store holds %s, want %s", stored.Outcome, want)
			}
		})
	}
	t.Run("at once", func(t *testing.T) {
		// Both run together against the claim: one settles, the other is
		// refused, and the store holds the winner's verdict.
		for i := range 20 {
			h := holdHarness(t)
			held := decideHeld(t, h)
			// A millisecond before the deadline: the decision may read the
			// verdict as open while the expiry moves the clock past it.
			h.advance(15*time.Minute - time.Millisecond)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var won []gated.Outcome
			run := func(f func() (*gated.Verdict, error)) {
				defer wg.Done()
				v, err := f()
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, v.Outcome)
					mu.Unlock()
				case !errors.Is(err, gated.ErrNotAwaiting) && !errors.Is(err, gated.ErrClaimed) && !errors.Is(err, gated.ErrNotDue):
					t.Errorf("round %d: %v", i, err)
				}
			}
			wg.Add(2)
			go run(func() (*gated.Verdict, error) {
				return h.eng.Resolve(t.Context(), actionDecision(held, engine.OperatorApprove), h.stream.trail())
			})
			go run(func() (*gated.Verdict, error) {
				h.advance(time.Millisecond)
				return h.eng.Expire(t.Context(), "acme", "p1", h.stream.trail())
			})
			wg.Wait()
			stored := h.store.stored(t, "acme", "p1")
			if len(won) > 1 {
				t.Fatalf("round %d: both settled: %v", i, won)
			}
			if len(won) == 1 && stored.Outcome != won[0] {
				t.Fatalf("round %d: %s won, the store holds %s", i, won[0], stored.Outcome)
			}
			if stored.Outcome == gated.OutcomeApproved && !stored.DecidedAt.Before(held.AwaitingOperator.Deadline) {
				t.Fatalf("round %d: approved at %s, the deadline was %s", i, stored.DecidedAt, held.AwaitingOperator.Deadline)
			}
		}
	})
}

func TestHeldVerdictWire(t *testing.T) {
	h := holdHarness(t)
	held := decideHeld(t, h)
	raw, err := held.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	hold, ok := m["awaiting_operator"].(map[string]any)
	if !ok || hold["rule"] != "hold_listed_action" || hold["deadline"] == "" || hold["reason"] == "" {
		t.Errorf("awaiting_operator %v", m["awaiting_operator"])
	}
}

// checkDecidedOperator reads the data of every event of evs with a
// strict duplicate-key check, and the operator.decided event's operator
// back: one member names the operator who decided, or two readers could
// read two operators from the same evidence.
func checkDecidedOperator(t *testing.T, evs []gated.AuditEvent, operator string) {
	t.Helper()
	decided := 0
	for _, ev := range evs {
		if _, err := strictjson.ReadValue(ev.Data, strictjson.ValueOptions{}); err != nil {
			t.Errorf("%s data %s: %v", ev.Event, ev.Data, err)
			continue
		}
		if ev.Event != gated.EventOperatorDecided {
			continue
		}
		decided++
		d, err := gated.DecodeAuditData[gated.OperatorDecidedData](ev)
		if err != nil || d.Operator != operator {
			t.Errorf("%s data %s: operator %q, %v, want %q", ev.Event, ev.Data, d.Operator, err, operator)
		}
	}
	if decided != 1 {
		t.Errorf("%d %s events, want 1", decided, gated.EventOperatorDecided)
	}
}
