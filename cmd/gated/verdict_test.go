package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/server"
)

func TestVerdictGet(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stored := &gated.Verdict{V: 1, ProposalID: "p-1", Tenant: "acme", Action: "host_restart_service", Kind: gated.KindAction,
		Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "no", DecidedAt: time.Now().UTC(), AuditSeq: 42}
	if _, err := store.New(res.Verdicts).Create(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "nats://" + ln.Addr().String()
	ln.Close()

	tests := []struct {
		note string
		args []string
		code int
		out  string // in stdout
		err  string // in the error
	}{
		{note: "found", args: []string{"acme", "p-1", "--nats-url", s.ClientURL()}, code: 0, out: `"audit_seq": 42`},
		{note: "not found", args: []string{"acme", "p-2", "--nats-url", s.ClientURL()}, code: 3, err: "tenant acme, proposal p-2"},
		{note: "other tenant", args: []string{"initech", "p-1", "--nats-url", s.ClientURL()}, code: 3, err: "tenant initech"},
		{note: "bad tenant", args: []string{"ACME", "p-1", "--nats-url", s.ClientURL()}, code: 2, err: "tenant"},
		{note: "dotted id", args: []string{"acme", "p.1", "--nats-url", s.ClientURL()}, code: 2, err: "id"},
		{note: "one argument", args: []string{"acme"}, code: 2, err: "TENANT and ID"},
		{note: "no NATS", args: []string{"acme", "p-1", "--nats-url", unreachable}, code: 1, err: "connecting to NATS"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, append([]string{"verdict", "get"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, tc.code, out)
			}
			if tc.out != "" && !strings.Contains(out, tc.out) {
				t.Fatalf("stdout lacks %q:\n%s", tc.out, out)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want it to say %q", err, tc.err)
			}
			if tc.code == 0 {
				var v gated.Verdict
				if err := json.Unmarshal([]byte(out), &v); err != nil || v.ProposalID != "p-1" || v.Outcome != gated.OutcomeRejected {
					t.Fatalf("stdout is not the stored verdict (%v):\n%s", err, out)
				}
			}
		})
	}
}

// runGatedStderr is runGated that also returns what the command wrote to
// standard error.
func runGatedStderr(t *testing.T, args ...string) (code int, stdout, stderr string, err error) {
	t.Helper()
	f, ferr := os.CreateTemp(t.TempDir(), "stderr")
	if ferr != nil {
		t.Fatal(ferr)
	}
	saved := os.Stderr
	os.Stderr = f
	code, stdout, err = runGated(t, args...)
	os.Stderr = saved
	_ = f.Close()
	data, ferr := os.ReadFile(f.Name())
	if ferr != nil {
		t.Fatal(ferr)
	}
	return code, stdout, string(data), err
}

// TestVerdictGetFromTheAuditTrail: a verdict whose key expired is read
// from the audit trail, with a note saying so; never another tenant's;
// and not from a trail that does not verify.
func TestVerdictGetFromTheAuditTrail(t *testing.T) {
	f := bustest.StartFleet(t, nil, bus.Config{})
	keyFile := filepath.Join(f.DataDir, server.AuditKeyName)
	url := f.NC.ConnectedUrl()
	approved := f.Propose(t, bustest.Proposal("p-old", "read", "host_list_services", ""))
	rejected := f.Propose(t, bustest.Proposal("p-old-2", "write", "host_restart_service", ""))
	if !approved.Approved || rejected.Approved {
		t.Fatalf("want an approval and a refusal, got %s and %s", approved.Outcome, rejected.Outcome)
	}

	expireKeys(t, f, "p-old", "p-old-2")

	for _, want := range []*gated.Verdict{approved, rejected} {
		// The trail does not keep a grant's token, only its id.
		want := *want
		want.Grant = ""
		for _, keys := range [][]string{{"--audit-key-file", keyFile}, {"--data-dir", f.DataDir}} {
			args := append([]string{"verdict", "get", "acme", want.ProposalID, "--nats-url", url}, keys...)
			code, out, note, err := runGatedStderr(t, args...)
			if code != 0 {
				t.Fatalf("%s: exit %d (%v)", want.ProposalID, code, err)
			}
			var got gated.Verdict
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("stdout is not a verdict: %v\n%s", err, out)
			}
			wantJSON, _ := json.Marshal(&want)
			gotJSON, _ := json.Marshal(&got)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("%s from the trail:\n%s\nwant the verdict given:\n%s", want.ProposalID, gotJSON, wantJSON)
			}
			if !strings.Contains(note, "read from the audit trail") {
				t.Errorf("%s (%v): the note on stderr is %q", want.ProposalID, keys, note)
			}
		}
	}

	// Another tenant's id is not found, through the trail either.
	if code, _, err := runGated(t, "verdict", "get", "initech", "p-old", "--nats-url", url, "--audit-key-file", keyFile); code != exitNotFound ||
		!strings.Contains(err.Error(), "nor in the audit trail") {
		t.Fatalf("another tenant's verdict: exit %d (%v), want %d", code, err, exitNotFound)
	}
	// --since bounds the records read.
	if code, _, err := runGated(t, "verdict", "get", "acme", "p-old", "--nats-url", url, "--audit-key-file", keyFile,
		"--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); code != exitNotFound || !strings.Contains(err.Error(), "nor in the audit trail since") {
		t.Fatalf("a range without the record: exit %d (%v), want %d", code, err, exitNotFound)
	}
	// Without the audit key the trail is not read.
	if code, _, err := runGated(t, "verdict", "get", "acme", "p-old", "--nats-url", url, "--data-dir", t.TempDir()); code != exitNotFound ||
		!strings.Contains(err.Error(), "give --audit-key-file") {
		t.Fatalf("without a key: exit %d (%v), want %d", code, err, exitNotFound)
	}

	// Forged records on acme's chain: an approval of p-forged MACed with
	// another key, and one of p-unmaced without a MAC, each on the
	// chain's link as a writer would put it, and gated's records after
	// them.
	forge(t, f, approved, "p-forged", []byte("not gated's key, 32 bytes long!!"))
	forge(t, f, approved, "p-unmaced", nil)
	for _, id := range []string{"p-forged", "p-unmaced"} {
		code, out, err := runGated(t, "verdict", "get", "acme", id, "--nats-url", url, "--audit-key-file", keyFile)
		if code != exitFailure || err == nil || !strings.Contains(err.Error(), "does not verify") || out != "" {
			t.Fatalf("a forged record of %s: exit %d (%v), stdout %q; want it refused", id, code, err, out)
		}
	}
}

// forge appends to acme's chain a record of an approval of id, a copy of
// v, MACed with key (none when nil), and has gated decide a proposal
// after it.
func forge(t *testing.T, f *bustest.Fleet, v *gated.Verdict, id string, key []byte) {
	t.Helper()
	head, err := f.Resources.Audit.GetLastMsgForSubject(t.Context(), wire.AuditSubjectPrefix+"acme.>")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := audit.DecodeRecord(head.Subject, head.Header, head.Data)
	if err != nil {
		t.Fatal(err)
	}
	forgedVerdict := *v
	forgedVerdict.ProposalID, forgedVerdict.AuditSeq, forgedVerdict.Grant = id, 0, ""
	data, _ := json.Marshal(&forgedVerdict)
	sum := sha256.Sum256(head.Data)
	msg, err := audit.NewRecordMsg([]gated.AuditEvent{{V: gated.SchemaVersion, Event: gated.EventVerdict, Tenant: "acme", ProposalID: id,
		At: time.Now().UTC(), Data: data}}, audit.Chain{N: rec.Chain.N + 1, Prev: hex.EncodeToString(sum[:])}, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	f.Propose(t, bustest.Proposal(id+"-after", "read", "host_list_services", ""))
}

// expireKeys has the verdict bucket keep its keys a second until the keys
// of acme's ids are gone, then the default again.
func expireKeys(t *testing.T, f *bustest.Fleet, ids ...string) {
	t.Helper()
	setTTL := func(ttl time.Duration) {
		t.Helper()
		if _, err := f.JS.UpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: wire.VerdictBucket, History: 1, TTL: ttl,
			Storage: jetstream.FileStorage, Compression: true}); err != nil {
			t.Fatal(err)
		}
	}
	setTTL(time.Second)
	for _, id := range ids {
		for {
			if _, err := f.Resources.Verdicts.Get(t.Context(), "acme."+id); errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	setTTL(bus.DefaultVerdictTTL)
}

// TestProposalSentAgainAfterTheVerdictTTL: a copy of a proposal sent
// after its key expired (and after the duplicate window) is decided
// afresh, as docs/NATS.md says: a second verdict.decided record, stored
// under the key again; the audit trail then answers with the later one.
func TestProposalSentAgainAfterTheVerdictTTL(t *testing.T) {
	f := bustest.StartFleet(t, nil, bus.Config{DuplicateWindow: time.Second})
	keyFile := filepath.Join(f.DataDir, server.AuditKeyName)
	url := f.NC.ConnectedUrl()
	data := bustest.Proposal("p-again", "read", "host_list_services", "")
	first := f.Propose(t, data)
	// Within the TTL a copy is answered with the stored verdict.
	if again := f.Propose(t, data); again.AuditSeq != first.AuditSeq {
		t.Fatalf("a copy within the TTL got audit_seq %d, want the stored verdict's %d", again.AuditSeq, first.AuditSeq)
	}
	expireKeys(t, f, "p-again")
	second := f.Propose(t, data)
	if second.AuditSeq == first.AuditSeq || second.Outcome != first.Outcome || second.ProposalSHA256 != first.ProposalSHA256 {
		t.Fatalf("a copy after the TTL: audit_seq %d, outcome %s; want a fresh decision after %d, outcome %s",
			second.AuditSeq, second.Outcome, first.AuditSeq, first.Outcome)
	}
	events := bustest.AuditEvents(t, f.Resources.Audit, "acme", "p-again")
	decided := 0
	for _, e := range events {
		if e == gated.EventVerdict {
			decided++
		}
	}
	if decided != 2 {
		t.Fatalf("the trail of p-again holds %d verdict.decided records, want 2: %v", decided, events)
	}
	for _, fromTrail := range []bool{false, true} {
		if fromTrail {
			expireKeys(t, f, "p-again")
		}
		code, out, note, err := runGatedStderr(t, "verdict", "get", "acme", "p-again", "--nats-url", url, "--audit-key-file", keyFile)
		var got gated.Verdict
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.AuditSeq != second.AuditSeq ||
			strings.Contains(note, "audit trail") != fromTrail {
			t.Fatalf("verdict get (from the trail %v): exit %d (%v), audit_seq %d, note %q; want the later verdict, %d",
				fromTrail, code, err, got.AuditSeq, note, second.AuditSeq)
		}
	}
}
