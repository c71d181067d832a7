package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gated/gated"
)

// ShadowDifference is one policy.shadow_differs record: a proposal the
// shadow policy decided otherwise than the live one.
type ShadowDifference struct {
	Seq        uint64    `json:"seq"`
	At         time.Time `json:"at"`
	Tenant     string    `json:"tenant"`
	ProposalID string    `json:"proposal_id"`
	Action     string    `json:"action"`
	gated.ShadowComparison
}

// shadowKinds are the kinds of difference a record may name.
var shadowKinds = []string{gated.ShadowDiffError, gated.ShadowDiffOutcome, gated.ShadowDiffDenies, gated.ShadowDiffRoute}

// DecodeShadowDiffers reads the data of a policy.shadow_differs event. It
// refuses data that is not such a record: unknown members, no outcome on
// either side, no kind, or a kind it does not know. Errors wrap
// ErrInvalidRecord.
func DecodeShadowDiffers(data []byte) (ShadowDifference, error) {
	var d struct {
		gated.AuditHead
		gated.ShadowComparison
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return ShadowDifference{}, fmt.Errorf("%w: %s data: %v", ErrInvalidRecord, gated.EventPolicyShadowDiffers, err)
	}
	if dec.More() {
		return ShadowDifference{}, fmt.Errorf("%w: %s data: more than one JSON value", ErrInvalidRecord, gated.EventPolicyShadowDiffers)
	}
	c := d.ShadowComparison
	switch {
	case c.Live.Outcome == "" || c.Shadow.Outcome == "":
		return ShadowDifference{}, fmt.Errorf("%w: %s data: live and shadow must each have an outcome", ErrInvalidRecord, gated.EventPolicyShadowDiffers)
	case len(c.Kinds) == 0:
		return ShadowDifference{}, fmt.Errorf("%w: %s data: kinds is empty, so the decisions do not differ", ErrInvalidRecord, gated.EventPolicyShadowDiffers)
	}
	for _, k := range c.Kinds {
		if !slices.Contains(shadowKinds, k) {
			return ShadowDifference{}, fmt.Errorf("%w: %s data: unknown kind %q", ErrInvalidRecord, gated.EventPolicyShadowDiffers, k)
		}
	}
	return ShadowDifference{Action: d.Action, ShadowComparison: c}, nil
}

// ShadowSummary is how a shadow policy agreed with the live one over a
// range of the audit stream; Add builds it record by record.
type ShadowSummary struct {
	// Decisions counts the proposals decided with a shadow beside the
	// live policy (policy.decided records naming a shadow revision).
	Decisions int `json:"decisions"`
	// Differences counts the policy.shadow_differs records.
	Differences int `json:"differences"`
	// Agreement is the share of Decisions without a difference, 1 when
	// there were none.
	Agreement float64 `json:"agreement"`
	// ShadowRevisions counts Decisions by shadow revision.
	ShadowRevisions map[string]int `json:"shadow_revisions"`
	// ByKind, ByRule, ByTenant, ByAction count Differences; ByOutcome by
	// "live -> shadow" outcome.
	ByKind    map[string]int `json:"by_kind"`
	ByRule    map[string]int `json:"by_rule"`
	ByTenant  map[string]int `json:"by_tenant"`
	ByAction  map[string]int `json:"by_action"`
	ByOutcome map[string]int `json:"by_outcome"`
	// First are the first differences, oldest first, up to the limit
	// NewShadowSummary was given.
	First []ShadowDifference `json:"first"`
	// Invalid counts messages on audit subjects that are not valid
	// records, or shadow records whose data is not one: the range is not
	// whole, and `gated audit verify` says more.
	Invalid int `json:"invalid"`
	// FirstInvalid says what is wrong with the first of them.
	FirstInvalid string `json:"first_invalid,omitempty"`

	limit int
}

// NewShadowSummary returns an empty summary that keeps the first n
// differences.
func NewShadowSummary(n int) *ShadowSummary {
	return &ShadowSummary{
		ShadowRevisions: map[string]int{}, ByKind: map[string]int{}, ByRule: map[string]int{},
		ByTenant: map[string]int{}, ByAction: map[string]int{}, ByOutcome: map[string]int{},
		First: []ShadowDifference{}, Agreement: 1, limit: n,
	}
}

// Add counts one message of the audit stream.
func (s *ShadowSummary) Add(e Entry) {
	if e.Record == nil {
		s.invalid(fmt.Sprintf("seq %d: %v", e.Seq, e.Err))
		return
	}
	for _, ev := range e.Record.Events() {
		s.addEvent(e.Seq, ev)
	}
	if s.Decisions > 0 {
		s.Agreement = max(0, 1-float64(s.Differences)/float64(s.Decisions))
	}
}

// addEvent counts one event of the record at seq.
func (s *ShadowSummary) addEvent(seq uint64, ev gated.AuditEvent) {
	switch ev.Event {
	case gated.EventPolicyDecided:
		d, err := gated.DecodeAuditData[gated.PolicyDecidedData](ev)
		if err != nil || d.ShadowRevision == "" {
			return
		}
		s.Decisions++
		s.ShadowRevisions[d.ShadowRevision]++
	case gated.EventPolicyShadowDiffers:
		d, err := DecodeShadowDiffers(ev.Data)
		if err != nil {
			s.invalid(fmt.Sprintf("seq %d: %v", seq, err))
			return
		}
		d.Seq, d.At, d.Tenant, d.ProposalID = seq, ev.At, ev.Tenant, ev.ProposalID
		s.Differences++
		for _, k := range d.Kinds {
			s.ByKind[k]++
		}
		for _, r := range d.Rules {
			s.ByRule[r]++
		}
		s.ByTenant[d.Tenant]++
		s.ByAction[d.Action]++
		s.ByOutcome[d.Live.Outcome+" -> "+d.Shadow.Outcome]++
		if len(s.First) < s.limit {
			s.First = append(s.First, d)
		}
	}
}

func (s *ShadowSummary) invalid(why string) {
	if s.Invalid == 0 {
		s.FirstInvalid = why
	}
	s.Invalid++
}

// WriteText prints the summary as gated policy shadow does: the counts,
// the first differences and the invalid records.
func (s *ShadowSummary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "decisions with a shadow: %d\ndifferences: %d\nagreement: %.4f\n", s.Decisions, s.Differences, s.Agreement)
	counts := func(title string, m map[string]int) {
		if len(m) == 0 {
			return
		}
		fmt.Fprintf(w, "%s:\n", title)
		keys := slices.Sorted(maps.Keys(m))
		slices.SortStableFunc(keys, func(a, b string) int { return m[b] - m[a] })
		for _, k := range keys {
			fmt.Fprintf(w, "  %-40s %d\n", orDash(k), m[k])
		}
	}
	counts("shadow revisions", s.ShadowRevisions)
	counts("by kind", s.ByKind)
	counts("by outcome (live -> shadow)", s.ByOutcome)
	counts("by rule", s.ByRule)
	counts("by tenant", s.ByTenant)
	counts("by action", s.ByAction)
	if len(s.First) > 0 {
		fmt.Fprintf(w, "first differences:\n")
	}
	for _, d := range s.First {
		fmt.Fprintf(w, "  seq %d %s %s/%s %s: live %s%s, shadow %s%s [%s]\n", d.Seq, d.At.Format(time.RFC3339), d.Tenant, d.ProposalID, d.Action,
			d.Live.Outcome, shadowDetail(d.Live.Denies, d.Live.Route, d.Live.Error), d.Shadow.Outcome, shadowDetail(d.Shadow.Denies, d.Shadow.Route, d.Shadow.Error), strings.Join(d.Kinds, ", "))
	}
	if s.Invalid > 0 {
		fmt.Fprintf(w, "invalid records: %d (first: %s)\n", s.Invalid, s.FirstInvalid)
	}
}

// shadowDetail is one side's denies, route or error in a few words.
func shadowDetail(denies []gated.Deny, route *gated.Route, err string) string {
	switch {
	case err != "":
		return " (" + err + ")"
	case len(denies) > 0:
		rules := make([]string, 0, len(denies))
		for _, d := range denies {
			rules = append(rules, d.Rule)
		}
		return " (" + strings.Join(rules, ", ") + ")"
	case route != nil && route.Required:
		return fmt.Sprintf(" (to %s, quorum %d)", orDash(route.Persona), route.Quorum)
	}
	return ""
}
