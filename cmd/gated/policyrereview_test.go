package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/replay"
	"github.com/gated/gated/plugins/llm"
)

// reviewedHistory is the history a real gated records with its built-in
// reviewer persona and the bundled sop reviewer: two restarts and two
// scale-ups that an SOP covers (approved), and two deploys that none
// covers (rejected), each on a target of its own.
var reviewedHistory = []struct {
	id, action string
	want       gated.Outcome
}{
	{"p-h1", "host_restart_service", gated.OutcomeApproved},
	{"p-k1", "k8s_scale_deployment", gated.OutcomeApproved},
	{"p-u1", "app_deploy", gated.OutcomeRejected},
	{"p-h2", "host_restart_service", gated.OutcomeApproved},
	{"p-k2", "k8s_scale_deployment", gated.OutcomeApproved},
	{"p-u2", "app_deploy", gated.OutcomeRejected},
}

func writeProposal(id, action string, device int) []byte {
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":%q,"class":"write","blast_radius":"single_device",`+
		`"target":{"device_id":%d,"service":"svc-%d"},"reason":"rereview test","operator":{"id":"alice","roles":["sre"]},`+
		`"requested_by":{"agent":"a","session":"s"}}`, id, action, device, device)
}

// recordReviewedHistory runs serve with the built-in personas on a test
// server, has it decide reviewedHistory, stops it, and returns the
// server's URL.
func recordReviewedHistory(t *testing.T) string {
	t.Helper()
	clearGatedEnv(t)
	s := natstest.Server(t)
	_, stop := startServe(t, s.ClientURL())
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range reviewedHistory {
		if v := propose(t, client, writeProposal(p.id, p.action, i+1)); v.Outcome != p.want || v.Stage != gated.StageReview {
			t.Fatalf("%s: verdict %s at %s (%s), want %s at review", p.id, v.Outcome, v.Stage, v.Reason, p.want)
		}
	}
	stop()
	return s.ClientURL()
}

// noScaleRollback is a candidate policy whose catalog no longer knows how
// to roll a scale-up back: the sop reviewer then rejects scale-ups.
const noScaleRollback = `gated:
  sops:
    - id: SOP-001
      title: Restart a web or application service
      actions: [host_restart_service, service_restart]
      rollback: Restart the previous unit file revision with systemctl and confirm the health check passes.
    - id: SOP-002
      title: Scale a deployment
      actions: [k8s_scale_deployment]
      rollback: ""
`

// editedReviewer is the built-in reviewer persona with one more sentence:
// a new revision of the same persona.
func editedReviewer(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "personas", "builtin", "reviewer.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, dir, "reviewer.md", string(src)+"\nA scale-up needs a known way back too.\n")
	return dir
}

func replayJSON(t *testing.T, args ...string) *replay.Report {
	t.Helper()
	code, out, err := runGated(t, append([]string{"policy", "replay", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("policy replay %v: exit %d, %v\n%s", args, code, err, out)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out)
	}
	return &rep
}

func disagreementIDs(rr *replay.RereviewReport) []string {
	var ids []string
	for _, d := range rr.Disagreements {
		ids = append(ids, d.ID+":"+d.Recorded+"->"+d.Candidate)
	}
	return ids
}

// TestRereviewSOPReviewer records a history with a real gated, then
// replays it under a candidate whose SOP catalog drops the scale-up
// rollback: recorded reviews are reused while the reviewer is unchanged
// and stale once the persona is edited, and --rereview runs the sop
// reviewer again with a known kappa.
func TestRereviewSOPReviewer(t *testing.T) {
	url := recordReviewedHistory(t)
	candidate := t.TempDir()
	writeFile(t, candidate, "data.yaml", noScaleRollback)

	t.Run("unchanged reviewer reused", func(t *testing.T) {
		rep := replayJSON(t, "--nats-url", url, "--policies", candidate)
		if rep.Replayed != 6 || rep.ReviewReused != 6 || rep.ReviewStale != 0 || rep.Flips != 0 {
			t.Fatalf("replayed %d, reused %d, stale %d (%v), flips %d; want 6 reused, none stale",
				rep.Replayed, rep.ReviewReused, rep.ReviewStale, rep.ReviewStaleNamed, rep.Flips)
		}
	})
	t.Run("edited persona stale, rereviewed", func(t *testing.T) {
		rep := replayJSON(t, "--nats-url", url, "--policies", candidate, "--personas", editedReviewer(t),
			"--rereview", "reviewer", "--rereview-concurrency", "3")
		if rep.ReviewReused != 0 || rep.ReviewStale != 6 || len(rep.ReviewStaleNamed) != 6 ||
			!strings.Contains(rep.ReviewStaleNamed[0].Why, "persona reviewer changed: revision") {
			t.Errorf("reused %d, stale %d %v; want 6 stale, each naming the persona's revision", rep.ReviewReused, rep.ReviewStale, rep.ReviewStaleNamed)
		}
		rr := rep.Rereview
		if rr == nil {
			t.Fatal("no rereview section")
		}
		// approve->approve 2, approve->reject 2, reject->reject 2:
		// kappa = (6*4 - (4*2 + 2*4)) / (36 - 16) = 8/20 = 2/5.
		if rr.Reviewed != 6 || rr.Agreed != 4 || rr.Disagreed != 2 || rr.KappaExact != "2/5" || rr.Kappa == nil || *rr.Kappa != 0.4 ||
			rr.Table["approve -> reject"] != 2 || rr.Table["reject -> reject"] != 2 || rr.Plugin != "sop" {
			t.Errorf("rereview %+v; want 6 reviewed, 4 agreed, kappa 2/5 on plugin sop", rr)
		}
		if got, want := disagreementIDs(rr), []string{"p-k1:approve->reject", "p-k2:approve->reject"}; !slices.Equal(got, want) {
			t.Errorf("disagreements %v, want %v", got, want)
		}
		if len(rr.Disagreements) > 0 && !strings.Contains(rr.Disagreements[0].CandidateWhy, "Gates failed: rollback_known") {
			t.Errorf("candidate's reason %q", rr.Disagreements[0].CandidateWhy)
		}
	})
	t.Run("text report", func(t *testing.T) {
		code, out, err := runGated(t, "policy", "replay", "--nats-url", url, "--policies", candidate, "--rereview", "reviewer", "--show", "1")
		if code != 0 {
			t.Fatalf("exit %d: %v\n%s", code, err, out)
		}
		wantOutput(t, out, `reviewed again: 6, agreed: 4, disagreed: 2, flip rate 0\.3333`, `Cohen's kappa: 0\.4000 \(2/5\)`,
			`first 1 disagreement\(s\):\n  acme\.p-k1 \(k8s_scale_deployment`)
	})
	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"--rereview", "nobody"},
			{"--rereview", "reviewer", "--rereview-concurrency", "0"},
		} {
			code, out, err := runGated(t, append([]string{"policy", "replay", "--nats-url", url, "--policies", candidate}, args...)...)
			if code != exitUsage {
				t.Errorf("%v: exit %d (%v), want %d\n%s", args, code, err, exitUsage, out)
			}
		}
	})
}

// fakeOpenAI is a model server speaking OpenAI's chat completions wire
// protocol. It decides from the proposal in the prompt: it approves
// restarts, answers a client error for proposal p-u1, never answers for
// p-h2 (until the client gives up), and rejects the rest.
func fakeOpenAI(t *testing.T) (url string, calls func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		n++
		mu.Unlock()
		body := string(raw)
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if strings.Contains(body, `p-h2`) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
			return
		}
		if strings.Contains(body, `p-u1`) {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"the model refused the request","type":"invalid_request_error"}}`)
			return
		}
		text := "Decision: reject\nNotes: not convinced this is safe."
		if strings.Contains(body, "host_restart_service") {
			text = "Decision: approve\nNotes: a routine restart with a known way back."
		}
		answer, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": text}}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// llmReviewer is a candidate reviewer persona on the bundled llm plugin.
const llmReviewer = `---
name: reviewer
description: A model reviews the change.
model: openai/gpt-test
permission_mode: read-only
plugin: llm
max_turns: 2
---
Review the proposed change. Answer with a decision line first.
`

// TestRereviewLLMReviewer re-reviews the recorded history with the
// bundled llm reviewer against a local model server: the disagreements
// are exact, and a provider error and a timeout are categories of their
// own, never an approval.
func TestRereviewLLMReviewer(t *testing.T) {
	url := recordReviewedHistory(t)
	model, calls := fakeOpenAI(t)
	t.Setenv(llm.EnvOpenAIBaseURL, model)
	t.Setenv(llm.EnvOpenAIAPIKey, "test-key")
	personasDir := t.TempDir()
	writeFile(t, personasDir, "reviewer.md", llmReviewer)
	rep := replayJSON(t, "--nats-url", url, "--policies", t.TempDir(), "--personas", personasDir,
		"--rereview", "reviewer", "--rereview-concurrency", "2", "--rereview-timeout", "5s")
	rr := rep.Rereview
	if rr == nil {
		t.Fatal("no rereview section")
	}
	// approve->approve 1, approve->timeout 1, approve->reject 2,
	// reject->error 1, reject->reject 1. Rows approve 4, reject 2;
	// columns approve 1, reject 3, error 1, timeout 1:
	// kappa = (6*2 - (4*1 + 2*3)) / (36 - 10) = 2/26 = 1/13.
	if rr.Reviewed != 6 || rr.Disagreed != 4 || rr.KappaExact != "1/13" || rr.Candidate["error"] != 1 || rr.Candidate["timeout"] != 1 ||
		rr.Candidate["approve"] != 1 || rr.Plugin != "llm" || rr.Model != "openai/gpt-test" {
		t.Errorf("rereview %+v; want 6 reviewed, 4 disagreements, one error, one timeout, kappa 1/13 on llm", rr)
	}
	want := []string{"p-k1:approve->reject", "p-u1:reject->error", "p-h2:approve->timeout", "p-k2:approve->reject"}
	if got := disagreementIDs(rr); !slices.Equal(got, want) {
		t.Errorf("disagreements %v, want %v", got, want)
	}
	if n := calls(); n != 6 {
		t.Errorf("the model was called %d times, want once per review (6)", n)
	}
	if rep.ReviewStale != 6 || !strings.Contains(rep.ReviewStaleNamed[0].Why, "persona reviewer changed") {
		t.Errorf("stale %d %v, want every recorded review stale", rep.ReviewStale, rep.ReviewStaleNamed)
	}
}
