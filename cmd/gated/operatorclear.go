package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/flow"
	"github.com/gated/gated/bus/operator"
)

func operatorClearFlowCmd() *cobra.Command {
	var (
		operatorID string
		seedFile   string
		reason     string
		url        string
		timeout    time.Duration
		conn       natsConnOptions
	)
	c := &cobra.Command{
		Use:   "clear-flow TENANT AGENT --reason TEXT --operator ID --seed-file FILE",
		Short: "Clear an agent's flow state (what the flow rules remember it executed), with a signed, audited decision",
		Long: `clear-flow reads the flow state gated keeps for agent AGENT of TENANT (its
requested_by.agent: the labelled actions it executed over the flow window, in
the key-value bucket GATED_FLOWS), signs a clear of exactly that state with the
operator's seed and sends it to gated.flowclear.TENANT. gated checks the
signature and the operator's tenants against its operators file, appends a
flow.cleared event naming the operator, the reason and what the state held,
and only then clears it; a clear gated cannot audit clears nothing. A clear
names the revision of the state it read: once the agent executed another
labelled action, or once it is cleared, the same message clears nothing. A
corrupt state, which the flow rules deny on, is cleared the same way.

Exit status: 0 cleared, 3 refused (no state to clear, the state changed since
it was read, or gated refused the clear: the message says why), 2 bad usage
(arguments, flags, an unreadable seed file), 1 failure (NATS unreachable, no
gated serving operator decisions, gated's flow state or audit trail failed).`,
		Args: func(c *cobra.Command, args []string) error {
			if err := wantArgs(c, args, "TENANT", "AGENT"); err != nil {
				return err
			}
			if !gated.ValidTenant(args[0]) || args[0] == gated.UnknownTenant {
				return usageError("tenant %q must match [a-z0-9_-]{1,64}", args[0])
			}
			if strings.TrimSpace(args[1]) == "" {
				return usageError("agent must not be blank: give the agent's requested_by.agent")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, agent := args[0], args[1]
			switch {
			case operatorID == "":
				return usageError("--operator is required: your id in gated's operators file")
			case !operator.ValidID(operatorID):
				return usageError("--operator %q must match [A-Za-z0-9._@-]{1,64}", operatorID)
			case seedFile == "":
				return usageError("--seed-file is required: the file gated operator keygen wrote")
			case strings.TrimSpace(reason) == "":
				return usageError("--reason is required: why the agent's flow state may be forgotten, for the audit trail")
			case len(reason) > operator.MaxReasonBytes:
				return usageError("--reason is %d bytes, more than %d", len(reason), operator.MaxReasonBytes)
			case timeout <= 0:
				return usageError("--timeout %s must be positive", timeout)
			}
			seed, err := operator.ReadSeed(seedFile, cmd.ErrOrStderr())
			if err != nil {
				return usageError("%v", err)
			}
			nc, _, err := conn.client(url, "gated-operator")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			snap, err := readFlowState(ctx, nc, tenant, agent)
			if err != nil {
				return err
			}
			if snap.Revision == 0 {
				return &exitError{code: exitRefused, err: fmt.Errorf("agent %s of tenant %s has no flow state: nothing to clear", agent, tenant)}
			}
			body, hdr, err := operator.SignClear(seed, operator.ClearMessage{
				Tenant: tenant, Agent: agent, Revision: snap.Revision, Operator: operatorID, Reason: reason,
			})
			if err != nil {
				return usageError("%v", err)
			}
			cleared, err := operator.SendClear(ctx, nc, body, hdr)
			var refused *operator.Refusal
			switch {
			case errors.As(err, &refused) && errors.Is(err, operator.ErrRefused):
				return &exitError{code: exitRefused, err: err}
			case err != nil:
				return err
			}
			out, _ := json.MarshalIndent(cleared, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&operatorID, "operator", "", "your operator id, as gated's operators file lists it")
	f.StringVar(&seedFile, "seed-file", "", "file holding your nkey seed (gated operator keygen --out)")
	_ = c.MarkFlagFilename("seed-file")
	f.StringVar(&reason, "reason", "", "why, for the audit trail (required)")
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the state and gated's answer")
	conn.register(f)
	return c
}

// readFlowState reads the record of agent of tenant from GATED_FLOWS.
func readFlowState(ctx context.Context, nc *nats.Conn, tenant, agent string) (flow.Snapshot, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return flow.Snapshot{}, err
	}
	kv, err := js.KeyValue(ctx, flow.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return flow.Snapshot{}, fmt.Errorf("the key-value bucket %s does not exist: has gated serve run against this NATS server?", flow.Bucket)
	}
	if err != nil {
		return flow.Snapshot{}, fmt.Errorf("opening the key-value bucket %s: %w", flow.Bucket, err)
	}
	return flow.New(kv).Snapshot(ctx, tenant, agent)
}
