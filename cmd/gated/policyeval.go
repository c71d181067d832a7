package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

type policyEvalOptions struct {
	bundle      server.PolicySource
	file        string
	persona     string
	personasDir string
	history     string
	session     string
	now         string
	format      string
	explain     bool
}

func policyEvalCmd() *cobra.Command {
	o := &policyEvalOptions{}
	c := &cobra.Command{
		Use:   "eval -f proposal.json",
		Short: "Show what the policy decides for one proposal, and which rules fired",
		Long: `eval decodes one proposal as strictly as the gate does and evaluates the
policy on it locally, with no NATS and no reviewer: the persona is --persona,
else the proposal's reviewer, else "reviewer", and when the policy routes the
review to another persona eval evaluates again with that one, as the gate
does. It prints what the gate decides before any review, with the gate's
own outcome function: approved or rejected at policy, blocked at review,
or needs review. --history is a JSON array of verdicts (as gated stores
them) that the policy sees as the recent verdicts on the proposal's target.
--session is the proposing agent's flow state as the policy sees it in
input.session: a JSON object whose "recent" lists the actions it executed
({"proposal_id", "action", "labels", "at"}); its labels and since are
derived from them. Without --session, a bundle whose flow rules are on sees
no state and denies (flow_state_unreadable), as the gate does when it
cannot read one.
--explain adds topdown's full trace of the evaluation (as "opa eval
--explain full" prints it) and the rules the planned evaluator evaluated.
Exit status: 0 the gate approves at policy or routes to review, 3 it
rejects, blocks or fails the proposal before review,
2 bad usage, 1 any other error (an invalid proposal or history, a bundle that
does not load).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPolicyEval(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := c.Flags()
	registerPolicySource(f, &o.bundle)
	f.StringVarP(&o.file, "file", "f", "", "proposal JSON file, or - for standard input")
	f.StringVar(&o.persona, "persona", "", "evaluate with this persona (default: the proposal's reviewer, else reviewer)")
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas")
	f.StringVar(&o.history, "history", "", "JSON file holding an array of recent verdicts on the proposal's target")
	f.StringVar(&o.session, "session", "", `JSON file holding the agent's flow state: {"recent": [executed actions]}`)
	f.StringVar(&o.now, "now", "", "evaluate at this RFC 3339 time (default: now)")
	f.StringVar(&o.format, "format", "text", "text or json")
	f.BoolVar(&o.explain, "explain", false, "also print topdown's full trace and the rules the planned evaluator evaluated")
	return c
}

func runPolicyEval(ctx context.Context, stdin io.Reader, w, errw io.Writer, o *policyEvalOptions) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if o.file == "" {
		return usageError("-f is required: a proposal JSON file, or - for standard input")
	}
	now, err := parseNow(o.now)
	if err != nil {
		return err
	}
	data, err := readInput(o.file, stdin)
	if err != nil {
		return usageError("reading %s: %v", o.file, err)
	}
	p, err := gated.DecodeProposal(data, "", "", gated.Limits{})
	if err != nil {
		name := o.file
		if name == "-" {
			name = "standard input"
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	history, err := readHistory(o.history)
	if err != nil {
		return err
	}
	session, err := readSession(o.session)
	if err != nil {
		return err
	}
	reg, err := loadPersonas(o.personasDir, errw)
	if err != nil {
		return err
	}
	if o.persona != "" {
		if _, ok := reg.Persona(o.persona); !ok {
			return usageError("--persona %q: no such persona (known: %s)", o.persona, strings.Join(reg.Names(), ", "))
		}
	}
	b, _, err := loadPolicyBundle(&o.bundle, nil, errw)
	if err != nil {
		return err
	}
	ev, err := policies.Compile(ctx, b, o.bundle.CompileOptions()...)
	if err != nil {
		return err
	}
	run, err := policies.EvalProposal(ctx, ev, reg, engine.PolicyInput{Proposal: p, History: history, Session: session, Now: now}, o.persona, o.explain)
	if err != nil {
		return err
	}
	if o.format == "json" {
		err = writeJSON(w, policies.EvalDocument(run))
	} else {
		err = policies.WriteEvalText(w, run)
	}
	if err != nil {
		return err
	}
	if settled, ok := run.Settled(); ok && settled.Outcome != gated.OutcomeApproved {
		return &exitError{code: exitNotApproved, err: fmt.Errorf("%s at %s", settled.Outcome, settled.Stage), silent: true}
	}
	return nil
}

// parseNow reads --now, defaulting to the current time.
func parseNow(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageError("--now %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return t, nil
}

// loadPersonas loads the built-in personas plus those under dir, printing
// the loader's warnings.
func loadPersonas(dir string, errw io.Writer) (*personas.Registry, error) {
	if dir != "" {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			return nil, usageError("--personas %s: not a directory", dir)
		}
	}
	reg, warnings, err := personas.Load(dir)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintln(errw, "gated: warning:", w)
	}
	return reg, nil
}

// readHistory reads --history: a JSON array of verdicts.
func readHistory(name string) ([]gated.Verdict, error) {
	if name == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, usageError("reading --history: %v", err)
	}
	return policies.DecodeHistory(name, raw)
}

// readSession reads --session: an agent's flow state, {"recent": [...]},
// strictly (an unknown member is an error, not a state read as empty).
func readSession(name string) (*gated.SessionState, error) {
	if name == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, usageError("reading --session: %v", err)
	}
	var doc struct {
		Recent []gated.ExecutedAction `json:"recent"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, usageError("--session %s: not a flow state: %v", name, err)
	}
	if dec.More() {
		return nil, usageError("--session %s: more than one JSON value", name)
	}
	for i, a := range doc.Recent {
		if !gated.ValidAction(a.Action) || a.At.IsZero() {
			return nil, usageError("--session %s: recent[%d] needs an action and an at time", name, i)
		}
		for _, l := range a.Labels {
			if !gated.ValidLabel(l) {
				return nil, usageError("--session %s: recent[%d]: label %q must match [a-z0-9_-]{1,64}", name, i, l)
			}
		}
	}
	st := gated.NewSessionState(doc.Recent)
	return &st, nil
}
