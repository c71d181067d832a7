package audit

import (
	"bytes"
	"cmp"
	"context"
	"math"
	"slices"
	"time"
	"unique"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
)

// ReviewerKey names a reviewer in a track record: the plugin and its
// version, the persona it ran and the model it reports.
type ReviewerKey struct {
	Plugin        string `json:"plugin"`
	PluginVersion string `json:"plugin_version"`
	Persona       string `json:"persona"`
	Model         string `json:"model"`
}

// ReviewerStats is one reviewer's track record over the audit records a
// TrackRecord was given.
type ReviewerStats struct {
	ReviewerKey
	// Reviews counts the reviewer's reviews; Approvals and Rejections
	// those that approved and rejected (a review that failed is neither).
	Reviews    int `json:"reviews"`
	Approvals  int `json:"approvals"`
	Rejections int `json:"rejections"`
	// ApprovedSucceeded and ApprovedFailed count the approved verdicts the
	// reviewer approved whose grant's last reported outcome is succeeded,
	// or failed. ApprovedThenFailedRate is ApprovedFailed over their sum,
	// nil when the sum is 0.
	ApprovedSucceeded      int      `json:"approved_succeeded"`
	ApprovedFailed         int      `json:"approved_failed"`
	ApprovedThenFailedRate *float64 `json:"approved_then_failed_rate"`
	// OperatorOverrides counts the operator decisions on a held action or
	// run review that differ from the reviewer's decision.
	OperatorOverrides int `json:"operator_overrides"`
	// LatencyP50MS and LatencyP99MS are nearest-rank percentiles of the
	// reviews' latency_ms; nil with no review.
	LatencyP50MS *float64 `json:"latency_p50_ms"`
	LatencyP99MS *float64 `json:"latency_p99_ms"`
}

// trackedProposal is what a TrackRecord keeps of one proposal.
type trackedProposal struct {
	// reviews are the reviews of the proposal's first reviewed verdict:
	// a verdict that replaces a held one, or a dedupe answer, copies them.
	reviews []trackedReview
	// approvedByReview is set when an approved verdict stands on its
	// reviews (not on an operator's decision).
	approvedByReview bool
	// final is the last succeeded or failed outcome reported.
	final string
	// operator is the last operator decision: approve or reject.
	operator gated.ReviewDecision
}

// trackedReview is what a TrackRecord keeps of a review. The reviewer's
// key is interned: the proposals a track record keeps share a few
// reviewers, and each would otherwise hold its own copy of four strings.
type trackedReview struct {
	key      unique.Handle[ReviewerKey]
	decision gated.ReviewDecision
	latency  float64
}

// keptDecision returns d, as the package's constant when it is one, so
// that a kept review does not hold the decoded copy.
func keptDecision(d gated.ReviewDecision) gated.ReviewDecision {
	switch d {
	case gated.DecisionApprove:
		return gated.DecisionApprove
	case gated.DecisionReject:
		return gated.DecisionReject
	}
	return d
}

// TrackRecord folds audit records into each reviewer's track record: the
// verdicts' reviews, the grants' reported outcomes and the operators'
// decisions. Records of other events are ignored. The zero value is
// ready to use and keeps every proposal; it is not safe for concurrent
// use.
type TrackRecord struct {
	// Limit bounds the proposals kept one by one; 0 keeps all. Past it the
	// oldest proposal is settled: its figures are summed as they stand
	// (a later outcome or operator decision on it is not counted), and
	// of settled reviews the latency percentiles see the last
	// SettledLatencies (default 4096) per reviewer.
	Limit int
	// SettledLatencies is how many settled latencies a reviewer keeps.
	SettledLatencies int

	proposals  map[string]*trackedProposal
	order      []string
	settled    map[ReviewerKey]*ReviewerStats
	settledLat map[ReviewerKey][]float64
}

// defaultSettledLatencies is SettledLatencies' default.
const defaultSettledLatencies = 4096

func (t *TrackRecord) proposal(tenant, id string) *trackedProposal {
	if t.proposals == nil {
		t.proposals = map[string]*trackedProposal{}
	}
	key := tenant + "." + id
	p := t.proposals[key]
	if p == nil {
		p = &trackedProposal{}
		t.proposals[key] = p
		if t.Limit > 0 {
			t.order = append(t.order, key)
			if len(t.proposals) > t.Limit {
				t.settleOldest()
			}
		}
	}
	return p
}

// Tracked is how many proposals the track record keeps one by one: at
// most Limit when it is set.
func (t *TrackRecord) Tracked() int { return len(t.proposals) }

// settleOldest sums the oldest proposal into the settled figures and
// forgets it.
func (t *TrackRecord) settleOldest() {
	key := t.order[0]
	t.order = t.order[1:]
	if len(t.order) == 0 {
		t.order = nil // let the array go
	}
	p := t.proposals[key]
	delete(t.proposals, key)
	if t.settled == nil {
		t.settled, t.settledLat = map[ReviewerKey]*ReviewerStats{}, map[ReviewerKey][]float64{}
	}
	tally(p, t.settled, t.settledLat)
	keep := cmp.Or(t.SettledLatencies, defaultSettledLatencies)
	for k, ls := range t.settledLat {
		if len(ls) >= 2*keep {
			t.settledLat[k] = append(ls[:0], ls[len(ls)-keep:]...)
		}
	}
}

// tally adds the figures of p to stats and its latencies to latencies.
func tally(p *trackedProposal, stats map[ReviewerKey]*ReviewerStats, latencies map[ReviewerKey][]float64) {
	for _, rv := range p.reviews {
		k := rv.key.Value()
		s := stats[k]
		if s == nil {
			s = &ReviewerStats{ReviewerKey: k}
			stats[k] = s
		}
		s.Reviews++
		latencies[k] = append(latencies[k], rv.latency)
		switch rv.decision {
		case gated.DecisionApprove:
			s.Approvals++
			if p.approvedByReview {
				switch p.final {
				case gated.ExecutionSucceeded:
					s.ApprovedSucceeded++
				case gated.ExecutionFailed:
					s.ApprovedFailed++
				}
			}
		case gated.DecisionReject:
			s.Rejections++
		}
		if p.operator != "" && p.operator != rv.decision {
			s.OperatorOverrides++
		}
	}
}

// trackMarkers are what the body of a record that TrackRecord.Add folds
// in holds, as gated's encoder writes it: a verdict's reviews, a grant's
// outcome, an operator's decision. Inside a JSON string each would have
// its quotes escaped, so no string value spells one.
var trackMarkers = [][]byte{
	[]byte(`"reviews":[`),
	[]byte(`"` + gated.EventGrantOutcome + `"`),
	[]byte(`"` + gated.EventOperatorDecided + `"`),
}

// MayTrack reports whether the message body of an audit record may hold
// an event that TrackRecord.Add folds in. For a record gated wrote it is
// false only when Add would ignore the record, so a reader that follows
// the whole stream (the reviewer metrics) decodes only the few records
// that count: most verdicts are the policy's, with no review. A record
// gated did not write (a member name in another case, or escaped) may be
// turned away: the metrics count what gated recorded, and `gated audit
// verify` reports anything else in the stream.
func MayTrack(body []byte) bool {
	_, ok := trackedJSON(body, false)
	return ok
}

// trackedJSON reports whether body's record holds one of trackMarkers,
// and with keep returns its JSON: body itself, or for a compressed record
// a decompressed copy of its own (the record decoded from it may keep
// slices of it). A compressed record is decompressed into a pooled block,
// so that a body turned away allocates nothing.
func trackedJSON(body []byte, keep bool) ([]byte, bool) {
	if !isCompressed(body) {
		return body, hasTrackMarker(body)
	}
	p := blocks.Get().(*[]byte)
	defer blocks.Put(p)
	js, err := recordJSON(body, p)
	if err != nil || !hasTrackMarker(js) {
		return nil, false
	}
	if !keep {
		return nil, true
	}
	return bytes.Clone(js), true
}

func hasTrackMarker(js []byte) bool {
	for _, m := range trackMarkers {
		if bytes.Contains(js, m) {
			return true
		}
	}
	return false
}

// DecodeIfTracked decodes e as Decode does when MayTrack says its record
// may hold an event that TrackRecord.Add folds in, and reports whether it
// did. A compressed record is decompressed once for both, not once to
// look and again to decode: a reader of the whole stream meets a reviewed
// proposal's record, a few kilobytes of JSON, at every review.
func (e *Entry) DecodeIfTracked() bool {
	js, ok := trackedJSON(e.Data, true)
	switch {
	case !ok:
		return false
	case !isCompressed(e.Data):
		e.Decode()
		return true
	}
	e.Record, e.Err = decodeGrouped(e.Subject, e.Header, e.Data, js, nil)
	if e.Record != nil {
		e.Record.Seq, e.Record.Stored = e.Seq, e.Stored
	}
	return true
}

// Add folds r into the track record. A record whose data does not decode
// is skipped: the audit's own verification reports it.
func (t *TrackRecord) Add(r *Record) {
	if r == nil {
		return
	}
	for _, ev := range r.Events() {
		t.addEvent(ev)
	}
}

// addEvent folds one event into the track record.
func (t *TrackRecord) addEvent(ev gated.AuditEvent) {
	switch ev.Event {
	case gated.EventVerdict:
		v, err := gated.DecodeAuditData[gated.Verdict](ev)
		if err != nil || v.ProposalID == "" || len(v.Reviews) == 0 {
			// A verdict without reviews (the policy's) counts for no
			// reviewer: it is not kept, so it takes no reviewed
			// proposal's place under Limit.
			return
		}
		p := t.proposal(ev.Tenant, v.ProposalID)
		if p.reviews == nil && len(v.Reviews) > 0 && v.Stage != gated.StageDedupe && v.DuplicateOf == "" {
			p.reviews = make([]trackedReview, len(v.Reviews))
			for i, rv := range v.Reviews {
				p.reviews[i] = trackedReview{
					key:      unique.Make(ReviewerKey{Plugin: rv.Plugin, PluginVersion: rv.PluginVersion, Persona: rv.Persona, Model: rv.Model}),
					decision: keptDecision(rv.Decision), latency: rv.LatencyMS,
				}
			}
		}
		if v.Outcome == gated.OutcomeApproved && v.Operator == nil && len(v.Reviews) > 0 {
			p.approvedByReview = true
		}
	case gated.EventGrantOutcome:
		d, err := gated.DecodeAuditData[gated.GrantOutcomeData](ev)
		if err != nil || d.ProposalID == "" {
			return
		}
		// The constants are kept, not the decoded copies.
		switch d.Status {
		case gated.ExecutionSucceeded:
			t.proposal(ev.Tenant, d.ProposalID).final = gated.ExecutionSucceeded
		case gated.ExecutionFailed:
			t.proposal(ev.Tenant, d.ProposalID).final = gated.ExecutionFailed
		}
	case gated.EventOperatorDecided:
		d, err := gated.DecodeAuditData[gated.OperatorDecidedData](ev)
		if err != nil || ev.ProposalID == "" {
			return
		}
		decision := gated.DecisionReject
		if d.Decision == string(gated.DecisionApprove) || (d.Decision == "" && d.Outcome == gated.OutcomeApproved) {
			decision = gated.DecisionApprove
		}
		t.proposal(ev.Tenant, ev.ProposalID).operator = decision
	}
}

// Reviewers returns each reviewer's track record, ordered by plugin,
// plugin version, persona and model.
func (t *TrackRecord) Reviewers() []ReviewerStats {
	stats := map[ReviewerKey]*ReviewerStats{}
	latencies := map[ReviewerKey][]float64{}
	for k, s := range t.settled {
		c := *s
		stats[k] = &c
		keep := cmp.Or(t.SettledLatencies, defaultSettledLatencies)
		ls := t.settledLat[k]
		latencies[k] = slices.Clone(ls[max(len(ls)-keep, 0):])
	}
	for _, p := range t.proposals {
		tally(p, stats, latencies)
	}
	out := make([]ReviewerStats, 0, len(stats))
	for k, s := range stats {
		if n := s.ApprovedSucceeded + s.ApprovedFailed; n > 0 {
			rate := float64(s.ApprovedFailed) / float64(n)
			s.ApprovedThenFailedRate = &rate
		}
		ls := latencies[k]
		slices.Sort(ls)
		s.LatencyP50MS, s.LatencyP99MS = nearestRank(ls, 0.50), nearestRank(ls, 0.99)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ReviewerStats) int {
		return cmp.Or(cmp.Compare(a.Plugin, b.Plugin), cmp.Compare(a.PluginVersion, b.PluginVersion),
			cmp.Compare(a.Persona, b.Persona), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// nearestRank is the q-quantile of sorted by the nearest-rank method, nil
// for none.
func nearestRank(sorted []float64, q float64) *float64 {
	if len(sorted) == 0 {
		return nil
	}
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	v := sorted[i]
	return &v
}

// ReadTrackRecord reads the audit records of tenants (every tenant's
// when tenants is empty) stored at or after since (the zero time: all of
// them) and returns each reviewer's track record over them, as
// TrackRecord.Reviewers orders it. `gated report reviewers` and the
// console's reviewers page both answer with it. A tenant named twice is
// read once. Errors: ErrNoStream, NATS errors.
func ReadTrackRecord(ctx context.Context, js jetstream.JetStream, tenants []string, since time.Time) ([]ReviewerStats, error) {
	tenants = slices.Clone(tenants)
	slices.Sort(tenants)
	tenants = slices.Compact(tenants)
	if len(tenants) == 0 || slices.Contains(tenants, "") {
		tenants = []string{""} // every tenant
	}
	var tr TrackRecord
	for _, tenant := range tenants {
		err := Read(ctx, js, Query{Tenant: tenant, Since: since, Undecoded: true}, func(e Entry) error {
			if MayTrack(e.Data) {
				e.Decode()
				tr.Add(e.Record)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return tr.Reviewers(), nil
}
