package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/engine"
)

// exitRefused is the status of `operator decide` when gated refuses the
// decision, or there is nothing to decide.
const exitRefused = 3

func operatorCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "operator",
		Short: "Decide held actions and the manual criteria of held run reviews, and clear agents' flow state, with a signed message",
		Long: `An action the policy holds for an operator, and a run review whose required
manual criteria are not yet judged, are held at outcome blocked until an
operator decides them (an action only until its deadline). An operator is an nkey user key
listed in the file gated serve --operators reads; decisions are signed with the
key's seed and sent to gated.operator.<tenant>.<proposal_id>. An operator also
clears an agent's flow state (clear-flow) with a signed, audited decision.
See docs/OPERATORS.md.`,
	}
	c.AddCommand(operatorKeygenCmd(), operatorDecideCmd(), operatorClearFlowCmd())
	return c
}

func operatorKeygenCmd() *cobra.Command {
	var (
		out     string
		id      string
		tenants []string
	)
	c := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Make an operator's nkey: the seed into FILE, the public key on stdout",
		Long: `keygen makes a new nkey user key pair for an operator. The seed, the secret
that signs decisions, goes into FILE with mode 0600; keygen never overwrites a
file. The public key is printed, followed by the entry to add to gated's
operators file (gated serve --operators). --id and --tenant fill the entry in.

Exit status: 0 written, 2 bad usage or FILE exists, 1 failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError("--out is required: the file to write the seed into")
			}
			if id != "" && !operator.ValidID(id) {
				return usageError("--id %q must match [A-Za-z0-9._@-]{1,64}", id)
			}
			for _, t := range tenants {
				if !gated.ValidTenant(t) || t == gated.UnknownTenant {
					return usageError("--tenant %q must match [a-z0-9_-]{1,64}", t)
				}
			}
			pub, err := operator.WriteSeed(out)
			if errors.Is(err, os.ErrExist) {
				return usageError("--out %s exists; keygen never overwrites a seed: choose another file", out)
			}
			if err != nil {
				return err
			}
			if id == "" {
				id = "OPERATOR_ID"
			}
			list := "[]  # every tenant"
			if len(tenants) > 0 {
				list = "[" + strings.Join(tenants, ", ") + "]"
			}
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, pub)
			fmt.Fprintf(w, "\n# Add to gated's operators file (gated serve --operators FILE):\noperators:\n  - id: %s\n    key: %s\n    tenants: %s\n", id, pub, list)
			fmt.Fprintf(cmd.ErrOrStderr(), "gated: wrote the seed to %s (mode 0600): it signs decisions; keep it with the operator, never in gated's files\n", out)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&out, "out", "", "file to write the seed into (created with mode 0600; never overwritten)")
	_ = c.MarkFlagFilename("out")
	f.StringVar(&id, "id", "", "operator id for the printed operators-file entry")
	f.StringSliceVar(&tenants, "tenant", nil, "tenant the operator may decide for, for the printed entry (repeatable; none: every tenant)")
	return c
}

func operatorDecideCmd() *cobra.Command {
	var (
		criteria   []string
		operatorID string
		seedFile   string
		reason     string
		url        string
		timeout    time.Duration
		approve    bool
		reject     bool
		conn       natsConnOptions
	)
	c := &cobra.Command{
		Use:   "decide TENANT PROPOSAL_ID (--approve | --reject | --criterion ID=pass|fail[:reason] ...) --operator ID --seed-file FILE",
		Short: "Decide an action or judge the manual criteria of a run held for an operator, and print the verdict that replaces it",
		Long: `decide reads the verdict gated holds for proposal PROPOSAL_ID of TENANT, checks
that it awaits an operator and that the --criterion flags judge exactly the
manual criteria it awaits, signs the decision with the operator's seed and
sends it to gated.operator.TENANT.PROPOSAL_ID. gated checks the signature
against its operators file and replaces the held verdict: approved when every
criterion passes, else rejected, with the failed criteria as the run's missing
work (and a continuation or escalation). The new verdict is printed as JSON.

Give one --criterion per awaited criterion: ID=pass or ID=fail, optionally
followed by :reason (a failure's reason is what the worker is told to fix).

An action the policy held for an operator (its verdict has awaiting_operator)
is decided with --approve or --reject instead, before its deadline: approved
or rejected, with your id, key and --reason in the verdict. After the deadline
the action times out and no decision is accepted.

Exit status: 0 accepted (whatever the new outcome), 3 refused (no verdict, not
awaiting an operator, or gated refused the decision: the message says why), 2
bad usage (arguments, flags, an unreadable seed file, criteria that do not
match the awaited ones), 1 failure (NATS unreachable, no gated serving
operator decisions, gated's store or audit trail failed).`,
		Args: func(c *cobra.Command, args []string) error {
			if err := wantArgs(c, args, "TENANT", "PROPOSAL_ID"); err != nil {
				return err
			}
			if !gated.ValidTenant(args[0]) || args[0] == gated.UnknownTenant {
				return usageError("tenant %q must match [a-z0-9_-]{1,64}", args[0])
			}
			if !gated.ValidID(args[1]) {
				return usageError("proposal id %q must match [A-Za-z0-9_-]{1,128}", args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, id := args[0], args[1]
			switch {
			case operatorID == "":
				return usageError("--operator is required: your id in gated's operators file")
			case !operator.ValidID(operatorID):
				return usageError("--operator %q must match [A-Za-z0-9._@-]{1,64}", operatorID)
			case seedFile == "":
				return usageError("--seed-file is required: the file gated operator keygen wrote")
			case timeout <= 0:
				return usageError("--timeout %s must be positive", timeout)
			case len(reason) > operator.MaxReasonBytes:
				return usageError("--reason is %d bytes, more than %d", len(reason), operator.MaxReasonBytes)
			case approve && reject:
				return usageError("--approve and --reject exclude each other")
			case (approve || reject) && len(criteria) > 0:
				return usageError("--approve and --reject decide a held action; --criterion judges a held run: give one or the other")
			case !approve && !reject && len(criteria) == 0:
				return usageError("give --approve or --reject for a held action, or --criterion ID=pass|fail for each criterion a held run awaits")
			}
			findings, err := operator.ParseCriteria(criteria)
			if err != nil {
				return usageError("%v", err)
			}
			seed, err := operator.ReadSeed(seedFile, cmd.ErrOrStderr())
			if err != nil {
				return usageError("%v", err)
			}

			nc, client, err := conn.client(url, "gated-operator")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			held, err := client.Verdict(ctx, tenant, id)
			if errors.Is(err, gated.ErrNotFound) {
				return &exitError{code: exitRefused, err: fmt.Errorf("no verdict stored for tenant %s, proposal %s: nothing to decide", tenant, id)}
			}
			if err != nil {
				return err
			}
			msg := operator.Message{Tenant: tenant, ProposalID: id, ProposalSHA256: held.ProposalSHA256, Operator: operatorID, Reason: reason}
			switch {
			case held.Outcome == gated.OutcomeBlocked && held.AwaitingOperator != nil:
				if !approve && !reject {
					return usageError("proposal %s of tenant %s is an action held for an operator: decide it with --approve or --reject", id, tenant)
				}
				msg.Decision = engine.OperatorReject
				if approve {
					msg.Decision = engine.OperatorApprove
				}
			case held.Outcome == gated.OutcomeBlocked && held.Run != nil && len(held.Run.AwaitingOperator) > 0:
				if approve || reject {
					return usageError("proposal %s of tenant %s is a run held on manual criteria %s: judge each with --criterion ID=pass|fail",
						id, tenant, strings.Join(held.Run.AwaitingOperator, ", "))
				}
				if err := operator.MatchAwaited(held.Run.AwaitingOperator, findings); err != nil {
					return usageError("%v", err)
				}
				msg.Criteria = findings
			default:
				return &exitError{code: exitRefused, err: fmt.Errorf("proposal %s of tenant %s is %s at stage %s, not awaiting an operator decision: %s",
					id, tenant, held.Outcome, held.Stage, held.Reason)}
			}
			body, hdr, err := operator.Sign(seed, msg)
			if err != nil {
				return usageError("%v", err)
			}
			v, err := operator.Send(ctx, nc, body, hdr)
			var refused *operator.Refusal
			switch {
			case errors.As(err, &refused) && errors.Is(err, operator.ErrRefused):
				return &exitError{code: exitRefused, err: err}
			case err != nil:
				return err
			}
			out, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVar(&criteria, "criterion", nil, "ID=pass or ID=fail, optionally :reason; one per awaited manual criterion (repeatable)")
	f.BoolVar(&approve, "approve", false, "approve an action held for an operator")
	f.BoolVar(&reject, "reject", false, "reject an action held for an operator")
	f.StringVar(&operatorID, "operator", "", "your operator id, as gated's operators file lists it")
	f.StringVar(&seedFile, "seed-file", "", "file holding your nkey seed (gated operator keygen --out)")
	_ = c.MarkFlagFilename("seed-file")
	f.StringVar(&reason, "reason", "", "why, for the verdict's reason and the audit trail")
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the look-up and gated's answer")
	conn.register(f)
	return c
}
