package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/natsconn"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/mcpgate"
	"github.com/gated/gated/policies"
)

// mcpGCPercent is gated mcp's GOGC unless the environment sets one.
const mcpGCPercent = 400

type mcpOptions struct {
	tenant      string
	agent       string
	session     string
	url         string
	conn        natsConnOptions
	upstream    string
	upstreamCmd string
	callTimeout time.Duration
	listen      string
	maxSessions int
	idleTimeout time.Duration
	catalog     string
	listDenied  string
	proposeRead bool
	wait        time.Duration
	bundle      server.PolicySource
	personasDir string
	printTools  bool
	logLevel    string
	logFormat   string
}

func mcpCmd() *cobra.Command {
	o := &mcpOptions{}
	c := &cobra.Command{
		Use:   "mcp [flags] [-- server command...]",
		Short: "Put the gate in front of an MCP server: each tools/call is a proposal",
		Long: `mcp is an MCP proxy. It starts the MCP server given after -- or by
--upstream-cmd (stdio), or connects to one with --upstream URL (streamable
HTTP), and offers it to an agent over stdio, or over streamable HTTP at
http://ADDR/mcp with --listen: its tools, resources, prompts, completion,
logging, progress, sampling and elicitation, each agent session over an
upstream session of its own, each forwarded request bounded by
--upstream-timeout. Over HTTP, at most --max-sessions agent sessions are
served at once, and a session idle for --session-idle-timeout is ended
with its upstream session.

Each tools/call becomes a proposal of --tenant, published through the fleet
client with every trust check it makes, and reaches the server only when
gated approves it. A rejection, block, timeout, error or invalid verdict, or
no verdict in --wait, comes back to the agent as a tool result with isError
whose text is the verdict's reason and id. A read call that the policy
approves on its own, evaluated here over the same bundle as serve (give the
same --policies and --policy-data), passes without a round trip to gated.
tools/list leaves out the tools the policy denies outright (--list-denied
mark lists them with the reason instead).

The mapping of a tool onto a proposal (action, class, target, reason) and
the --catalog file are described in docs/MCP.md. --print-tools prints the
mapping of every tool and exits.

Logs go to standard error: standard output is the MCP stream.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCP(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, args, cmd.ArgsLenAtDash())
		},
	}
	f := c.Flags()
	f.StringVar(&o.tenant, "tenant", "", "tenant token the proposals are made for (required)")
	f.StringVar(&o.agent, "agent", "", "agent name of the proposals, requested_by.agent (required)")
	f.StringVar(&o.session, "session", "", "requested_by.session of the proposals (default: the MCP session id)")
	f.StringVar(&o.url, "nats-url", nats.DefaultURL, "NATS server URL")
	o.conn.register(f)
	f.StringVar(&o.upstream, "upstream", "", "URL of a streamable-HTTP MCP server to front, instead of a command after --")
	f.StringVar(&o.upstreamCmd, "upstream-cmd", "", "the MCP server's command line, words split at spaces (no quoting), instead of a command after -- (for launchers that drop --)")
	f.DurationVar(&o.callTimeout, "upstream-timeout", mcpgate.DefaultCallTimeout, "how long a request forwarded to the MCP server may wait for its answer; then it is an error to the agent")
	f.StringVar(&o.listen, "listen", "", "serve the agent over streamable HTTP at http://ADDR/mcp instead of stdio")
	f.IntVar(&o.maxSessions, "max-sessions", mcpgate.DefaultMaxSessions, "with --listen, how many agent sessions (each with an upstream session, or process, of its own) are served at once; one more is refused")
	f.DurationVar(&o.idleTimeout, "session-idle-timeout", mcpgate.DefaultSessionIdleTimeout, "with --listen, how long an agent session may go without a request before it is ended, and its upstream session with it")
	f.StringVar(&o.catalog, "catalog", "", "YAML or JSON file of per-tool overrides: action, class, blast_radius, target, target_fixed, reason_argument, reviewer, labels")
	f.StringVar(&o.listDenied, "list-denied", "hide", "what tools/list does with a tool the policy denies outright: hide or mark")
	f.BoolVar(&o.proposeRead, "propose-reads", false, "propose read calls too, so that gated decides and audits every call (a round trip per read)")
	f.DurationVar(&o.wait, "wait", fleet.DefaultWait, "how long a call waits for its verdict (an operator hold waits until its deadline)")
	registerPolicySource(f, &o.bundle)
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas, as serve's")
	f.BoolVar(&o.printTools, "print-tools", false, "print how each tool maps onto a proposal, and whether tools/list shows it, then exit")
	f.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "json", "json or console (on standard error)")
	return c
}

func runMCP(ctx context.Context, stdout, stderr io.Writer, o *mcpOptions, args []string, dash int) error {
	command := args
	switch {
	case o.upstreamCmd != "" && len(args) > 0:
		return usageError("--upstream-cmd and a command after -- are alternatives: give one")
	case o.upstreamCmd != "":
		if command = strings.Fields(o.upstreamCmd); len(command) == 0 {
			return usageError("--upstream-cmd is blank")
		}
	case dash < 0 && len(args) > 0:
		return usageError("put the MCP server's command after --, e.g. gated mcp --tenant acme --agent a -- %s", args[0])
	case dash > 0:
		return usageError("unexpected arguments before --: %q", args[:dash])
	}
	switch {
	case o.upstream == "" && len(command) == 0:
		return usageError("give the MCP server to front: a command after --, or --upstream URL")
	case o.upstream != "" && len(command) > 0:
		return usageError("--upstream %s and a command after -- are alternatives: give one", o.upstream)
	case !gated.ValidTenant(o.tenant):
		return usageError("--tenant %q must match [a-z0-9_-]{1,64}", o.tenant)
	case strings.TrimSpace(o.agent) == "":
		return usageError("--agent is required: the agent name of the proposals")
	case o.wait <= 0:
		return usageError("--wait %s must be positive", o.wait)
	case o.callTimeout <= 0:
		return usageError("--upstream-timeout %s must be positive", o.callTimeout)
	case o.maxSessions <= 0:
		return usageError("--max-sessions %d must be positive", o.maxSessions)
	case o.idleTimeout <= 0:
		return usageError("--session-idle-timeout %s must be positive", o.idleTimeout)
	case o.listDenied != string(mcpgate.ListHide) && o.listDenied != string(mcpgate.ListMark):
		return usageError("--list-denied %q: want hide or mark", o.listDenied)
	}
	log, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	if os.Getenv("GOGC") == "" {
		// The proxy keeps a few MiB live, and the MCP SDK allocates a
		// 32 KiB decode buffer for every message it reads: at the default
		// GOGC of 100 the collector ran every dozen calls and took a
		// quarter of the proxy's CPU, on the read path's clock. Four
		// times the live heap as headroom costs a few MiB more.
		debug.SetGCPercent(mcpGCPercent)
	}
	var catalog *mcpgate.Catalog
	if o.catalog != "" {
		data, err := os.ReadFile(o.catalog)
		if err != nil {
			return usageError("--catalog: %v", err)
		}
		if catalog, err = mcpgate.DecodeCatalog(data); err != nil {
			return usageError("--catalog %s: %v", o.catalog, err)
		}
	}
	precheck, err := localPrecheck(ctx, o, stderr)
	if err != nil {
		return err
	}
	nc, err := o.conn.connect(o.url, "gated-mcp", natsconn.ErrorLog(log))
	if err != nil {
		return err
	}
	defer nc.Close()
	client, err := fleet.NewClient(nc)
	if err != nil {
		return err
	}
	grants, err := fleet.NewGrants(nc)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dialer := mcpgate.Dialer{URL: o.upstream, Command: command, Stderr: stderr, Version: version}
	gate, err := mcpgate.New(ctx, mcpgate.Config{
		Fleet:        client,
		Dial:         dialer.Dial,
		CallTimeout:  o.callTimeout,
		Tenant:       o.tenant,
		Agent:        o.agent,
		Session:      o.session,
		Catalog:      catalog,
		Precheck:     precheck,
		ProposeReads: o.proposeRead,
		ListDenied:   mcpgate.ListDenied(o.listDenied),
		Wait:         o.wait,
		Version:      version,
		Log:          log,
		Grants:       grants,

		MaxSessions:        o.maxSessions,
		SessionIdleTimeout: o.idleTimeout,
	})
	if err != nil {
		if errors.Is(err, mcpgate.ErrInvalidCatalog) || errors.Is(err, mcpgate.ErrActionCollision) {
			return usageError("%v", err)
		}
		return err
	}
	upstream := gate.Upstream()
	defer func() { _ = upstream.Close() }()
	if o.printTools {
		return gate.PrintTools(stdout)
	}
	// When the upstream server goes away, so does the gate.
	go func() {
		_ = upstream.Wait()
		cancel()
	}()
	if o.listen == "" {
		err := gate.RunStdio(ctx, &mcpgate.StdioTransport{})
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	// Said at every log level: where to point the agent.
	fmt.Fprintf(stderr, "gated mcp: serving MCP over streamable HTTP at http://%s/mcp\n", ln.Addr())
	return gate.ServeHTTP(ctx, ln)
}

// localPrecheck compiles the policy bundle the flags name, as serve and
// policy eval load it, and returns the gate's precheck over it: what the
// gate decides before any review, with the engine's own functions. An
// approval is not settled here, but left to gated, for an action the
// policy data or the proposal labels, and for every action when the
// policy reads input.session (docs/MCP.md, "Flow labels").
func localPrecheck(ctx context.Context, o *mcpOptions, stderr io.Writer) (mcpgate.Precheck, error) {
	b, _, err := loadPolicyBundle(&o.bundle, nil, stderr)
	if err != nil {
		return nil, err
	}
	ev, err := policies.Compile(ctx, b, o.bundle.CompileOptions()...)
	if err != nil {
		return nil, err
	}
	reg, err := loadPersonas(o.personasDir, stderr)
	if err != nil {
		return nil, err
	}
	flows, readsSession := ev.Flows(), ev.ReadsSession()
	return func(ctx context.Context, p *gated.Proposal) (gated.Settled, bool, error) {
		in := engine.PolicyInput{Proposal: p, Now: time.Now()}
		if readsSession {
			// gated mcp does not read the agent's flow state: the
			// policy sees an empty one, and what it approves so is
			// gated's to decide, with the state read.
			empty := gated.NewSessionState(nil)
			in.Session = &empty
		}
		d, routed, err := engine.EvaluateRouted(ctx, ev.Evaluate, reg, in, engine.DefaultPersona, true)
		if err != nil {
			return gated.Settled{}, false, fmt.Errorf("evaluating the policy on %s: %w", p.Action, err)
		}
		s, settled := engine.PolicyOutcome(p, d, routed)
		if settled && s.Outcome == gated.OutcomeApproved && (readsSession || len(flows.LabelsOf(p.Action, p.Labels)) > 0) {
			// A labelled action joins its agent's flow state when gated
			// sees its grant used: it is not approved here, where it
			// would use none, but proposed. So is every action when
			// the policy reads the state.
			return gated.Settled{}, false, nil
		}
		return s, settled, nil
	}, nil
}
