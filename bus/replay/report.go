package replay

import (
	"maps"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

// maxNamed bounds how many unrebuildable proposals the report names.
const maxNamed = 100

// Report is what a replay found. It is the JSON document `gated policy
// replay --format json` prints.
type Report struct {
	// Revision is the candidate policy's.
	Revision string `json:"revision"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	Records  uint64 `json:"records"`
	// Intact is false when the range check found a problem (Problems).
	Intact   bool            `json:"intact"`
	Problems []audit.Problem `json:"problems"`
	// Integrity says what the range check covered: MACs, the range's end.
	Integrity Integrity `json:"integrity"`
	// Verdicts is how many verdicts the range holds; Replayed how many
	// of them were decided again.
	Verdicts int `json:"verdicts"`
	Replayed int `json:"replayed"`
	Flips    int `json:"flips"`
	// Outcomes counts old -> new outcomes, e.g. "approved -> rejected".
	Outcomes      map[string]int `json:"outcomes"`
	FlipsByRule   map[string]int `json:"flips_by_rule"`
	FlipsByTenant map[string]int `json:"flips_by_tenant"`
	FlipsByAction map[string]int `json:"flips_by_action"`
	// ReviewReused counts proposals both policies send to review, whose
	// recorded review result is kept: their reviewers are unchanged.
	ReviewReused int `json:"review_reused"`
	// ReviewStale counts such proposals whose recorded reviewer changed
	// in the candidate set-up (or cannot be told): their recorded result
	// is kept in the counts above, and the first 100 are named.
	ReviewStale      int       `json:"review_stale"`
	ReviewStaleNamed []Missing `json:"review_stale_named"`
	// Rereview is what the re-review of Config.Rereview found; absent
	// without one.
	Rereview *RereviewReport `json:"rereview,omitempty"`
	// ReviewChanged counts proposals both policies send to review, but
	// not to the same reviewers (persona, quorum, also): not a flip of
	// outcome, yet the recorded review does not stand for the candidate.
	// ReviewChanges names them, as many as the flips listed.
	ReviewChanged int            `json:"review_changed"`
	ReviewChanges []ReviewChange `json:"review_changes"`
	// Differences counts the proposals by kind of difference between the
	// recorded and the candidate's policy decision, as shadow mode counts
	// them (engine.CompareShadow): error, outcome (a flip), denies, route.
	Differences map[string]int `json:"differences"`
	// NotPolicy counts verdicts the policy did not decide, by stage
	// (invalid proposals, duplicates): the candidate cannot change them.
	NotPolicy map[string]int `json:"not_policy"`
	// Unrebuildable counts the verdicts whose input could not be rebuilt;
	// UnrebuildableNamed names the first 100 of them.
	Unrebuildable      int       `json:"unrebuildable"`
	UnrebuildableNamed []Missing `json:"unrebuildable_named"`
	Shown              []Flip    `json:"first_flips"`
	// Workers is how many goroutines decoded and decided. Seconds is the
	// wall time of the whole replay and Rate the proposals it decided per
	// second of it, reading included. The read and the decisions overlap:
	// ReadSeconds is the wall time the reader spent reading, not waiting
	// for the workers, and DecideSeconds the wall time the workers had
	// records to decode and decide, not waiting for the reader; each rate
	// is what that side sustains.
	Workers       int     `json:"workers"`
	Seconds       float64 `json:"seconds"`
	Rate          float64 `json:"replayed_per_second"`
	ReadSeconds   float64 `json:"read_seconds"`
	DecideSeconds float64 `json:"decide_seconds"`
	ReadRate      float64 `json:"read_records_per_second"`
	DecideRate    float64 `json:"decided_per_second"`

	reviewers *Reviewers
	// outcomeKeys are the keys of Outcomes, made once per pair.
	outcomeKeys map[[2]gated.Outcome]string
}

// Missing names a verdict whose input could not be rebuilt, or whose
// recorded review is stale, and says why.
type Missing struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Seq    uint64 `json:"seq"`
	Why    string `json:"why"`
}

// Decision is one side of a flip: the recorded decision or the
// candidate's.
type Decision struct {
	Outcome gated.Outcome `json:"outcome"`
	Stage   gated.Stage   `json:"stage"`
	Reason  string        `json:"reason"`
	Denies  []gated.Deny  `json:"denies"`
}

// Flip is one proposal whose outcome flipped.
type Flip struct {
	Tenant string   `json:"tenant"`
	ID     string   `json:"id"`
	Action string   `json:"action"`
	Seq    uint64   `json:"seq"`
	Old    Decision `json:"old"`
	New    Decision `json:"new"`
	// Kinds and Rules are how the two policy decisions differ, as
	// engine.CompareShadow says (and shadow mode records).
	Kinds []string `json:"kinds"`
	Rules []string `json:"rules"`
}

// ReviewChange is a proposal both policies send to review, but not to
// the same reviewers.
type ReviewChange struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Action string `json:"action"`
	Seq    uint64 `json:"seq"`
	// Old is the recorded routing, New the candidate's.
	Old   *gated.Route `json:"old_review"`
	New   *gated.Route `json:"new_review"`
	Kinds []string     `json:"kinds"`
}

// newReport is an empty report of a replay under revision.
func newReport(revision string) *Report {
	return &Report{
		Revision: revision, Outcomes: map[string]int{}, FlipsByRule: map[string]int{},
		FlipsByTenant: map[string]int{}, FlipsByAction: map[string]int{}, NotPolicy: map[string]int{},
		UnrebuildableNamed: []Missing{}, Shown: []Flip{},
		ReviewChanges: []ReviewChange{}, Differences: map[string]int{}, ReviewStaleNamed: []Missing{},
	}
}

// missing counts a verdict whose input cannot be rebuilt, and names it.
func (rep *Report) missing(r *replayEvent, why string) {
	rep.Unrebuildable++
	if len(rep.UnrebuildableNamed) < maxNamed {
		rep.UnrebuildableNamed = append(rep.UnrebuildableNamed, Missing{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Seq: r.Seq, Why: why})
	}
}

// outcomeKey is the key of Outcomes for a change from old to cur.
func (rep *Report) outcomeKey(old, cur gated.Outcome) string {
	pair := [2]gated.Outcome{old, cur}
	k, ok := rep.outcomeKeys[pair]
	if !ok {
		k = string(old) + " -> " + string(cur)
		if rep.outcomeKeys == nil {
			rep.outcomeKeys = map[[2]gated.Outcome]string{}
		}
		rep.outcomeKeys[pair] = k
	}
	return k
}

// merge adds the counts and lists of o, a worker's report, to rep. The
// lists are left in the order they come; Run sorts and cuts
// them once every worker's report is in.
func (rep *Report) merge(o *Report) {
	rep.Verdicts += o.Verdicts
	rep.Replayed += o.Replayed
	rep.Flips += o.Flips
	rep.ReviewReused += o.ReviewReused
	rep.ReviewStale += o.ReviewStale
	rep.ReviewChanged += o.ReviewChanged
	rep.Unrebuildable += o.Unrebuildable
	for _, m := range []struct{ to, from map[string]int }{
		{rep.Outcomes, o.Outcomes}, {rep.FlipsByRule, o.FlipsByRule}, {rep.FlipsByTenant, o.FlipsByTenant},
		{rep.FlipsByAction, o.FlipsByAction}, {rep.NotPolicy, o.NotPolicy}, {rep.Differences, o.Differences},
	} {
		for k, n := range maps.All(m.from) {
			m.to[k] += n
		}
	}
	rep.Shown = append(rep.Shown, o.Shown...)
	rep.UnrebuildableNamed = append(rep.UnrebuildableNamed, o.UnrebuildableNamed...)
	rep.ReviewStaleNamed = append(rep.ReviewStaleNamed, o.ReviewStaleNamed...)
	rep.ReviewChanges = append(rep.ReviewChanges, o.ReviewChanges...)
}

// firstN is the first n items of s, or all of them when n is negative
// (Config.Show -1).
func firstN[T any](s []T, n int) []T {
	if n < 0 {
		return s
	}
	return s[:min(len(s), n)]
}
