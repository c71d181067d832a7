package fleet_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
)

// followUpSeeds are the bodies gated.FollowUp builds, and near misses.
func followUpSeeds(f *testing.F, next string) {
	round := 1
	if next == gated.NextEscalation {
		round = 3
	}
	v := bustest.RunVerdict("p1", "run1", round, next)
	_, _, body, ok := gated.FollowUp(v)
	if !ok {
		f.Fatalf("no %s to seed with", next)
	}
	f.Add(body)
	v.Run.Findings, v.Run.MissingWork, v.Run.Criteria = nil, nil, nil
	_, _, body, _ = gated.FollowUp(v)
	f.Add(body)
	f.Add(append(bytes.Clone(body), ` {}`...))
	f.Add(bytes.Replace(body, []byte(`"v":1`), []byte(`"V":1`), 1))
	f.Add([]byte(`{"v":1,"tenant":"acme","run_id":"run1","round":2,"max_rounds":3,"review":{"proposal_id":"p1","round":1,"verdict":"gated.verdicts.acme.p1"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
}

// checkFixedPoint re-encodes an accepted follow-up: the decoder must
// accept its own output, and decode it to the same value.
func checkFixedPoint[T any](t *testing.T, v *T, decode func([]byte) (*T, error)) {
	t.Helper()
	once, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("re-encoding an accepted follow-up: %v", err)
	}
	again, err := decode(once)
	if err != nil {
		t.Fatalf("the decoder refuses its own output %s: %v", once, err)
	}
	twice, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(once, twice) {
		t.Fatalf("decoding changed the follow-up:\n%s\n%s", once, twice)
	}
}

// FuzzDecodeContinuation feeds the continuation decoder arbitrary bytes:
// it never panics, and accepts only continuations an orchestrator can act
// on (valid tokens, a round after a reviewed one within max_rounds).
func FuzzDecodeContinuation(f *testing.F) {
	followUpSeeds(f, gated.NextContinuation)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := fleet.DecodeContinuation(data)
		if err != nil {
			return
		}
		if c.V != gated.SchemaVersion || !gated.ValidTenant(c.Tenant) || !gated.ValidID(c.RunID) ||
			!gated.ValidID(c.Review.ProposalID) || c.Round < 2 || c.Round > c.MaxRounds || c.Review.Round != c.Round-1 {
			t.Fatalf("accepted %+v", c)
		}
		checkFixedPoint(t, c, fleet.DecodeContinuation)
	})
}

// FuzzDecodeEscalation is FuzzDecodeContinuation for escalations.
func FuzzDecodeEscalation(f *testing.F) {
	followUpSeeds(f, gated.NextEscalation)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := fleet.DecodeEscalation(data)
		if err != nil {
			return
		}
		if e.V != gated.SchemaVersion || !gated.ValidTenant(e.Tenant) || !gated.ValidID(e.RunID) ||
			!gated.ValidID(e.Review.ProposalID) || e.Rounds < 1 || e.MaxRounds < 1 || e.Review.Round != e.Rounds {
			t.Fatalf("accepted %+v", e)
		}
		checkFixedPoint(t, e, fleet.DecodeEscalation)
	})
}
