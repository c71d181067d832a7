package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
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
func startTenantsServer(t *testing.T) (string, map[string]string) {
	t.Helper()
	pw := map[string]string{}
	for user, env := range map[string]string{"gated": "GATED_NATS_PASSWORD", "acme": "ACME_NATS_PASSWORD", "globex": "GLOBEX_NATS_PASSWORD",
		"acme-ops-agent": "ACME_OPS_AGENT_NATS_PASSWORD", "acme-db-agent": "ACME_DB_AGENT_NATS_PASSWORD"} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		pw[user] = hex.EncodeToString(b)
		// GATED_NATS_PASSWORD is also what `gated serve` reads for
		// --nats-password: the gated process started below inherits it.
		t.Setenv(env, pw[user])
	}
	opts, err := server.ProcessConfigFile(tenantsConf)
	if err != nil {
		t.Fatalf("%s: %v", tenantsConf, err)
	}
	opts.StoreDir = t.TempDir()
	s := bustest.ServerWithOptions(t, opts)
	return s.ClientURL(), pw
}

// tenantConn is one NATS user's connection that records the errors the
// server sends it, such as permissions violations.
type tenantConn struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream

	mu   sync.Mutex
	errs []error
}

func isoConnect(t *testing.T, url, user, password, inboxPrefix string) *tenantConn {
	t.Helper()
	c := &tenantConn{user: user}
	opts := []nats.Option{
		nats.Name("isolation-test-" + user),
		nats.UserInfo(user, password),
		nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}),
	}
	if inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(inboxPrefix))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connecting as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// wantDenied waits for the server's permissions violation for op
// ("Publish" or "Subscription") on subject.
func (c *tenantConn) wantDenied(t *testing.T, op, subject string) {
	t.Helper()
	want := fmt.Sprintf("Permissions Violation for %s to %q", op, subject)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		for _, err := range c.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q from the server", c.user, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deniedRequest sends a request that the user's permissions must refuse:
// no reply, and a publish violation naming the subject.
func (c *tenantConn) deniedRequest(t *testing.T, subject string, body []byte) {
	t.Helper()
	m, err := c.nc.Request(subject, body, time.Second)
	if err == nil {
		t.Fatalf("%s: request on %s was answered: %s %q", c.user, subject, m.Header, m.Data)
	}
	c.wantDenied(t, "Publish", subject)
}

// deniedSub subscribes where the user may not and returns the
// subscription, once the server has refused it.
func (c *tenantConn) deniedSub(t *testing.T, subject string) *nats.Subscription {
	t.Helper()
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("%s: subscription to %s: %v, want a permissions violation", c.user, subject, err)
	}
	c.wantDenied(t, "Subscription", subject)
	return sub
}

// isoReadProposal is a proposal the default policy approves at once.
func isoReadProposal(tenant, id string) []byte {
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":%q,"action":"host_list_services","class":"read",`+
		`"target":{"device_id":7},"reason":"tenant isolation test","operator":{"id":"alice","roles":["sre"]},`+
		`"requested_by":{"agent":"ops-agent","session":"s-1"}}`, id, tenant)
}

// watchVerdict subscribes to the verdict subject of tenant and id.
func (c *tenantConn) watchVerdict(t *testing.T, tenant, id string) *nats.Subscription {
	t.Helper()
	sub, err := c.nc.SubscribeSync(wire.VerdictSubject(tenant, id))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// publishProposal publishes data on gated.proposals.<subjectTenant>.<action>
// with the Nats-Msg-Id msgID, as a fleet does, and returns the stream's
// acknowledgement error.
func (c *tenantConn) publishProposal(ctx context.Context, subjectTenant, msgID string, data []byte) error {
	msg := nats.NewMsg(wire.ProposalSubject(subjectTenant, "host_list_services"))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	_, err := c.js.PublishMsg(ctx, msg)
	return err
}

// isoNextVerdict waits for a verdict on sub.
func isoNextVerdict(t *testing.T, sub *nats.Subscription) gated.Verdict {
	t.Helper()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no verdict on %s: %v", sub.Subject, err)
	}
	var v gated.Verdict
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatalf("verdict on %s is not JSON: %v", sub.Subject, err)
	}
	return v
}

// propose publishes a read proposal as c's own tenant and returns its
// verdict.
func (c *tenantConn) propose(t *testing.T, id string) gated.Verdict {
	t.Helper()
	sub := c.watchVerdict(t, c.user, id)
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.publishProposal(ctx, c.user, c.user+"."+id, isoReadProposal(c.user, id)); err != nil {
		t.Fatalf("%s publishing its own proposal %s: %v", c.user, id, err)
	}
	return isoNextVerdict(t, sub)
}

// isoStoredVerdict reads key tenant.id of the verdict bucket as gated's own
// user; found is false when there is none.
func isoStoredVerdict(t *testing.T, kv jetstream.KeyValue, tenant, id string) (v gated.Verdict, found bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, tenant+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return v, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		t.Fatal(err)
	}
	return v, true
}

// isoAuditedIDs returns the proposal ids of the audit events filed under
// tenant, read as gated's own user.
func isoAuditedIDs(t *testing.T, js jetstream.JetStream, tenant string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ids := map[string]bool{}
	for _, rec := range tenantAudit(ctx, t, js, tenant) {
		ids[rec.ev.ProposalID] = true
	}
	return ids
}

// gatedAs runs a gated client command as tenant user, with its password
// in GATED_NATS_PASSWORD and its own inbox prefix, and returns its exit
// code, stdout and stderr.
func gatedAs(t *testing.T, url, user, password string, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	args = append(args, "--nats-url", url, "--nats-user", user, "--nats-inbox-prefix", "_INBOX_"+user)
	cmd := exec.Command(gatedBin, args...)
	cmd.Env = append(os.Environ(), "GATED_NATS_PASSWORD="+password)
	cmd.Stdin = bytes.NewReader(stdin)
	return run(t, cmd)
}

// TestTenantIsolation runs the real gated against nats-server configured
// as docs/NATS.md says, and checks that tenant acme's credentials decide
// acme's proposals and nothing of globex's.
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
		e, err := grants.Get(t.Context(), "globex.grant-globex-1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(e.Value()), `"state":"issued"`) {
			t.Fatalf("globex's grant record after acme's attempts: %s", e.Value())
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
func isoUse(t *testing.T, c *tenantConn, tenant, grant string) (reply struct {
	OK    bool   `json:"ok"`
	GID   string `json:"gid"`
	Error string `json:"error"`
}) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"grant": grant, "by": c.user})
	m, err := c.nc.Request("gated.grants."+tenant+".use", body, 10*time.Second)
	if err != nil {
		t.Fatalf("%s using a grant on %s's subject: %v", c.user, tenant, err)
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		t.Fatalf("use reply %q: %v", m.Data, err)
	}
	return reply
}

// isoReport publishes an outcome report of tenant's proposal id as c,
// through JetStream, and returns the publish's error.
func isoReport(t *testing.T, c *tenantConn, tenant, id, gid, status string) error {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"v": 1, "gid": gid, "tenant": tenant, "proposal_id": id,
		"status": status, "at": time.Now().UTC().Format(time.RFC3339)})
	msg := nats.NewMsg("gated.outcomes." + tenant + "." + id)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, tenant+"."+id+"."+status)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err := c.js.PublishMsg(ctx, msg)
	return err
}

// isoWaitEvent waits for event on tenant's proposal id in the audit
// stream, read as gated's user.
func isoWaitEvent(t *testing.T, js jetstream.JetStream, tenant, id, event string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		recs := tenantAudit(ctx, t, js, tenant)
		cancel()
		for _, rec := range recs {
			if rec.ev.ProposalID == id && rec.ev.Event == event {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s audited for %s.%s", event, tenant, id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
