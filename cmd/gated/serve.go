package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gated/gated/internal/server"
)

func serveCmd() *cobra.Command {
	o := server.Config{}
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the gate: decide every proposal published on NATS",
		Long: `serve runs the gate. Without --nats-url it starts an embedded NATS server with
JetStream (files in --data-dir, clients on --nats-listen); with --nats-url it
uses an external server or cluster. Every flag can also be set through the
environment as GATED_<FLAG>, e.g. GATED_NATS_URL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), o) },
	}
	registerServe(c.Flags(), &o)
	return c
}

// registerServe defines serve's flags on f, each setting its field of o.
func registerServe(f *pflag.FlagSet, o *server.Config) {
	d := server.Defaults()
	f.StringVar(&o.DataDir, "data-dir", d.DataDir, "directory of the embedded server's JetStream files")
	f.StringVar(&o.PersonasDir, "personas", d.PersonasDir, "directory of persona files (*.md) added to the built-in personas")
	f.BoolVar(&o.PersonasWatch, "personas-watch", d.PersonasWatch, "reload the personas when files under --personas change")
	f.StringVar(&o.NATSListen, "nats-listen", d.NATSListen, "client listener of the embedded server (port 0 picks a free one)")
	f.StringVar(&o.NATSURL, "nats-url", d.NATSURL, "external NATS server or cluster URLs, comma-separated; empty starts the embedded server")
	o.NATSConn.Register(f)
	f.StringVar(&o.HTTPAddr, "http", d.HTTPAddr, "serve /healthz, /readyz and, with --operators, the web console (docs/CONSOLE.md) on this address, e.g. 127.0.0.1:8080; also /metrics when neither --metrics-listen nor the console is given")
	f.StringVar(&o.MetricsListen, "metrics-listen", d.MetricsListen, "serve /metrics (Prometheus) alone on this address, e.g. 127.0.0.1:9090, and not on --http; with the console on --http, /metrics is served only here (docs/OBSERVABILITY.md)")
	f.BoolVar(&o.MetricsTenantLabels, "metrics-tenant-labels", d.MetricsTenantLabels, "have the budget metrics carry a tenant label naming each tenant; without it /metrics names no tenant (it answers without credentials)")
	f.BoolVar(&o.Pprof, "pprof", d.Pprof, "also serve Go's profiles under /debug/pprof/ on --http (CPU, heap, goroutines; keep that address private)")
	f.StringVar(&o.LogFormat, "log-format", d.LogFormat, "auto (console on a terminal, else JSON), json or console")
	f.StringVar(&o.LogLevel, "log-level", d.LogLevel, "debug, info, warn or error")
	f.DurationVar(&o.ReviewTimeout, "review-timeout", d.ReviewTimeout, "deadline of a review unless the persona sets one; at least 30s")
	f.DurationVar(&o.ShutdownGrace, "shutdown-grace", d.ShutdownGrace, "how long SIGTERM waits for proposals in flight before returning them to the stream; the whole shutdown ends within it plus 5s, in every state (what it gives up on is logged, and the exit status is 1)")
	f.IntVar(&o.MaxInFlight, "max-in-flight", d.MaxInFlight, "proposals decided at once by this process")
	f.IntVar(&o.TenantMaxInFlight, "tenant-max-in-flight", d.TenantMaxInFlight, "proposals of one tenant this process works on at once while other tenants have proposals in it too (a tenant alone may use every handler but this many); more wait in the tenant's own queue, so a flooding tenant leaves the CPU to the others; a proposal waiting on its reviewer holds none (0: 4 per core, at most --max-in-flight)")
	f.DurationVar(&o.AckWait, "ack-wait", d.AckWait, "how long a proposal may go without an acknowledgement before JetStream redelivers it; gated sends in-progress acks every third of it; at least 1s")
	f.IntVar(&o.MaxDeliver, "max-deliver", d.MaxDeliver, "deliveries of one proposal before gated answers it with an error verdict")
	f.IntVar(&o.MaxAckPending, "max-ack-pending", d.MaxAckPending, "proposals handed out and not yet acknowledged, over every gated sharing the consumer (0: 4 × --max-in-flight)")
	f.BoolVar(&o.ReviewService, "review-service", d.ReviewService, "serve the request/reply endpoints gated.review and gated.review.<tenant> (nats micro service \"gated\")")
	f.StringVar(&o.Operators, "operators", d.Operators, "YAML file of the operators (nkey public keys) whose signed decisions on held actions and run reviews gated accepts on gated.operator.<tenant>.<id> (docs/OPERATORS.md); empty: none")
	f.DurationVar(&o.OperatorDeadline, "operator-deadline", d.OperatorDeadline, "how long an action the policy holds for an operator waits for a decision before it times out (a policy hold may set less)")
	_ = cobra.MarkFlagFilename(f, "operators", "yaml", "yml")
	f.StringVar(&o.Notify, "notify", d.Notify, "YAML file of webhook sinks notified when a proposal awaits an operator, a run escalates, a verdict times out, a plugin goes down or the audit trail fails to verify (docs/NOTIFICATIONS.md); empty: none")
	_ = cobra.MarkFlagFilename(f, "notify", "yaml", "yml")
	f.StringVar(&o.Budgets, "budgets", d.Budgets, "YAML file of the limits per tenant and per agent: proposals, reads and tokens per interval, reviews in flight, actions pending an operator (docs/BUDGETS.md); empty: the built-in limits")
	_ = cobra.MarkFlagFilename(f, "budgets", "yaml", "yml")
	f.DurationVar(&o.BudgetsPoll, "budgets-poll", d.BudgetsPoll, "read --budgets again every interval and apply it once a change reads the same twice in a row and is valid; an empty file is refused (0 disables)")
	f.DurationVar(&o.ReviewWait, "review-wait", d.ReviewWait, "how long a gated.review request waits for its verdict before a 504 reply")
	f.IntVar(&o.Replicas, "replicas", d.Replicas, "replicas of the streams and the verdict bucket (3 on a cluster)")
	f.DurationVar(&o.VerdictTTL, "verdict-ttl", d.VerdictTTL, "how long verdicts are kept for idempotent replay")
	f.DurationVar(&o.AuditMaxAge, "audit-max-age", d.AuditMaxAge, "how long audit events are kept (0 keeps them)")
	f.DurationVar(&o.DuplicateWindow, "duplicate-window", d.DuplicateWindow, "how long the proposal stream remembers a Nats-Msg-Id and drops a proposal published again under it; the NATS server keeps every id of the window in memory (docs/NATS.md)")
	f.StringVar(&o.AuditKeyFile, "audit-key-file", d.AuditKeyFile, "key that MACs audit records: 32+ random bytes, raw or hex (default with the embedded server: <data-dir>/audit.key, created on first start)")
	_ = cobra.MarkFlagFilename(f, "audit-key-file")
	f.StringVar(&o.GrantKeyFile, "grant-key-file", d.GrantKeyFile, "Ed25519 key file that signs grants (docs/GRANTS.md; default <data-dir>/grant.keys, created on first start)")
	_ = cobra.MarkFlagFilename(f, "grant-key-file")
	f.DurationVar(&o.GrantTTL, "grant-ttl", d.GrantTTL, "how long the grant of an approved action stays valid (5s to 24h)")
	f.BoolVar(&o.AuditKeyRotate, "audit-key-rotate", d.AuditKeyRotate, "start even though the audit key is not the one that MACed the audit stream's newest record (a new key on purpose, or a lost one)")
	f.StringVar(&o.AuditPublish, "audit-publish", d.AuditPublish, "how audit records are published: auto, batches (atomic batches), pipelined or one-at-a-time")
	f.BoolVar(&o.AuditCompress, "audit-compress", d.AuditCompress, "store each audit record as a zstd frame of its JSON, about half the bytes; false stores the JSON (docs/AUDIT.md)")
	registerPolicySource(f, &o.Policy)
	registerShadowSource(f, &o.Shadow)
	f.BoolVar(&o.PolicyWatch, "policy-watch", d.PolicyWatch, "reload the policy when --policies or --policy-data files change")
	f.DurationVar(&o.PolicyPoll, "policy-poll", d.PolicyPoll, "also compare the policy files every interval, for changes file events miss (0 disables)")
	f.StringVar(&o.PluginsDir, "plugins-dir", d.PluginsDir, "directory of reviewer plugin executables pinned by gated-plugins.lock (see gated plugins --help)")
	_ = cobra.MarkFlagDirname(f, "plugins-dir")
	f.StringVar(&o.DefaultPlugin, "default-plugin", d.DefaultPlugin, "plugin that reviews for personas naming none")
	f.IntVar(&o.LLMMaxConcurrency, "llm-max-concurrency", d.LLMMaxConcurrency, "reviews the bundled llm reviewer runs at once; more wait for a slot (mind the provider's rate limits)")
	f.DurationVar(&o.ToolTimeout, "tool-timeout", d.ToolTimeout, "time limit of one reviewer tool call (never past the review's deadline)")
	f.DurationVar(&o.DedupeWindow, "dedupe-window", d.DedupeWindow, "how long a rejection answers identical proposals at stage dedupe (0 turns dedupe off)")
	f.IntVar(&o.DedupeMax, "dedupe-max", d.DedupeMax, "rejections remembered for dedupe at most (oldest forgotten first)")
}

// serve runs the gate o describes until ctx ends.
func serve(ctx context.Context, o server.Config) error {
	file := configFrom(ctx)
	o.ConfigFile, o.ConfigPlugins, o.Version = file.path, file.plugins, version
	s, err := server.New(o)
	if err != nil {
		return fromServer(err)
	}
	defer func() { _ = s.Log().Sync() }()
	return fromServer(s.Run(ctx))
}

// fromServer gives the server's errors their exit status: 2 for a
// refused configuration; 1, with nothing more printed, for a shutdown
// that abandoned what it could not finish (the server logged it).
func fromServer(err error) error {
	var usage *server.UsageError
	var shutdown *server.ShutdownError
	switch {
	case errors.As(err, &usage):
		return &exitError{code: exitUsage, err: err}
	case errors.As(err, &shutdown):
		return &exitError{code: exitFailure, silent: true, err: err}
	}
	return err
}

// registerPolicySource defines the flags that say where the policy comes
// from, shared by serve and the policy commands.
func registerPolicySource(f *pflag.FlagSet, o *server.PolicySource) {
	f.StringVar(&o.Dir, "policies", "", "directory of .rego files and data documents added to the embedded default bundle")
	f.BoolVar(&o.Replace, "policies-replace", false, "use --policies instead of the embedded default bundle")
	f.StringArrayVar(&o.DataFiles, "policy-data", nil, "YAML or JSON data document merged at the data root (repeatable), e.g. a file with gated: {config: ...}")
	f.StringVar(&o.Evaluator, "policy-evaluator", server.Defaults().Policy.Evaluator, "auto: interpret OPA's plan of the decision when the policy allows it, else topdown; topdown: always OPA's general evaluator")
}

// registerShadowSource defines the flags of the shadow policy.
func registerShadowSource(f *pflag.FlagSet, o *server.ShadowSource) {
	f.StringVar(&o.Dir, "shadow-policies", "", "directory of a candidate policy decided beside the live one on every proposal (added to the embedded default bundle); it never changes a verdict, differences are audited as policy.shadow_differs")
	f.BoolVar(&o.Replace, "shadow-policies-replace", false, "use --shadow-policies instead of the embedded default bundle")
}
