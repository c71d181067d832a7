package audit_test

import (
	"testing"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
)

// TestWriterPipelinedKeepsOneChain checks the pipelined writer where it
// can go wrong: its runs broken by other writers on shared tenants, a
// pipelined instance and one publishing one at a time, or two pipelined
// instances; every chain must verify, with every record in it.
func TestWriterPipelinedKeepsOneChain(t *testing.T) {
	tests := []struct {
		note  string
		other audit.PublishMode
	}{
		{note: "beside a one-at-a-time instance", other: audit.PublishOneAtATime},
		{note: "beside another pipelined instance", other: audit.PublishPipelined},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			s := natstest.Server(t)
			_, js1 := natstest.Connect(t, s)
			_, js2 := natstest.Connect(t, s)
			if _, err := bus.Setup(t.Context(), js1, bus.Config{}); err != nil {
				t.Fatal(err)
			}
			a1 := natstest.AuditWriter(t, js1, audit.Config{Key: testKey, Instance: "one", Publish: audit.PublishPipelined})
			a2 := natstest.AuditWriter(t, js2, audit.Config{Key: testKey, Instance: "two", Publish: tc.other})
			if !a1.Pipelined() || a1.Batching() {
				t.Fatalf("pipelined %v, batching %v; want pipelined only", a1.Pipelined(), a1.Batching())
			}
			const rounds, trails, events = 10, 8, 3
			if !shareChain(t, js1, a1, a2, rounds, trails, events) {
				return
			}
			st := a1.Stats()
			if st.Records != rounds*trails*(events+1) {
				t.Errorf("the pipelined instance stored %d records, want %d", st.Records, rounds*trails*(events+1))
			}
			t.Logf("pipelined: %+v; other: %+v", st, a2.Stats())
		})
	}
}

// TestWriterPipelinedContinuesAChain checks that a pipelined writer
// started on a stream that has records, by an earlier instance, links its
// first record of each tenant to the tenant's last record.
func TestWriterPipelinedContinuesAChain(t *testing.T) {
	_, js := setupAudit(t)
	first := natstest.AuditWriter(t, js, audit.Config{Key: testKey, Publish: audit.PublishOneAtATime})
	writeTrails(t, first, "a", 6, 2, "acme", "beta")
	second := natstest.AuditWriter(t, js, audit.Config{Key: testKey, Publish: audit.PublishPipelined})
	writeTrails(t, second, "b", 6, 2, "acme", "beta")
	rep := verify(t, js, audit.VerifyOptions{Keys: [][]byte{testKey}})
	if !rep.Clean() {
		t.Fatalf("problems: %+v", rep.Problems)
	}
	if got := heads(rep); got["acme"] != 18 || got["beta"] != 18 {
		t.Fatalf("chain heads %v, want 18 records each", got)
	}
}
