package bus_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

func TestSetupCreatesTheContract(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	ctx := t.Context()
	res, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Setup is idempotent: many gated processes run it at start.
	if _, err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	pi, err := res.Proposals.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pi.Config.Retention != jetstream.WorkQueuePolicy || pi.Config.Storage != jetstream.FileStorage {
		t.Errorf("proposals: retention %v storage %v, want work queue on file", pi.Config.Retention, pi.Config.Storage)
	}
	ai, err := res.Audit.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ai.Config.DenyDelete || !ai.Config.DenyPurge || ai.Config.Retention != jetstream.LimitsPolicy {
		t.Errorf("audit: deny delete %v, deny purge %v, retention %v", ai.Config.DenyDelete, ai.Config.DenyPurge, ai.Config.Retention)
	}
	if err := res.Audit.Purge(ctx); err == nil {
		t.Error("purging the audit stream must be refused")
	}
	ci, err := res.Consumer.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.Durable != bus.ConsumerName || ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("consumer: durable %q ack %v", ci.Config.Durable, ci.Config.AckPolicy)
	}
	if _, err := bus.Setup(ctx, js, bus.Config{Replicas: 9}); !errors.Is(err, bus.ErrInvalidConfig) {
		t.Errorf("replicas 9: err = %v, want ErrInvalidConfig", err)
	}
}

// TestSetupCompressesTheStores: the audit stream and the verdict bucket
// keep full blocks S2-compressed, also where an older gated created them
// uncompressed, and a record written before the change reads back as
// written.
func TestSetupCompressesTheStores(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: audit.Stream, Subjects: []string{wire.AuditSubjectPrefix + ">"}, Storage: jetstream.FileStorage,
		DenyDelete: true, DenyPurge: true, AllowAtomicPublish: true,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.VerdictBucket, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	old, err := js.Publish(ctx, wire.AuditSubjectPrefix+"acme.verdict.decided", []byte(`{"written":"before"}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ai, err := res.Audit.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ai.Config.Compression != jetstream.S2Compression {
		t.Errorf("audit stream compression %v, want s2", ai.Config.Compression)
	}
	vs, err := res.Verdicts.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !vs.IsCompressed() {
		t.Error("the verdict bucket is not compressed")
	}
	m, err := res.Audit.GetMsg(ctx, old.Sequence)
	if err != nil || string(m.Data) != `{"written":"before"}` {
		t.Fatalf("the record written before: %q, %v", m.Data, err)
	}
}

func TestTrailSealWaitsAndReturnsSequence(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	res, err := bus.Setup(t.Context(), js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr := natstest.AuditWriter(t, js, audit.Config{}).Trail()
	for _, ev := range []string{gated.EventReceived, gated.EventPolicyDecided} {
		if err := tr.Record(t.Context(), gated.AuditEvent{V: 1, Event: ev, Tenant: "acme", ProposalID: "p1"}); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := tr.Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := res.Audit.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The three events, recorded with nothing in between, are one record.
	if info.State.Msgs != 1 || seq != info.State.LastSeq {
		t.Fatalf("stream holds %d records, last seq %d; Seal returned %d", info.State.Msgs, info.State.LastSeq, seq)
	}
	msg, err := res.Audit.GetMsg(t.Context(), seq)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "gated.audit.acme.verdict.decided" {
		t.Errorf("verdict record subject = %q", msg.Subject)
	}
	rec, err := audit.DecodeRecord(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range rec.Events() {
		names = append(names, ev.Event)
	}
	if want := []string{gated.EventReceived, gated.EventPolicyDecided, gated.EventVerdict}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("record events %v, want %v", names, want)
	}
}

func TestSetupConsumerSettings(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	tests := []struct {
		note       string
		cfg        bus.Config
		ackWait    time.Duration
		maxDeliver int
		maxPending int
	}{
		// The consumer redelivers without limit whatever MaxDeliver says:
		// the worker keeps the budget, and answers a delivery past it.
		{note: "defaults", cfg: bus.Config{}, ackWait: 30 * time.Second, maxDeliver: -1, maxPending: 4 * 1024},
		{note: "max ack pending follows max in flight", cfg: bus.Config{AckWait: 2 * time.Second, MaxDeliver: 3, MaxInFlight: 8},
			ackWait: 2 * time.Second, maxDeliver: -1, maxPending: 32},
		{note: "explicit max ack pending", cfg: bus.Config{MaxInFlight: 8, MaxAckPending: 5}, ackWait: 30 * time.Second, maxDeliver: -1, maxPending: 5},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			// Each Setup updates the one durable consumer, as a restarted
			// gated with new settings does.
			res, err := bus.Setup(t.Context(), js, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ci, err := res.Consumer.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if ci.Config.AckWait != tc.ackWait || ci.Config.MaxDeliver != tc.maxDeliver || ci.Config.MaxAckPending != tc.maxPending {
				t.Fatalf("consumer ack wait %s, max deliver %d, max ack pending %d; want %s, %d, %d",
					ci.Config.AckWait, ci.Config.MaxDeliver, ci.Config.MaxAckPending, tc.ackWait, tc.maxDeliver, tc.maxPending)
			}
		})
	}
	for _, cfg := range []bus.Config{{AckWait: 500 * time.Millisecond}, {MaxDeliver: -1}, {MaxAckPending: -1}} {
		if _, err := bus.Setup(t.Context(), js, cfg); !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("Setup(%+v): err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestSetupCreatesTheRunStream(t *testing.T) {
	s := natstest.Server(t)
	_, js := natstest.Connect(t, s)
	tests := []struct {
		note       string
		cfg        bus.Config
		maxAge     time.Duration
		duplicates time.Duration
	}{
		{note: "defaults", cfg: bus.Config{}, maxAge: bus.DefaultVerdictTTL, duplicates: time.Hour},
		{note: "follow-ups live as long as verdicts", cfg: bus.Config{VerdictTTL: 48 * time.Hour}, maxAge: 48 * time.Hour, duplicates: time.Hour},
		{note: "a short TTL cuts the duplicate window", cfg: bus.Config{VerdictTTL: 30 * time.Minute}, maxAge: 30 * time.Minute, duplicates: 30 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			res, err := bus.Setup(t.Context(), js, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			info, err := res.Runs.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			c := info.Config
			if c.Name != wire.RunsStream || !slices.Equal(c.Subjects, []string{"gated.continuations.>", "gated.escalations.>"}) {
				t.Fatalf("stream %s on %v", c.Name, c.Subjects)
			}
			if c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage || c.Replicas != 1 {
				t.Errorf("retention %v, storage %v, replicas %d; want limits on file, 1 replica", c.Retention, c.Storage, c.Replicas)
			}
			if c.MaxAge != tc.maxAge || c.Duplicates != tc.duplicates {
				t.Errorf("max age %s, duplicate window %s; want %s, %s", c.MaxAge, c.Duplicates, tc.maxAge, tc.duplicates)
			}
		})
	}
}
