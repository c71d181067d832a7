package intake

import (
	"context"

	"github.com/gated/gated"
)

// FollowUpSender is how a worker stores the follow-up of a run verdict.
type FollowUpSender = func(ctx context.Context, v *gated.Verdict) error

// WrapFollowUp replaces how w stores follow-ups with wrap of its own
// sender, so that a test can watch or fail it. Call it before Start.
func WrapFollowUp(w *Worker, wrap func(send FollowUpSender) FollowUpSender) {
	w.followUp = wrap(w.followUp)
}
