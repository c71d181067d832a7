package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
)

// ErrTrailAmbiguous is wrapped by FindVerdict's error when the records
// read hold the verdicts of more than one proposal under the id (an id
// used again by other bytes): no one of them is the id's verdict.
var ErrTrailAmbiguous = errors.New("the audit trail holds verdicts of different proposals under one id")

// TrailError is FindVerdict's error when the records it read are not
// gated's as written: a record modified, forged, removed or out of order
// in the tenant's chain. Nothing is answered from such a range.
type TrailError struct {
	Tenant   string
	Problems []Problem
}

func (e *TrailError) Error() string {
	p := e.Problems[0]
	return fmt.Sprintf("the audit trail of tenant %s does not verify, so no verdict is read from it: %d problem(s), the first at seq %d (%s): %s",
		e.Tenant, len(e.Problems), p.Seq, p.Kind, p.Detail)
}

// FoundVerdict is a verdict read back from the audit trail. Its grant's
// token is not in the trail (a grant.issued event names the grant by its
// id): Verdict.Grant is empty.
type FoundVerdict struct {
	// Verdict is the verdict as its verdict.decided record holds it, with
	// AuditSeq set to the record's sequence, as the stored verdict had.
	Verdict *gated.Verdict
	// Seq and Stored are the record's stream sequence and time.
	Seq    uint64
	Stored time.Time
	// Records is how many records of the tenant were read and checked.
	Records uint64
}

// FindVerdict reads the verdict of tenant's proposal id from the audit
// trail, for a reader whose verdict is no longer in the GATED_VERDICTS
// bucket (its key expired or was removed). The stream is indexed by
// tenant and event, not by proposal, so it reads every record of tenant
// stored since since (the whole stream when zero) and checks them as a
// Checker does: with keys, each record's MAC; always the tenant's chain
// through the range. A range that does not verify is a *TrailError. keys
// are required: without them a record that follows the format, written by
// anyone able to publish on the audit subjects, would pass for gated's.
//
// The verdict is the last verdict.decided record of the id that was
// stored: one that lost the race to the store is named superseded by the
// verdict.replayed record after it, and a later verdict of the same
// proposal (an operator's decision on a held action, its timeout)
// replaced the earlier one. Verdicts of different proposals under the id
// are ErrTrailAmbiguous. No record of the id in the range is
// gated.ErrNotFound. Only records whose subject and body both name tenant
// are read, so a tenant never gets another's verdict. Errors: ErrNoStream,
// NATS errors.
func FindVerdict(ctx context.Context, js jetstream.JetStream, tenant, id string, since time.Time, keys [][]byte) (*FoundVerdict, error) {
	switch {
	case !gated.ValidTenant(tenant) || !gated.ValidID(id):
		return nil, fmt.Errorf("looking up verdict %s.%s: not a valid tenant and id", tenant, id)
	case len(keys) == 0:
		return nil, errors.New("reading a verdict from the audit trail needs the audit keys, which tell gated's records from forged ones")
	}
	check := NewChecker(VerifyOptions{Tenant: tenant, Keys: keys})
	var (
		found      []FoundVerdict
		superseded = map[uint64]bool{}
		digest     string
		ambiguous  bool
	)
	err := Read(ctx, js, Query{Tenant: tenant, Since: since}, func(e Entry) error {
		check.Add(e)
		r := e.Record
		if r == nil || r.Tenant != tenant || r.ProposalID != id {
			return nil
		}
		for _, ev := range r.Events() {
			switch ev.Event {
			case gated.EventVerdict:
				var v gated.Verdict
				if err := json.Unmarshal(ev.Data, &v); err != nil || v.Tenant != tenant || v.ProposalID != id {
					continue // the chain check below reports what is not gated's
				}
				if digest == "" {
					digest = v.ProposalSHA256
				}
				ambiguous = ambiguous || v.ProposalSHA256 != digest
				v.AuditSeq = e.Seq
				found = append(found, FoundVerdict{Verdict: &v, Seq: e.Seq, Stored: e.Stored})
			case gated.EventReplayed:
				var d struct {
					Superseded uint64 `json:"superseded_seq"`
				}
				if json.Unmarshal(ev.Data, &d) == nil && d.Superseded != 0 {
					superseded[d.Superseded] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rep := check.Report()
	if len(rep.Problems) > 0 {
		return nil, &TrailError{Tenant: tenant, Problems: rep.Problems}
	}
	if ambiguous {
		return nil, fmt.Errorf("%w: tenant %s, id %s (gated audit query --tenant %s lists them)", ErrTrailAmbiguous, tenant, id, tenant)
	}
	for i := len(found) - 1; i >= 0; i-- {
		if !superseded[found[i].Seq] {
			f := found[i]
			f.Records = rep.Records
			return &f, nil
		}
	}
	return nil, gated.ErrNotFound
}
