package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
)

// The records a replay reads are written by the engine: policy.decided
// from a struct the engine keeps to itself, review.started and
// review.finished from maps. A replay reads only the members it needs,
// into the types below; onepass.go reads the same members faster, held
// to encoding/json's reading of these types by its fuzz targets.

// recordedPolicy is what replay reads of a policy.decided record.
type recordedPolicy struct {
	Action      string              `json:"action"`
	Denies      []gated.Deny        `json:"denies"`
	Review      engine.Route        `json:"review"`
	Run         *engine.RunPolicy   `json:"run"`
	Error       string              `json:"error"`
	Input       *engine.ReplayInput `json:"input"`
	SOP         string              `json:"sop"`
	DeniedTools []string            `json:"denied_tools"`

	// reviews are the proposal's reviews, from their records; reviewErr
	// says why they cannot be read, when a record does not decode.
	reviews   []*recordedReview
	reviewErr string
}

// decodeRecordedPolicy reads a policy.decided record's data; data that
// does not decode is kept as the reason the input cannot be rebuilt.
func decodeRecordedPolicy(data []byte) *recordedPolicy {
	var p recordedPolicy
	if err := json.Unmarshal(data, &p); err != nil {
		return &recordedPolicy{Error: "the policy.decided record does not decode: " + err.Error()}
	}
	return &p
}

// settledAtPolicy says whether the recorded decision settled the proposal
// before any review.
func (p *recordedPolicy) settledAtPolicy() bool {
	return len(p.Denies) > 0 || !p.Review.Required || p.Review.Blocked != ""
}

// recordedVerdict is what replay reads of a verdict.decided record: the
// recorded decision it compares with the candidate's. The other members
// of the verdict are neither read nor checked.
type recordedVerdict struct {
	Outcome gated.Outcome `json:"outcome"`
	Stage   gated.Stage   `json:"stage"`
	Reason  string        `json:"reason"`
}

// recordedReview is what a replay reads of one review of a proposal: its
// review.started record and, once it ended, its review.finished record.
type recordedReview struct {
	Seq uint64
	// PolicyRevision is the revision of the policy that routed the review.
	PolicyRevision string
	Started        reviewStartedRecord
	// Finished is nil while the range holds no review.finished record of
	// the review.
	Finished *reviewFinishedRecord
}

// reviewStartedRecord is the data of a review.started record that a
// replay reads.
type reviewStartedRecord struct {
	ReviewID        string   `json:"review_id"`
	Persona         string   `json:"persona"`
	Plugin          string   `json:"plugin"`
	Tools           []string `json:"tools"`
	PersonaRevision string   `json:"persona_revision"`
	Model           string   `json:"model"`
}

// reviewFinishedRecord is the data of a review.finished record that a
// replay reads.
type reviewFinishedRecord struct {
	ReviewID      string `json:"review_id"`
	Plugin        string `json:"plugin"`
	PluginVersion string `json:"plugin_version"`
	Decision      string `json:"decision"`
	Outcome       string `json:"outcome"`
	Error         string `json:"error"`
	Why           string `json:"why"`
	Model         string `json:"model"`
}

// category is the review's result as a re-review compares it: the
// decision of a review that ended (approve, reject), or what ended it
// otherwise (error, timeout, blocked), which is never an approval.
func (f *reviewFinishedRecord) category() string {
	switch {
	case f.Error != "" && f.Outcome != "":
		return f.Outcome
	case f.Error != "":
		return string(gated.OutcomeError)
	case f.Decision == "":
		return "none"
	}
	return f.Decision
}

// why is the one line that explains the recorded result.
func (f *reviewFinishedRecord) why() string {
	if f.Error != "" {
		return f.Error
	}
	return f.Why
}

// decodeReviewStarted reads a review.started record's data.
func decodeReviewStarted(data []byte) (reviewStartedRecord, error) {
	var s reviewStartedRecord
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("decoding a review.started record: %w", err)
	}
	return s, s.check()
}

// check refuses a review.started record without what replay needs of it.
func (s *reviewStartedRecord) check() error {
	if s.ReviewID == "" || s.Persona == "" {
		return errors.New("decoding a review.started record: review_id and persona are required")
	}
	return nil
}

// decodeReviewFinished reads a review.finished record's data.
func decodeReviewFinished(data []byte) (reviewFinishedRecord, error) {
	var f reviewFinishedRecord
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("decoding a review.finished record: %w", err)
	}
	return f, f.check()
}

// check refuses a review.finished record without what replay needs of it.
func (f *reviewFinishedRecord) check() error {
	if f.ReviewID == "" {
		return errors.New("decoding a review.finished record: review_id is required")
	}
	return nil
}

// reviewRecord is a review.started or review.finished record's data as
// replay reads it: started or finished (the one of its event), or err.
type reviewRecord struct {
	started  *reviewStartedRecord
	finished *reviewFinishedRecord
	err      error
}

// decodeReviewRecord reads the data of r, a review.started or
// review.finished record, with encoding/json.
func decodeReviewRecord(r *replayEvent) reviewRecord {
	var rr reviewRecord
	switch r.Event.Event {
	case engine.EventReviewStarted:
		s, err := decodeReviewStarted(r.Event.Data)
		rr.started, rr.err = &s, err
	case engine.EventReviewDone:
		f, err := decodeReviewFinished(r.Event.Data)
		rr.finished, rr.err = &f, err
	}
	return rr
}

// addReviewRecord keeps a review.started or review.finished record of the
// proposal p decided. A record that does not decode is kept as the reason
// the proposal's reviews cannot be checked.
func (p *recordedPolicy) addReviewRecord(r *replayEvent) {
	p.addReview(r, decodeReviewRecord(r))
}

// addReview keeps rr, the data of r, a review.started or review.finished
// record of the proposal p decided, as addReviewRecord does.
func (p *recordedPolicy) addReview(r *replayEvent, rr reviewRecord) {
	if rr.err != nil {
		p.reviewErr = fmt.Sprintf("seq %d: %v", r.Seq, rr.err)
		return
	}
	switch {
	case rr.started != nil:
		p.reviews = append(p.reviews, &recordedReview{Seq: r.Seq, PolicyRevision: r.Event.PolicyRevision, Started: *rr.started})
	case rr.finished != nil:
		f := rr.finished
		for _, rv := range slices.Backward(p.reviews) {
			if rv.Started.ReviewID == f.ReviewID {
				rv.Finished = f
				return
			}
		}
		p.reviewErr = fmt.Sprintf("seq %d: review.finished of review %s, which the range never started", r.Seq, f.ReviewID)
	}
}
