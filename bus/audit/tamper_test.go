package audit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/engine/wire"
)

// tamperStream is a stream whose tenant acme has records n=1..3 and beta
// one, written by a keyed Writer, for a test to tamper with.
type tamperStream struct {
	js    jetstream.JetStream
	audit jetstream.Stream
	// head is acme's record n=3.
	head *jetstream.RawStreamMsg
	// form is how next builds records.
	form recordForm
}

// recordForm is a way gated has written records.
type recordForm int

const (
	// formV1 is a record of version 1, one event, its JSON.
	formV1 recordForm = iota
	// formV2 is a legacy record of version 2, its JSON, as gated wrote
	// it before version 3.
	formV2
	// formV3 is a record of version 3, its JSON, as a Writer configured
	// Uncompressed writes it.
	formV3
	// formV3Compressed is a record of version 3 compressed, as a Writer
	// writes it by default.
	formV3Compressed
)

func (f recordForm) String() string {
	return [...]string{"v1", "v2", "v3", "v3-compressed"}[f]
}

// newTamperStream writes the records with a Writer that compresses them
// for formV3Compressed, and one that does not otherwise.
func newTamperStream(t *testing.T, form recordForm) *tamperStream {
	t.Helper()
	res, js := setupAudit(t)
	a := bustest.AuditWriter(t, js, audit.Config{Key: testKey, Uncompressed: form != formV3Compressed})
	for i := range 3 {
		if _, err := a.Trail().Seal(t.Context(), verdictEvent("acme", fmt.Sprint("p", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Trail().Seal(t.Context(), verdictEvent("beta", "b1")); err != nil {
		t.Fatal(err)
	}
	head, err := res.Audit.GetLastMsgForSubject(t.Context(), wire.AuditSubjectPrefix+"acme.>")
	if err != nil {
		t.Fatal(err)
	}
	return &tamperStream{js: js, audit: res.Audit, head: head, form: form}
}

// publish writes msg straight to the stream, as anyone with publish
// rights on the audit subjects could, and returns its sequence.
func (s *tamperStream) publish(t *testing.T, msg *nats.Msg) uint64 {
	t.Helper()
	ack, err := s.js.PublishMsg(t.Context(), msg)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// next builds acme's record n linked to prev.
func (s *tamperStream) next(t *testing.T, n uint64, prev string, key []byte) *nats.Msg {
	t.Helper()
	if s.form != formV1 {
		return s.decision(t, n, prev, key)
	}
	return auditMsg(t, verdictEvent("acme", fmt.Sprint("forged", n)), audit.Chain{N: n, Prev: prev}, key)
}

// decision builds acme's record n linked to prev as gated writes a
// decision by the policy alone: one version-2 record of its arrival, the
// policy's decision and the verdict.
func (s *tamperStream) decision(t *testing.T, n uint64, prev string, key []byte) *nats.Msg {
	t.Helper()
	build := audit.NewRecordMsg
	switch s.form {
	case formV3Compressed:
		build = audit.NewCompressedRecordMsg
	case formV2:
		build = func(evs []gated.AuditEvent, c audit.Chain, key []byte) (*nats.Msg, error) {
			return audit.NewLegacyRecordMsg(evs, c, key, false)
		}
	}
	m, err := build(decisionEvents("acme", fmt.Sprint("forged", n)), audit.Chain{N: n, Prev: prev}, key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// decisionEvents are the events of a decision by the policy alone, as
// the engine records them.
func decisionEvents(tenant, id string) []gated.AuditEvent {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(name, data string) gated.AuditEvent {
		at = at.Add(time.Millisecond)
		return gated.AuditEvent{V: 1, Event: name, Tenant: tenant, ProposalID: id, At: at, Instance: "test", PolicyRevision: "sha256:abc", Data: []byte(data)}
	}
	return []gated.AuditEvent{
		ev(gated.EventReceived, `{"action":"host_restart_service","operator":"alice","delivery":1,"bytes":9,"sha256":"`+hexSHA256([]byte(id))+`","subject":"gated.proposals.acme.host_restart_service"}`),
		ev(gated.EventPolicyDecided, `{"action":"host_restart_service","operator":"alice","delivery":1,"policy_eval_us":7,"denied_tools":[],"denies":[{"rule":"no_skip_review","message":"no"}],"eval_us":7,"review":{"required":true,"rule":""},"reviewer_tools":[],"run":null,"sop":""}`),
		ev(gated.EventVerdict, `{"operator":"alice","delivery":1,"policy_eval_us":7,"v":1,"proposal_id":"`+id+`","tenant":"`+tenant+`","action":"host_restart_service","kind":"action","outcome":"rejected","approved":false,"stage":"policy","reason":"no","policy":{"denies":[{"rule":"no_skip_review","message":"no"}],"rules":["no_skip_review"],"revision":"sha256:abc","eval_us":7},"decided_at":"2025-01-02T03:04:05Z","latency_ms":1,"audit_seq":0,"proposal_sha256":"`+hexSHA256([]byte(id))+`"}`),
	}
}

// editEvents rewrites the events of a version-2 record's body with edit,
// keeping its headers, as someone who can write the stream's files could.
// A compressed body is decompressed, edited and compressed again.
func editEvents(t *testing.T, m *nats.Msg, edit func([]json.RawMessage) []json.RawMessage) *nats.Msg {
	t.Helper()
	body, ok := audit.RecordJSON(m.Data)
	if !ok {
		t.Fatal("the record does not decompress")
	}
	// The events end the body: {...,"events":[...]}. Only they change.
	at := bytes.Index(body, []byte(`,"events":`))
	if at < 0 || !bytes.HasSuffix(body, []byte("]}")) {
		t.Fatalf("not a version-2 or 3 body: %s", body)
	}
	var evs []json.RawMessage
	if err := json.Unmarshal(body[at+len(`,"events":`):len(body)-1], &evs); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(edit(evs))
	if err != nil {
		t.Fatal(err)
	}
	out := nats.NewMsg(m.Subject)
	out.Header = m.Header
	out.Data = append(append(append([]byte{}, body[:at+len(`,"events":`)]...), raw...), '}')
	if !bytes.Equal(body, m.Data) {
		out.Data = zstdFrame(out.Data)
	}
	return out
}

type wantProblem struct {
	seq  uint64
	kind audit.ProblemKind
}

func problemsOf(rep *audit.Report) []wantProblem {
	out := []wantProblem{}
	for _, p := range rep.Problems {
		out = append(out, wantProblem{p.Seq, p.Kind})
	}
	return out
}
