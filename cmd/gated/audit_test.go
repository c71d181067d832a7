package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/store"
)

// auditFixture is a NATS server whose audit stream holds, for tenant
// acme, verdicts of alice (approved db_backup) and bob (rejected
// db_drop_table), and for beta one verdict, written by a keyed audit writer.
type auditFixture struct {
	url     string
	js      jetstream.JetStream
	keyFile string
}

func newAuditFixture(t *testing.T) *auditFixture {
	t.Helper()
	s := bustest.Server(t)
	_, js := bustest.Connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	keyFile := filepath.Join(t.TempDir(), "audit.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := audit.NewWriter(t.Context(), js, audit.Config{Key: key, Instance: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}()
	for i, v := range []struct{ tenant, operator, action, outcome string }{
		{"acme", "alice", "db_backup", "approved"},
		{"acme", "bob", "db_drop_table", "rejected"},
		{"beta", "carol", "host_list_services", "approved"},
		{"acme", "alice", "db_backup", "approved"},
	} {
		id := fmt.Sprint("p", i+1)
		data := fmt.Appendf(nil, `{"action":%q,"operator":%q}`, v.action, v.operator)
		tr := a.Trail()
		if err := tr.Record(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventReceived, Tenant: v.tenant, ProposalID: id, Data: data}); err != nil {
			t.Fatal(err)
		}
		// A record of its own, as before a review: the tests below count
		// records and sequences.
		if err := tr.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		verdict := fmt.Appendf(nil, `{"action":%q,"operator":%q,"outcome":%q}`, v.action, v.operator, v.outcome)
		if _, err := tr.Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: v.tenant, ProposalID: id, Data: verdict}); err != nil {
			t.Fatal(err)
		}
	}
	return &auditFixture{url: s.ClientURL(), js: js, keyFile: keyFile}
}

func lines(out string) []string {
	out = strings.TrimSpace(out)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func TestAuditVerifyCommand(t *testing.T) {
	fx := newAuditFixture(t)
	code, out, err := runGated(t, "audit", "verify", "--nats-url", fx.url, "--audit-key-file", fx.keyFile)
	if code != 0 {
		t.Fatalf("exit %d (%v)\n%s", code, err, out)
	}
	wantOutput(t, out, `8 records, 2 tenants; MACs checked with key [0-9a-f]{16}`, `(?m)^  acme n=6 seq=8 hash=[0-9a-f]{64}$`, `(?m)^  beta n=2 `, `no problem found`)

	// The JSON heads are anchors for a later run.
	code, out, _ = runGated(t, "audit", "verify", "--nats-url", fx.url, "--json")
	if code != 0 {
		t.Fatalf("verify --json: exit %d\n%s", code, out)
	}
	anchors := filepath.Join(t.TempDir(), "anchors.jsonl")
	if err := os.WriteFile(anchors, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	var summary struct {
		Type     string `json:"type"`
		Records  int    `json:"records"`
		Problems int    `json:"problems"`
	}
	if err := json.Unmarshal([]byte(lines(out)[0]), &summary); err != nil || summary.Type != "summary" || summary.Records != 8 {
		t.Fatalf("first JSON line %q: %+v, %v", lines(out)[0], summary, err)
	}
	if code, out, _ := runGated(t, "audit", "verify", "--nats-url", fx.url, "--anchors", anchors); code != 0 {
		t.Fatalf("verify --anchors of an intact stream: exit %d\n%s", code, out)
	}

	// A record written straight to the stream without the key.
	forged, err := audit.NewMsg(gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p9", Data: []byte(`{"outcome":"approved"}`)},
		audit.Chain{N: 7, Prev: "0000000000000000000000000000000000000000000000000000000000000000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := fx.js.PublishMsg(t.Context(), forged)
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = runGated(t, "audit", "verify", "--nats-url", fx.url, "--audit-key-file", fx.keyFile)
	if code != exitAuditProblems {
		t.Fatalf("a forged record: exit %d, want %d\n%s", code, exitAuditProblems, out)
	}
	wantOutput(t, out, fmt.Sprintf(`PROBLEM seq %d tenant acme forged: no MAC`, ack.Sequence),
		fmt.Sprintf(`PROBLEM seq %d tenant acme modified: the link does not match record n=6`, ack.Sequence), `2 problem\(s\) found`)
	// One tenant at a time: beta is untouched.
	if code, out, _ := runGated(t, "audit", "verify", "--nats-url", fx.url, "--audit-key-file", fx.keyFile, "--tenant", "beta"); code != 0 {
		t.Fatalf("verify --tenant beta: exit %d\n%s", code, out)
	}
}

// TestAuditVerifyChecksStoredVerdicts stores two verdicts: one that names
// its own verdict.decided record, and one whose audit_seq holds another
// proposal's record. verify reports the second by proposal id and
// sequence, and sums the check up; --skip-verdicts leaves it out.
func TestAuditVerifyChecksStoredVerdicts(t *testing.T) {
	fx := newAuditFixture(t)
	res, err := bus.Setup(t.Context(), fx.js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := audit.NewWriter(t.Context(), fx.js, audit.Config{Key: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	v := &gated.Verdict{V: 1, ProposalID: "p7", Tenant: "acme", Action: "db_backup", Kind: gated.KindAction,
		Outcome: gated.OutcomeRejected, Stage: gated.StagePolicy, Reason: "denied", DecidedAt: time.Now().UTC()}
	doc, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := a.Trail().Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p7", Data: doc})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	store := store.New(res.Verdicts)
	v.AuditSeq = seq
	if _, err := store.Create(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runGated(t, "audit", "verify", "--nats-url", fx.url, "--audit-key-file", fx.keyFile)
	if code != 0 {
		t.Fatalf("a verdict that names its record: exit %d\n%s", code, out)
	}
	wantOutput(t, out, `(?m)^1 stored verdicts checked against the stream: 1 name their verdict.decided record, 0 expired, 0 problem\(s\)$`)

	// p8's verdict names p2's record (seq 4).
	other := *v
	other.ProposalID, other.AuditSeq = "p8", 4
	if _, err := store.Create(t.Context(), &other); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runGated(t, "audit", "verify", "--nats-url", fx.url, "--audit-key-file", fx.keyFile)
	if code != exitAuditProblems {
		t.Fatalf("a verdict that names another's record: exit %d, want %d\n%s", code, exitAuditProblems, out)
	}
	wantOutput(t, out, `(?m)^PROBLEM seq 4 tenant acme proposal p8 modified: stored verdict acme.p8 names audit_seq 4, which holds the verdict.decided record of acme.p2$`,
		`(?m)^2 stored verdicts checked against the stream: 1 name their verdict.decided record, 0 expired, 1 problem\(s\)$`, `1 problem\(s\) found`)
	code, out, _ = runGated(t, "audit", "verify", "--nats-url", fx.url, "--json")
	var summary struct {
		Problems int                `json:"problems"`
		Verdicts audit.VerdictCheck `json:"verdicts"`
	}
	if err := json.Unmarshal([]byte(lines(out)[0]), &summary); err != nil || code != exitAuditProblems ||
		summary.Problems != 1 || summary.Verdicts != (audit.VerdictCheck{Verdicts: 2, Matched: 1, Problems: 1}) {
		t.Fatalf("verify --json: exit %d, summary %+v (%v)\n%s", code, summary, err, out)
	}
	if !strings.Contains(out, `"proposal_id":"p8"`) {
		t.Errorf("verify --json: the problem does not name p8:\n%s", out)
	}

	code, out, _ = runGated(t, "audit", "verify", "--nats-url", fx.url, "--skip-verdicts")
	if code != 0 || !strings.Contains(out, "stored verdicts not checked\n") {
		t.Fatalf("--skip-verdicts: exit %d\n%s", code, out)
	}
	// One tenant: beta has no verdict.
	if code, out, _ := runGated(t, "audit", "verify", "--nats-url", fx.url, "--tenant", "beta"); code != 0 || !strings.Contains(out, "0 stored verdicts checked") {
		t.Fatalf("verify --tenant beta: exit %d\n%s", code, out)
	}
}

func TestAuditTailCommand(t *testing.T) {
	fx := newAuditFixture(t)
	code, out, err := runGated(t, "audit", "tail", "--nats-url", fx.url, "--last", "3")
	if code != 0 || len(lines(out)) != 3 {
		t.Fatalf("tail --last 3: exit %d (%v)\n%s", code, err, out)
	}
	wantOutput(t, out, `(?m)^\S+ #8 acme verdict.decided p4 n=6 outcome="approved" action="db_backup" operator="alice"$`)

	code, out, _ = runGated(t, "audit", "tail", "--nats-url", fx.url, "--tenant", "beta", "--json")
	if code != 0 || len(lines(out)) != 2 {
		t.Fatalf("tail --tenant beta --json: exit %d\n%s", code, out)
	}
	for _, l := range lines(out) {
		var rec struct {
			Seq    uint64 `json:"seq"`
			Record struct {
				Tenant string          `json:"tenant"`
				Chain  audit.Chain     `json:"chain"`
				Data   json.RawMessage `json:"data"`
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Record.Tenant != "beta" || rec.Record.Chain.N == 0 {
			t.Fatalf("line %s: %+v, %v", l, rec, err)
		}
	}

	code, out, _ = runGated(t, "audit", "tail", "--nats-url", fx.url, "--since", "1h")
	if code != 0 || len(lines(out)) != 8 {
		t.Fatalf("tail --since 1h: exit %d\n%s", code, out)
	}
	if code, out, _ := runGated(t, "audit", "tail", "--nats-url", fx.url, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); code != 0 || out != "" {
		t.Fatalf("tail --since the future: exit %d\n%s", code, out)
	}
}

func TestAuditQueryCommand(t *testing.T) {
	fx := newAuditFixture(t)
	tests := []struct {
		note  string
		args  []string
		want  int
		match string
	}{
		{note: "rejected verdicts", args: []string{"--outcome", "rejected"}, want: 1, match: `p2 n=4 outcome="rejected"`},
		{note: "approved verdicts of acme", args: []string{"--outcome", "approved", "--tenant", "acme"}, want: 2},
		{note: "an operator", args: []string{"--operator", "alice"}, want: 4, match: `operator="alice"`},
		{note: "an action", args: []string{"--action", "host_list_services"}, want: 2, match: `beta`},
		{note: "a limit", args: []string{"--operator", "alice", "--limit", "1"}, want: 1, match: `#1 acme proposal.received p1`},
		{note: "nothing matches", args: []string{"--operator", "mallory"}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, append([]string{"audit", "query", "--nats-url", fx.url}, tc.args...)...)
			if code != 0 || len(lines(out)) != tc.want {
				t.Fatalf("exit %d (%v), want %d lines:\n%s", code, err, tc.want, out)
			}
			for _, l := range lines(out) {
				if !strings.Contains(l, tc.match) {
					t.Errorf("line %q does not contain %q", l, tc.match)
				}
			}
		})
	}
}

func TestAuditCommandErrors(t *testing.T) {
	noStream := bustest.Server(t)
	fx := newAuditFixture(t)
	tests := []struct {
		note string
		args []string
		code int
		msg  string
	}{
		{note: "bad since", args: []string{"audit", "tail", "--nats-url", fx.url, "--since", "yesterday"}, code: exitUsage, msg: `--since "yesterday"`},
		{note: "negative since", args: []string{"audit", "query", "--nats-url", fx.url, "--since", "-5m"}, code: exitUsage, msg: `--since`},
		{note: "bad tenant", args: []string{"audit", "tail", "--nats-url", fx.url, "--tenant", "Acme"}, code: exitUsage, msg: `--tenant "Acme"`},
		{note: "bad outcome", args: []string{"audit", "query", "--nats-url", fx.url, "--outcome", "ok"}, code: exitUsage, msg: `--outcome "ok"`},
		{note: "missing key file", args: []string{"audit", "verify", "--nats-url", fx.url, "--audit-key-file", filepath.Join(t.TempDir(), "none")}, code: exitUsage, msg: `--audit-key-file`},
		{note: "no audit stream", args: []string{"audit", "verify", "--nats-url", noStream.ClientURL()}, code: exitFailure, msg: `GATED_AUDIT does not exist`},
		{note: "no audit stream to tail", args: []string{"audit", "tail", "--nats-url", noStream.ClientURL()}, code: exitFailure, msg: `GATED_AUDIT does not exist`},
		{note: "no NATS", args: []string{"audit", "query", "--nats-url", "nats://127.0.0.1:1"}, code: exitFailure, msg: `connecting to NATS`},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			code, out, err := runGated(t, tc.args...)
			if code != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("exit %d, err %v; want exit %d naming %q\n%s", code, err, tc.code, tc.msg, out)
			}
		})
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "", want: time.Time{}},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "1.5d", want: now.Add(-36 * time.Hour)},
		{in: "2025-05-31T10:00:00Z", want: time.Date(2025, 5, 31, 10, 0, 0, 0, time.UTC)},
		{in: "2025-05-30", want: time.Date(2025, 5, 30, 0, 0, 0, 0, time.UTC)},
		{in: "0s", bad: true},
		{in: "-1h", bad: true},
		{in: "d", bad: true},
		{in: "soon", bad: true},
		{in: "NaNd", bad: true},
		{in: "Infd", bad: true},
		{in: "36501d", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSince(tc.in, now)
			if tc.bad != (err != nil) || !got.Equal(tc.want) {
				t.Fatalf("parseSince(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
}

// FuzzParseSince feeds parseSince arbitrary --since values: it must never
// panic, a duration never yields a time after now, and an error is a usage
// error.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"", "90m", "7d", "1.5d", "36500d", "36501d", "NaNd", "Infd", "1e-30d", "0x1p4d",
		"2025-05-31T10:00:00Z", "2025-05-30", "0s", "-1h", "d", "soon", "2562047h"} {
		f.Add(s)
	}
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSince(s, now)
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage {
				t.Fatalf("parseSince(%q): %v is not a usage error", s, err)
			}
			return
		}
		if s == "" {
			if !got.IsZero() {
				t.Fatalf("parseSince(\"\") = %v, want the zero time", got)
			}
			return
		}
		if _, isTime := parseTimeLayouts(s); isTime {
			return
		}
		if got.IsZero() || got.After(now) {
			t.Fatalf("parseSince(%q) = %v, after now %v", s, got, now)
		}
		if strings.HasSuffix(s, "d") && now.Sub(got) > 36500*24*time.Hour {
			t.Fatalf("parseSince(%q) = %v, more than 36500 days before now", s, got)
		}
	})
}

// parseTimeLayouts reports whether s is a time parseSince accepts, as
// opposed to a duration.
func parseTimeLayouts(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// TestAuditTailShowsInvalidMessages: tail --json prints a message that is
// not a record with its body readable: a zstd frame decompressed, text as
// it is, and anything else in base64.
func TestAuditTailShowsInvalidMessages(t *testing.T) {
	fx := newAuditFixture(t)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	forged := `{"v":2,"tenant":"gamma","chain":{"n":1,"prev":""},"events":[]}`
	binary := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xff, 0x00, 0x01}
	for _, body := range [][]byte{enc.EncodeAll([]byte(forged), nil), []byte("not a record"), binary} {
		if _, err := fx.js.Publish(t.Context(), "gated.audit.gamma.verdict.decided", body); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ := runGated(t, "audit", "tail", "--nats-url", fx.url, "--tenant", "gamma", "--json")
	if code != 0 || len(lines(out)) != 3 {
		t.Fatalf("tail --tenant gamma --json: exit %d\n%s", code, out)
	}
	var got []string
	for _, l := range lines(out) {
		var line struct {
			Invalid string `json:"invalid"`
			Data    string `json:"data"`
			Raw     []byte `json:"raw"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.Invalid == "" {
			t.Fatalf("line %s: %+v, %v", l, line, err)
		}
		got = append(got, fmt.Sprintf("%s|%x", line.Data, line.Raw))
	}
	want := []string{forged + "|", "not a record|", fmt.Sprintf("|%x", binary)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bodies %q, want %q", got, want)
	}
}

// TestServeAuditCompress: serve stores its audit records as zstd frames by
// default, and as their JSON with --audit-compress=false; both read back
// as the same kind of record.
func TestServeAuditCompress(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []byte
	}{
		{nil, []byte{0x28, 0xb5, 0x2f, 0xfd}},
		{[]string{"--audit-compress=false"}, []byte(`{"v":3,`)},
	} {
		s := bustest.Server(t)
		_, js := bustest.Connect(t, s)
		_, stop := startServe(t, s.ClientURL(), tc.args...)
		stop()
		stream, err := js.Stream(t.Context(), audit.Stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := stream.GetLastMsgForSubject(t.Context(), "gated.audit.>")
		if err != nil {
			t.Fatalf("serve %v recorded nothing: %v", tc.args, err)
		}
		if !bytes.HasPrefix(m.Data, tc.want) {
			t.Errorf("serve %v stored %q…, want it to begin %q", tc.args, m.Data[:min(len(m.Data), 8)], tc.want)
		}
		if _, err := audit.DecodeRecord(m.Subject, m.Header, m.Data); err != nil {
			t.Errorf("serve %v: %v", tc.args, err)
		}
	}
}
