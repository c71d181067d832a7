package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gated/gated"
)

// ReviewFailure says how a review failed, in words gated chose: the
// verdict's reason names it with a sentence of gated's own, and the
// review.finished audit record carries it as "failure", beside the
// reviewer's error itself. A reviewer's error text (a plugin's panic and
// its stack, a provider's message) is never part of a verdict: the
// tenant reads that the reviewer failed and how, the operator reads why
// in gated's log and audit trail.
type ReviewFailure string

// The ways a review can fail.
const (
	// FailureCrashed: the reviewer's process panicked or exited, or its
	// connection broke, during the review.
	FailureCrashed ReviewFailure = "crashed"
	// FailureUnresponsive: the reviewer stopped answering its health
	// checks during the review, and gated ended it.
	FailureUnresponsive ReviewFailure = "unresponsive"
	// FailureUnusableAnswer: the reviewer answered with something gated
	// could not read (too large, not decodable).
	FailureUnusableAnswer ReviewFailure = "unusable_answer"
	// FailureReported: the reviewer failed the review with an error of its
	// own (a provider's error, a request it refused).
	FailureReported ReviewFailure = "reported_error"
	// FailureStopped: gated stopped the reviewer during the review, as it
	// shut down.
	FailureStopped ReviewFailure = "stopped"
	// FailureTimeout: the review passed its deadline. The engine reads it
	// from the review's context, never from a ReviewError.
	FailureTimeout ReviewFailure = "timeout"
	// FailureUnavailable: the reviewer refused the work (ErrNoReviewer);
	// the proposal is blocked. It is also how a Router's error that says
	// nothing of how it failed reads.
	FailureUnavailable ReviewFailure = "unavailable"
	// FailureNotStarted: a Router could not start the reviewer's plugin
	// (a launch or handshake that failed, or a relaunch held back after
	// launches that failed).
	FailureNotStarted ReviewFailure = "not_started"
	// FailureNotConfigured: a Router runs no plugin of the name the
	// persona gives.
	FailureNotConfigured ReviewFailure = "not_configured"
	// FailureUnknown: the reviewer's error does not say how it failed.
	FailureUnknown ReviewFailure = "failed"
)

// failureWords are what a verdict says of a reviewer that failed in each
// way, after its name. They are the only words a failed review puts in a
// verdict; a failure not listed reads as FailureUnknown.
var failureWords = map[ReviewFailure]string{
	FailureCrashed:        "crashed",
	FailureUnresponsive:   "stopped responding",
	FailureUnusableAnswer: "returned an answer gated could not read",
	FailureReported:       "reported an error",
	FailureStopped:        "was stopped as gated shut down",
	FailureUnavailable:    "was not available",
	FailureNotStarted:     "could not be started",
	FailureNotConfigured:  "is not configured",
	FailureUnknown:        "failed",
}

// ReviewError is a Reviewer's error that says how the review failed. A
// Reviewer returns one so that the verdict can say more than that the
// review failed; any other error reads as FailureUnknown. A Router returns
// one, wrapping ErrNoReviewer, so that a blocked verdict can say why the
// reviewer could not take the review (FailureNotStarted,
// FailureNotConfigured, FailureStopped); any other error of a Router reads
// as FailureUnavailable. It wraps Err, so errors.Is sees ErrNoReviewer and
// context errors through it.
type ReviewError struct {
	// Plugin is the name gated's configuration gives the reviewer, never
	// what the reviewer calls itself; empty: the persona's plugin.
	Plugin string
	// Failure is how the review failed. An Err that wraps
	// context.DeadlineExceeded is a timeout and one that wraps
	// ErrNoReviewer a refusal, whatever Failure says; neither is one
	// without.
	Failure ReviewFailure
	// Err is what went wrong, in the reviewer's words or the host's: for
	// gated's log and the audit trail only.
	Err error
}

func (e *ReviewError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ReviewError) Unwrap() error { return e.Err }

// maxReviewErrorBytes bounds the error a failed review's audit record
// keeps; the rest is cut.
const maxReviewErrorBytes = 16 << 10

// reviewFailure reads how a review failed with err: the verdict's outcome,
// the failure, and the plugin gated knows the reviewer by (the persona's
// plugin unless the reviewer's error names it). rctx is the review's
// context, whose deadline is the review's.
func reviewFailure(rctx context.Context, err error, persona *Persona) (gated.Outcome, ReviewFailure, string) {
	plugin := persona.Plugin
	var re *ReviewError
	if errors.As(err, &re) && re.Plugin != "" {
		plugin = re.Plugin
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(rctx.Err(), context.DeadlineExceeded):
		return gated.OutcomeTimeout, FailureTimeout, plugin
	case errors.Is(err, ErrNoReviewer):
		return gated.OutcomeBlocked, FailureUnavailable, plugin
	case re != nil:
		switch re.Failure {
		case FailureCrashed, FailureUnresponsive, FailureUnusableAnswer, FailureReported, FailureStopped:
			return gated.OutcomeError, re.Failure, plugin
		}
	}
	return gated.OutcomeError, FailureUnknown, plugin
}

// failureSentence is what a verdict says of a review that failed: the
// reviewer, as gated knows it, and how it failed, in words of
// failureWords. what is the part after the reviewer's name, which a
// quorum's reason lists.
func failureSentence(plugin string, persona *Persona, failure ReviewFailure, timeout time.Duration) (sentence, what string) {
	who := fmt.Sprintf("the reviewer of persona %s", persona.Name)
	if plugin != "" {
		who = fmt.Sprintf("reviewer %s (persona %s)", plugin, persona.Name)
	}
	what = failureWords[failure]
	if failure == FailureTimeout {
		what = fmt.Sprintf("timed out after %s", timeout)
	}
	return who + " " + what, what
}
