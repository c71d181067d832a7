package engine

import (
	"context"
	"errors"

	"github.com/gated/gated"

	"github.com/gated/gated/internal/textcut"
)

// A Router's error is the operator's, as a reviewer's is: the host's
// error for a plugin that could not be started quotes what the plugin
// printed instead of its handshake, its stderr or its own Describe error,
// and a plugin may print anything there. The verdict says in gated's words
// which reviewer could not be routed and why; the error goes to the
// review.unrouted audit record and, from the host, to gated's log.

// routeFailure reads why a Router could not place a review of persona with
// err: the failure, one a Router may name (FailureNotStarted,
// FailureNotConfigured, FailureStopped) or else FailureUnavailable, and the
// plugin gated knows the reviewer by (the persona's plugin unless the
// error names it; empty for a persona of the default plugin that the
// error does not name).
func routeFailure(err error, persona *Persona) (ReviewFailure, string) {
	plugin := persona.Plugin
	var re *ReviewError
	if !errors.As(err, &re) {
		return FailureUnavailable, plugin
	}
	if re.Plugin != "" {
		plugin = re.Plugin
	}
	switch re.Failure {
	case FailureNotStarted, FailureNotConfigured, FailureStopped:
		return re.Failure, plugin
	}
	return FailureUnavailable, plugin
}

// unroutedWhy is what a verdict says of a reviewer that could not be
// routed, after the persona it was to review as: "reviewer sop could not
// be started", in words of failureWords.
func unroutedWhy(plugin string, failure ReviewFailure) string {
	who := "its reviewer"
	if plugin != "" {
		who = "reviewer " + plugin
	}
	return who + " " + failureWords[failure]
}

// unrouted records that the Router could not place a review of persona,
// with its error err, on the proposal's audit trail, and returns what the
// verdict says of it (unroutedWhy).
func (r *pass) unrouted(ctx context.Context, persona *Persona, err error) string {
	failure, plugin := routeFailure(err, persona)
	r.log.recordBestEffort(ctx, gated.EventReviewUnrouted, map[string]any{
		"persona": persona.Name, "plugin": plugin, "failure": failure,
		"error": textcut.Clip(err.Error(), maxReviewErrorBytes),
	})
	return unroutedWhy(plugin, failure)
}
