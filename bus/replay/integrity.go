package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus/audit"
)

// rangeEnd is where the stream ends before the replay reads it, so that
// records deleted from its end are seen: the chain alone does not show
// them.
func rangeEnd(ctx context.Context, js jetstream.JetStream, q audit.Query) (audit.RangeEnd, error) {
	end := audit.RangeEnd{}
	if q.Since.IsZero() {
		end.From = q.StartSeq
	}
	s, err := js.Stream(ctx, audit.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return end, audit.ErrNoStream
	}
	if err != nil {
		return end, fmt.Errorf("opening stream %s: %w", audit.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return end, fmt.Errorf("reading stream %s: %w", audit.Stream, err)
	}
	end.StreamLast = info.State.LastSeq
	return end, nil
}

// Integrity is what a replay report says of the checks of its range
// beyond the chain: the MACs, and the end of the range.
type Integrity struct {
	// MACsChecked is true when audit keys were given; KeyIDs names them.
	MACsChecked bool     `json:"macs_checked"`
	KeyIDs      []string `json:"key_ids,omitempty"`
	// EndChecked says how the end of the range was checked: against the
	// stream's last sequence (every tenant's records), the latest stored
	// verdict, anchors; empty when it was not.
	EndChecked    []string             `json:"end_checked"`
	LatestVerdict *audit.VerdictAnchor `json:"latest_verdict,omitempty"`
	Anchors       audit.AnchorCheck    `json:"anchors"`
}

// Ways the end of a replayed range is checked.
const (
	endByStreamSeq = "stream_last_seq"
	endByVerdict   = "latest_verdict"
	endByAnchors   = "anchors"
)

// checkIntegrity ends the range check chk: it checks the end of the
// stream against the verdict store (a problem found joins chk's) and sums
// up what was checked, given the anchors' fate ac.
func checkIntegrity(ctx context.Context, js jetstream.JetStream, q audit.Query, chk *audit.Report, ac audit.AnchorCheck) (Integrity, error) {
	in := Integrity{MACsChecked: chk.MACsChecked, KeyIDs: chk.KeyIDs, Anchors: ac, EndChecked: []string{}}
	if q.Tenant == "" {
		in.EndChecked = append(in.EndChecked, endByStreamSeq)
	}
	latest, problem, err := audit.CheckLatestVerdict(ctx, js, q.Tenant)
	if err != nil {
		return in, fmt.Errorf("checking the end of the audit stream against the verdict store: %w", err)
	}
	if latest != nil {
		in.EndChecked, in.LatestVerdict = append(in.EndChecked, endByVerdict), latest
	}
	if problem != nil {
		chk.Problems = append(chk.Problems, *problem)
	}
	if ac.Matched+ac.Missing > 0 {
		in.EndChecked = append(in.EndChecked, endByAnchors)
	}
	return in, nil
}
