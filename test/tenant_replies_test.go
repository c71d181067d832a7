package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
)

// gatedState is what the admin user sees of gated's own state: every key of
// the verdict bucket with its revision, the number of audit records under
// each subject, and the run stream's messages and consumers.
type gatedState struct {
	keys      map[string]uint64
	audit     map[string]uint64
	runs      uint64
	consumers int
}

func readGatedState(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) gatedState {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st := gatedState{keys: map[string]uint64{}, audit: map[string]uint64{}}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		st.keys[key] = e.Revision()
	}
	audit, err := js.Stream(ctx, "GATED_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := audit.Info(ctx, jetstream.WithSubjectFilter("gated.audit.>"))
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(st.audit, info.State.Subjects)
	runs, err := js.Stream(ctx, "GATED_RUNS")
	if err != nil {
		t.Fatal(err)
	}
	rinfo, err := runs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.runs, st.consumers = rinfo.State.Msgs, rinfo.State.Consumers
	return st
}

// diff lists what changed from st to after, leaving out the keys and
// audit subjects of the acme proposals in ownIDs, which gated decides as
// it should.
func (st gatedState) diff(after gatedState, ownIDs ...string) []string {
	own := func(s string) bool {
		for _, id := range ownIDs {
			if s == "acme."+id || strings.HasPrefix(s, "gated.audit.acme.") {
				return true
			}
		}
		return false
	}
	var out []string
	for k, rev := range after.keys {
		if own(k) {
			continue
		}
		if before, ok := st.keys[k]; !ok {
			out = append(out, fmt.Sprintf("key %s written (revision %d)", k, rev))
		} else if before != rev {
			out = append(out, fmt.Sprintf("key %s rewritten (revision %d, was %d)", k, rev, before))
		}
	}
	for subj, n := range after.audit {
		if !own(subj) && st.audit[subj] != n {
			out = append(out, fmt.Sprintf("audit subject %s holds %d records, was %d", subj, n, st.audit[subj]))
		}
	}
	if after.runs != st.runs {
		out = append(out, fmt.Sprintf("run stream holds %d messages, was %d", after.runs, st.runs))
	}
	if after.consumers != st.consumers {
		out = append(out, fmt.Sprintf("run stream has %d consumers, was %d", after.consumers, st.consumers))
	}
	slices.Sort(out)
	return out
}

// waitStored waits until a verdict is stored under tenant.id.
func waitStored(t *testing.T, kv jetstream.KeyValue, tenant, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, found := isoStoredVerdict(t, kv, tenant, id); found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s.%s was never decided", tenant, id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTenantReplySubjectsReachNothingOfGated runs the real gated against
// the documented configuration and has tenant acme name gated's own
// subjects as the reply subject of its proposals: the bucket's keys
// (another tenant's verdicts, claims and target histories, its own run
// records), the audit stream, the run stream and the proposal stream. The
// stream's publish acknowledgement must not land in any of them, and no
// consumer acme may create may deliver there either.
func TestTenantReplySubjectsReachNothingOfGated(t *testing.T) {
	url, pw := startTenantsServer(t)
	startGated(t, "--nats-url", url, "--nats-user", "gated")
	admin := isoConnect(t, url, "gated", pw["gated"], "")
	acme := isoConnect(t, url, "acme", pw["acme"], "_INBOX_acme")
	globex := isoConnect(t, url, "globex", pw["globex"], "_INBOX_globex")
	kv, err := admin.js.KeyValue(t.Context(), "GATED_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}
	const decided, future = "globex-decided-1", "globex-future-1"
	if v := globex.propose(t, decided); v.Outcome != gated.OutcomeApproved {
		t.Fatalf("globex's own proposal: %s (%s)", v.Outcome, v.Reason)
	}

	for i, target := range []string{
		"$KV.GATED_VERDICTS.globex." + decided,
		"$KV.GATED_VERDICTS.globex." + future,
		"$KV.GATED_VERDICTS.globex.claims." + future,
		"$KV.GATED_VERDICTS.globex.targets.t1",
		"$KV.GATED_VERDICTS.acme.runs.run-1",
		"gated.audit.globex.verdict.decided",
		"gated.audit.globex.proposal.received",
		"gated.continuations.globex.run-1",
		"gated.continuations.acme.run-1",
		"gated.escalations.globex",
		"gated.proposals.globex.host_list_services",
		"gated.proposals.acme.host_list_services",
	} {
		t.Run(target, func(t *testing.T) {
			before := readGatedState(t, admin.js, kv)
			id := fmt.Sprintf("reply-%d", i)
			msg := nats.NewMsg("gated.proposals.acme.host_list_services")
			msg.Reply = target
			msg.Data = isoReadProposal("acme", id)
			msg.Header.Set(jetstream.MsgIDHeader, "acme."+id)
			if err := acme.nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
			waitStored(t, kv, "acme", id)
			// A proposal sent after it is decided after anything the
			// acknowledgement could have put on the proposal stream.
			flush := fmt.Sprintf("flush-%d", i)
			if v := acme.propose(t, flush); v.Outcome != gated.OutcomeApproved {
				t.Fatalf("acme's proposal after the injection: %s (%s)", v.Outcome, v.Reason)
			}
			if changed := before.diff(readGatedState(t, admin.js, kv), id, flush); len(changed) > 0 {
				t.Errorf("reply subject %s changed gated's state:\n%s", target, strings.Join(changed, "\n"))
			}
		})
	}

	// A push consumer on the run stream delivers where its creator says,
	// in the stream's account.
	t.Run("push consumer delivering into the bucket", func(t *testing.T) {
		before := readGatedState(t, admin.js, kv)
		req := fmt.Appendf(nil, `{"stream_name":"GATED_RUNS","config":{"name":"c1","deliver_subject":"$KV.GATED_VERDICTS.globex.%s",`+
			`"filter_subject":"gated.continuations.acme.run-1","ack_policy":"none","deliver_policy":"all"}}`, future)
		m, err := acme.nc.Request("$JS.API.CONSUMER.CREATE.GATED_RUNS.c1.gated.continuations.acme.run-1", req, 2*time.Second)
		if err == nil && !bytes.Contains(m.Data, []byte(`"error"`)) {
			t.Errorf("acme created a push consumer on GATED_RUNS: %s", m.Data)
		}
		if changed := before.diff(readGatedState(t, admin.js, kv)); len(changed) > 0 {
			t.Errorf("acme's consumer request changed gated's state:\n%s", strings.Join(changed, "\n"))
		}
	})

	t.Run("globex's verdicts stand", func(t *testing.T) {
		if v, found := isoStoredVerdict(t, kv, "globex", decided); !found || v.ProposalID != decided || v.Outcome != gated.OutcomeApproved {
			t.Errorf("globex.%s: %+v (found %v), want its approval", decided, v, found)
		}
		sub := globex.watchVerdict(t, "globex", future)
		defer sub.Unsubscribe()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := globex.publishProposal(ctx, "globex", "globex."+future, isoReadProposal("globex", future)); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("no verdict for globex.%s: %v", future, err)
		}
		var v gated.Verdict
		if err := json.Unmarshal(m.Data, &v); err != nil || v.Tenant != "globex" || v.ProposalID != future || v.Outcome != gated.OutcomeApproved {
			t.Errorf("verdict for globex.%s: %v %s", future, err, m.Data)
		}
	})
}
