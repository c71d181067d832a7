package test

// The NATS connections of the tenant isolation tests: one per tenant user, each
// with the checks of what it may and may not publish, subscribe to and request.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

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
	s := natstest.ServerWithOptions(t, opts)
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
