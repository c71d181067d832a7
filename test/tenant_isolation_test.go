package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
)

// tenantsConf is the nats-server configuration docs/NATS.md shows. The
// test runs the server from this very file, changing only the listen
// address and the store directory, so the documented permissions are the
// tested ones.
const tenantsConf = "../docs/examples/nats-tenants.conf"

// The file is reproduced in docs/NATS.md word for word.
func TestTenantConfigIsDocumented(t *testing.T) {
	conf, err := os.ReadFile(tenantsConf)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/NATS.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, conf) {
		t.Fatalf("docs/NATS.md does not reproduce %s as it is: copy the file into its conf block", tenantsConf)
	}
}

// startTenantsServer starts nats-server from tenantsConf with fresh
// passwords in the environment variables the file names, and returns its
// URL and the passwords by user.
func TestTenantIsolation(t *testing.T) {
	url, pw := startTenantsServer(t)
	// gated also notifies a webhook of every verdict: its notifier reads
	// and acknowledges the audit stream under the same permissions.
	var hookHits atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hookHits.Add(1) }))
	defer hook.Close()
	notifyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(notifyDir, "hook.secret"), []byte("tenant-isolation-hook-secret-0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	notifyFile := filepath.Join(notifyDir, "notify.yaml")
	if err := os.WriteFile(notifyFile, []byte("sinks:\n  - name: hook\n    url: "+hook.URL+
		"\n    events: [decided]\n    secret_file: hook.secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// gated logs in as its service user; the password comes from
	// GATED_NATS_PASSWORD, set by startTenantsServer.
	g := startGated(t, "--nats-url", url, "--nats-user", "gated", "--notify", notifyFile)
	// Last: gated itself never ran into the documented permissions. It
	// logs every operation the server refuses it.
	defer func() {
		if logs := g.logs.String(); strings.Contains(logs, "Permissions Violation") {
			t.Errorf("the documented permissions refused gated something it needs:\n%s", logs)
		}
	}()

	admin := isoConnect(t, url, "gated", pw["gated"], "")
	acme := isoConnect(t, url, "acme", pw["acme"], "_INBOX_acme")
	globex := isoConnect(t, url, "globex", pw["globex"], "_INBOX_globex")
	kv, err := admin.js.KeyValue(t.Context(), "GATED_VERDICTS")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("acme decides its own proposals", func(t *testing.T) {
		for _, tc := range []struct {
			id   string
			args []string
		}{
			{id: "own-1", args: []string{"propose", "-f", "-", "--wait", "30s"}},
			{id: "own-2", args: []string{"propose", "-f", "-", "--wait", "30s", "--via-service"}},
		} {
			code, out, stderr := gatedAs(t, url, "acme", pw["acme"], isoReadProposal("acme", tc.id), tc.args...)
			if code != 0 {
				t.Fatalf("gated %s as acme: exit %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, out, stderr)
			}
			var v gated.Verdict
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("stdout is not a verdict: %v\n%s", err, out)
			}
			if v.Tenant != "acme" || v.ProposalID != tc.id || v.Outcome != gated.OutcomeApproved {
				t.Fatalf("verdict %s.%s %s (%s), want acme.%s approved", v.Tenant, v.ProposalID, v.Outcome, v.Reason, tc.id)
			}
		}
		// Both verdicts reach the webhook; the notifier acknowledges each
		// record after it (any refusal shows in gated's logs, checked last).
		deadline := time.Now().Add(30 * time.Second)
		for hookHits.Load() < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the webhook got %d of the 2 verdicts' notifications", hookHits.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The stored verdict, read the only way acme may: a direct get of
		// its own key, with the CLI and with a bare request.
		code, out, stderr := gatedAs(t, url, "acme", pw["acme"], nil, "verdict", "get", "acme", "own-1")
		if code != 0 || !strings.Contains(out, `"proposal_id": "own-1"`) {
			t.Fatalf("gated verdict get as acme: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
		}
		m, err := acme.nc.Request("$JS.API.DIRECT.GET.KV_GATED_VERDICTS.$KV.GATED_VERDICTS.acme.own-1", nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var v gated.Verdict
		if err := json.Unmarshal(m.Data, &v); err != nil || v.ProposalID != "own-1" {
			t.Fatalf("direct get of acme.own-1: %v %s %q", err, m.Header, m.Data)
		}
	})

	t.Run("acme uses its own grants and reports their outcomes", func(t *testing.T) {
		v := acme.propose(t, "grant-own-1")
		if _, err := acme.nc.Request("gated.grants.keys", nil, 10*time.Second); err != nil {
			t.Fatalf("acme fetching the grant keys: %v", err)
		}
		use := isoUse(t, acme, "acme", v.Grant)
		if !use.OK {
			t.Fatalf("acme using its own grant: %+v", use)
		}
		if err := isoReport(t, acme, "acme", "grant-own-1", use.GID, "succeeded"); err != nil {
			t.Fatalf("acme reporting its own outcome: %v", err)
		}
		isoWaitEvent(t, admin.js, "acme", "grant-own-1", "grant.outcome")
	})

	t.Run("acme cannot use or report for globex's grants", func(t *testing.T) {
		gv := globex.propose(t, "grant-globex-1")
		body, _ := json.Marshal(map[string]string{"grant": gv.Grant, "by": "acme"})
		acme.deniedRequest(t, "gated.grants.globex.use", body)
		if err := isoReport(t, acme, "globex", "grant-globex-1", "", "succeeded"); err == nil {
			t.Fatal("the stream acknowledged acme's outcome report on globex's subject")
		}
		acme.wantDenied(t, "Publish", "gated.outcomes.globex.grant-globex-1")
		// globex's grant through acme's own subject: gated refuses it.
		if use := isoUse(t, acme, "acme", gv.Grant); use.OK || !strings.Contains(use.Error, "tenant") {
			t.Fatalf("acme using globex's grant on its own subject: %+v", use)
		}
		grants, err := admin.js.KeyValue(t.Context(), "GATED_GRANTS")
		if err != nil {
			t.Fatal(err)
		}
		// A grant has a record once it is used: acme's attempts wrote none.
		if e, err := grants.Get(t.Context(), "globex.grant-globex-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("globex's grant record after acme's attempts: %v %v", e, err)
		}
	})

	t.Run("acme watches the status of its own proposals", func(t *testing.T) {
		code, out, stderr := gatedAs(t, url, "acme", pw["acme"], isoReadProposal("acme", "own-watched-1"),
			"propose", "-f", "-", "--wait", "30s", "--watch", "--json")
		if code != 0 {
			t.Fatalf("gated propose --watch as acme: exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var stages []gated.StatusStage
		for _, line := range lines[:len(lines)-1] {
			st, err := gated.DecodeStatus([]byte(line))
			if err != nil || st.Tenant != "acme" || st.ID != "own-watched-1" {
				t.Fatalf("status line %q: %v", line, err)
			}
			stages = append(stages, st.Stage)
		}
		if want := []gated.StatusStage{gated.StatusReceived, gated.StatusPolicyDecided, gated.StatusDecided}; !slices.Equal(stages, want) {
			t.Fatalf("acme saw stages %v, want %v\nstderr: %s", stages, want, stderr)
		}
	})

	// globexID is a proposal of globex's, decided while acme listens.
	const globexID = "globex-secret-1"
	t.Run("acme cannot receive globex's verdicts or status", func(t *testing.T) {
		var subs []*nats.Subscription
		for _, subject := range []string{
			"gated.verdicts.globex.>", "gated.verdicts.globex." + globexID, "gated.verdicts.>", "gated.verdicts.*.*",
			"gated.status.globex.>", "gated.status.globex." + globexID, "gated.status.>", "gated.status.*.*",
			"_INBOX_globex.>", "_INBOX.>", ">",
		} {
			subs = append(subs, acme.deniedSub(t, subject))
		}
		v := globex.propose(t, globexID)
		if v.Tenant != "globex" || v.Outcome != gated.OutcomeApproved {
			t.Fatalf("globex's verdict: %s.%s %s (%s)", v.Tenant, v.ProposalID, v.Outcome, v.Reason)
		}
		if err := acme.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, sub := range subs {
			if n, _, _ := sub.Pending(); n != 0 {
				t.Errorf("acme's subscription to %s received %d messages", sub.Subject, n)
			}
		}
	})

	t.Run("acme cannot read globex's stored verdict", func(t *testing.T) {
		if _, found := isoStoredVerdict(t, kv, "globex", globexID); !found {
			t.Fatal("globex's verdict is not stored: nothing to protect")
		}
		key := "$KV.GATED_VERDICTS.globex." + globexID
		lastBySubject, _ := json.Marshal(map[string]string{"last_by_subj": key})
		subjectsFilter, _ := json.Marshal(map[string]string{"subjects_filter": "$KV.GATED_VERDICTS.globex.>"})

		// gated's own user reads it through the general message get and
		// learns the keys through the stream info: the requests are right,
		// and they are what a tenant must not be allowed.
		m, err := admin.nc.Request("$JS.API.STREAM.MSG.GET.KV_GATED_VERDICTS", lastBySubject, 5*time.Second)
		if err != nil || !bytes.Contains(m.Data, []byte(`"message"`)) {
			t.Fatalf("control: gated's own message get: %v %s", err, m.Data)
		}
		m, err = admin.nc.Request("$JS.API.STREAM.INFO.KV_GATED_VERDICTS", subjectsFilter, 5*time.Second)
		if err != nil || !bytes.Contains(m.Data, []byte(key)) {
			t.Fatalf("control: gated's own stream info does not list %s: %v %s", key, err, m.Data)
		}

		acme.deniedRequest(t, "$JS.API.DIRECT.GET.KV_GATED_VERDICTS."+key, nil)
		acme.deniedRequest(t, "$JS.API.DIRECT.GET.KV_GATED_VERDICTS", lastBySubject)
		acme.deniedRequest(t, "$JS.API.STREAM.MSG.GET.KV_GATED_VERDICTS", lastBySubject)
		acme.deniedRequest(t, "$JS.API.STREAM.INFO.KV_GATED_VERDICTS", subjectsFilter)

		// Nor a consumer on the bucket (a watch), nor writing a key.
		acme.deniedRequest(t, "$JS.API.CONSUMER.CREATE.KV_GATED_VERDICTS", []byte(`{"stream_name":"KV_GATED_VERDICTS",`+
			`"config":{"ack_policy":"none","deliver_policy":"last_per_subject","filter_subject":"$KV.GATED_VERDICTS.globex.>"}}`))
		acme.deniedRequest(t, key, []byte(`{"outcome":"approved"}`))

		// Hence the KeyValue API, which starts with a stream info, is
		// closed to tenants altogether.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if _, err := acme.js.KeyValue(ctx, "GATED_VERDICTS"); err == nil {
			t.Error("acme opened the verdict bucket through the KeyValue API")
		}
		code, out, _ := gatedAs(t, url, "acme", pw["acme"], nil, "verdict", "get", "globex", globexID, "--timeout", "2s")
		if code == 0 || strings.Contains(out, globexID) {
			t.Errorf("gated verdict get globex as acme: exit %d\n%s", code, out)
		}
	})

	t.Run("acme cannot propose as globex", func(t *testing.T) {
		const id = "forged-1"
		watch := globex.watchVerdict(t, "globex", id)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := acme.publishProposal(ctx, "globex", "globex."+id, isoReadProposal("globex", id))
		cancel()
		if err == nil {
			t.Fatal("the stream acknowledged acme's proposal on globex's subject")
		}
		acme.wantDenied(t, "Publish", "gated.proposals.globex.host_list_services")
		acme.deniedRequest(t, "gated.review.globex", isoReadProposal("globex", id))
		acme.deniedRequest(t, "gated.review", isoReadProposal("globex", id))
		// Nor take globex's proposals off the work queue unanswered.
		acme.deniedRequest(t, "$JS.ACK.GATED_PROPOSALS.gated.1.1.1.1.0", []byte("+TERM"))

		// A proposal acme may send is decided after whatever reached the
		// stream before it; then the forged one is nowhere.
		if v := acme.propose(t, "after-forged-1"); v.Outcome != gated.OutcomeApproved {
			t.Fatalf("acme's own proposal: %s (%s)", v.Outcome, v.Reason)
		}
		if v, found := isoStoredVerdict(t, kv, "globex", id); found {
			t.Errorf("a verdict is stored for globex.%s: %+v", id, v)
		}
		if isoAuditedIDs(t, admin.js, "globex")[id] {
			t.Errorf("globex's audit trail has events for %s", id)
		}
		if n, _, _ := watch.Pending(); n != 0 {
			t.Errorf("globex received %d messages for the forged proposal", n)
		}
	})

	t.Run("a payload naming globex on acme's subject is invalid for acme", func(t *testing.T) {
		const id = "claims-globex-1"
		own := acme.watchVerdict(t, "acme", id)
		other := globex.watchVerdict(t, "globex", id)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		// The message id claims globex too, as a careless or hostile
		// client would set it from the payload.
		if err := acme.publishProposal(ctx, "acme", "globex."+id, isoReadProposal("globex", id)); err != nil {
			t.Fatalf("acme publishing on its own subject: %v", err)
		}
		v := isoNextVerdict(t, own)
		if v.Outcome != gated.OutcomeInvalid || v.Stage != gated.StageValidation || v.Tenant != "acme" || v.ProposalID != id {
			t.Fatalf("verdict %s.%s %s at %s (%s), want acme.%s invalid at validation", v.Tenant, v.ProposalID, v.Outcome, v.Stage, v.Reason, id)
		}
		if !strings.Contains(v.Reason, "tenant") {
			t.Errorf("reason %q does not name the tenant field", v.Reason)
		}
		if stored, found := isoStoredVerdict(t, kv, "acme", id); !found || stored.Outcome != gated.OutcomeInvalid {
			t.Errorf("stored verdict under acme.%s: %+v (found %v), want the invalid one", id, stored, found)
		}
		if stored, found := isoStoredVerdict(t, kv, "globex", id); found {
			t.Errorf("a verdict is stored for globex.%s: %+v", id, stored)
		}
		if isoAuditedIDs(t, admin.js, "globex")[id] {
			t.Errorf("globex's audit trail has events for %s", id)
		}
		if !isoAuditedIDs(t, admin.js, "acme")[id] {
			t.Errorf("acme's audit trail has no event for %s", id)
		}
		if n, _, _ := other.Pending(); n != 0 {
			t.Errorf("globex received %d messages on its verdict subject for %s", n, id)
		}
	})

	// NATS does not restrict reply subjects, but acme's resolve in acme's
	// account: pointing the stream's acknowledgement, or the review
	// service's answer, at globex's verdict subject sends it to a subject
	// of acme's own that nobody of globex's hears.
	t.Run("a reply subject cannot forge a verdict for globex", func(t *testing.T) {
		const id = "reflected-1"
		other := globex.watchVerdict(t, "globex", id)
		ack := nats.NewMsg("gated.proposals.acme.host_list_services")
		ack.Reply = "gated.verdicts.globex." + id
		ack.Data = isoReadProposal("acme", "reflect-ack-1")
		ack.Header.Set(jetstream.MsgIDHeader, "acme.reflect-ack-1")
		review := &nats.Msg{Subject: "gated.review.acme", Reply: "gated.verdicts.globex." + id, Data: isoReadProposal("acme", "reflect-review-1")}
		for _, m := range []*nats.Msg{ack, review} {
			if err := acme.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		// Both are decided, so the acknowledgement and the service's
		// answer went out before the look-ups below succeed. The import
		// hands the review service a reply subject of gated's own
		// account's response mapping, which it answers.
		waitStored(t, kv, "acme", "reflect-ack-1")
		waitStored(t, kv, "acme", "reflect-review-1")
		time.Sleep(200 * time.Millisecond)
		for {
			m, err := other.NextMsg(100 * time.Millisecond)
			if err != nil {
				break
			}
			var v gated.Verdict
			if json.Unmarshal(m.Data, &v) == nil && (v.Tenant == "globex" || v.ProposalID == id) {
				t.Errorf("acme made a message naming globex.%s arrive on globex's verdict subject: %s", id, m.Data)
			}
		}
	})
}

// isoUse uses grant on tenant's use subject as c.
