package main

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/gated/gated/bus/replay"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/server"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
	"github.com/gated/gated/policies"
)

// rereviewOptions are the flags of `gated policy replay` that concern
// reviewers: which plugins the candidate set-up loads (as serve finds
// them), and the persona --rereview runs again.
type rereviewOptions struct {
	persona       string
	concurrency   int
	timeout       time.Duration
	pluginsDir    string
	defaultPlugin string
}

func (o *rereviewOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.persona, "rereview", "", "run the candidate reviewer of this persona again on its recorded review requests and report its agreement with the recorded decisions")
	f.IntVar(&o.concurrency, "rereview-concurrency", 4, "reviews --rereview runs at once")
	f.DurationVar(&o.timeout, "rereview-timeout", 0, "time limit of one review of --rereview (default: the persona's timeout, else 60s)")
	f.StringVar(&o.pluginsDir, "plugins-dir", "", "directory of reviewer plugin executables pinned by gated-plugins.lock, as serve loads them")
	f.StringVar(&o.defaultPlugin, "default-plugin", sop.Name, "plugin that reviews for personas naming none, as serve's")
}

func (o *rereviewOptions) check() error {
	switch {
	case o.concurrency < 1 || o.concurrency > 1024:
		return usageError("--rereview-concurrency %d: want 1 to 1024", o.concurrency)
	case o.timeout < 0:
		return usageError("--rereview-timeout %s: want a positive duration", o.timeout)
	}
	return nil
}

// candidateReviewers is the candidate reviewer set-up of a replay: the
// candidate personas and catalog, the plugins serve would load with the
// same flags and configuration, and tool calls forwarded on the replayed
// deployment's connection nc, as serve forwards them.
func (o *policyReplayOptions) candidateReviewers(reg engine.Personas, ev *policies.Evaluator, nc *nats.Conn) replay.ReviewersConfig {
	setup := server.Config{
		PersonasDir: o.personasDir, PluginsDir: o.rereview.pluginsDir,
		DefaultPlugin: o.rereview.defaultPlugin, LLMMaxConcurrency: o.rereview.concurrency,
	}
	cfg := replay.ReviewersConfig{
		Personas: reg, Catalog: ev.Catalog(),
		Plugins: func(ctx context.Context) ([]plugins.Spec, string, error) {
			specs, def, err := server.PluginSpecs(ctx, setup)
			return specs, def, fromServer(err)
		},
	}
	if nc != nil {
		cfg.Forward = server.ToolConfig(nc, nil, plugins.DefaultToolCallTimeout).Forward
	}
	return cfg
}
