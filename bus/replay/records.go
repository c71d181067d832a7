package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gated/gated"
)

// The records a replay reads are written by the engine, and read here
// into the types the engine declares for their data (gated.AuditHead and
// gated.PolicyDecidedData, gated.ReviewStartedData,
// gated.ReviewFinishedData, gated.Verdict). onepass.go reads
// policy.decided, which holds most of a replay's bytes, faster into the
// same types, held to encoding/json's reading by FuzzDecodeRecordedPolicy.

// recordedPolicy is a policy.decided record's data, with the proposal's
// reviews.
type recordedPolicy struct {
	gated.AuditHead
	gated.PolicyDecidedData

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
		p = recordedPolicy{}
		p.Error = "the policy.decided record does not decode: " + err.Error()
	}
	return &p
}

// settledAtPolicy says whether the recorded decision settled the proposal
// before any review.
func (p *recordedPolicy) settledAtPolicy() bool {
	return len(p.Denies) > 0 || !p.Review.Required || p.Review.Blocked != ""
}

// recordedReview is what a replay reads of one review of a proposal: its
// review.started record and, once it ended, its review.finished record.
type recordedReview struct {
	Seq uint64
	// PolicyRevision is the revision of the policy that routed the review.
	PolicyRevision string
	Started        gated.ReviewStartedData
	// Finished is nil while the range holds no review.finished record of
	// the review.
	Finished *gated.ReviewFinishedData
}

// reviewCategory is a review's result as a re-review compares it: the
// decision of a review that ended (approve, reject), or what ended it
// otherwise (error, timeout, blocked), which is never an approval.
func reviewCategory(f *gated.ReviewFinishedData) string {
	switch {
	case f.Error != "" && f.Outcome != "":
		return string(f.Outcome)
	case f.Error != "":
		return string(gated.OutcomeError)
	case f.Decision == "":
		return "none"
	}
	return string(f.Decision)
}

// reviewWhy is the one line that explains a review's recorded result.
func reviewWhy(f *gated.ReviewFinishedData) string {
	if f.Error != "" {
		return f.Error
	}
	return f.Why
}

// reviewRecord is a review.started or review.finished record's data as
// replay reads it: started or finished (the one of its event), or err.
type reviewRecord struct {
	started  *gated.ReviewStartedData
	finished *gated.ReviewFinishedData
	err      error
}

// decodeReviewRecord reads the data of r, a review.started or
// review.finished record, into its declared type, refusing one without
// what replay needs of it.
func decodeReviewRecord(r *replayEvent) reviewRecord {
	var rr reviewRecord
	switch r.Event.Event {
	case gated.EventReviewStarted:
		s, err := gated.DecodeAuditData[gated.ReviewStartedData](r.Event)
		if err == nil && (s.ReviewID == "" || s.Persona == "") {
			err = errors.New("review_id and persona are required")
		}
		rr.started, rr.err = &s, wrapReviewErr(r.Event.Event, err)
	case gated.EventReviewDone:
		f, err := gated.DecodeAuditData[gated.ReviewFinishedData](r.Event)
		if err == nil && f.ReviewID == "" {
			err = errors.New("review_id is required")
		}
		rr.finished, rr.err = &f, wrapReviewErr(r.Event.Event, err)
	}
	return rr
}

// wrapReviewErr says which record a review record's error is of.
func wrapReviewErr(event string, err error) error {
	if err != nil {
		return fmt.Errorf("decoding a %s record: %w", event, err)
	}
	return nil
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
