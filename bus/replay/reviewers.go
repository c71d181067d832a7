package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/policies"
)

// ReviewersConfig says where a replay finds the candidate's reviewers.
type ReviewersConfig struct {
	// Personas are the candidate personas.
	Personas engine.Personas
	// Catalog is the candidate policy's catalog: re-run reviews read
	// their SOPs and tool descriptions from it.
	Catalog *policies.Catalog
	// Plugins returns the plugins the candidate set-up runs, as serve
	// finds them, and the plugin that reviews for personas naming none.
	// It is called once, when a replay first needs the plugins; its error
	// is then the reason every recorded review is stale, and NewRereviewer
	// returns it as it is. Nil configures no plugin.
	Plugins func(ctx context.Context) (specs []plugins.Spec, defaultPlugin string, err error)
	// Forward runs the tools of re-run reviews that are not built in, as
	// serve forwards them to the deployment; nil runs none.
	Forward func(ctx context.Context, name string, req plugins.ToolRequest) ([]byte, error)
}

// Reviewers is the reviewer set-up a replay compares the recorded
// reviews with: the candidate personas, and the plugins serve would load
// with the same flags and configuration. The plugins are launched only
// when a replay first needs them: to learn their versions, or to review.
// Close stops them.
type Reviewers struct {
	cfg           ReviewersConfig
	personas      engine.Personas
	catalog       *policies.Catalog
	defaultPlugin string

	once     sync.Once
	host     *plugins.Host
	versions map[string]string
	startErr error
}

// NewReviewers prepares the candidate set-up; nothing is read or launched
// until a recorded review needs checking or a re-review runs.
func NewReviewers(cfg ReviewersConfig) *Reviewers {
	return &Reviewers{cfg: cfg, personas: cfg.Personas, catalog: cfg.Catalog}
}

// start finds the plugins as serve would and launches them, once. A
// plugin set-up that cannot be read (a lock file that does not verify) or
// started is the reason every recorded review is stale, and refuses a
// re-review.
func (c *Reviewers) start(ctx context.Context) error {
	c.once.Do(func() {
		if c.cfg.Plugins == nil {
			c.startErr = errNoPlugins
			return
		}
		specs, defaultPlugin, err := c.cfg.Plugins(ctx)
		if err != nil {
			c.startErr = err
			return
		}
		c.defaultPlugin = defaultPlugin
		host, err := plugins.NewHost(zap.NewNop(), defaultPlugin, specs...)
		if err != nil {
			c.startErr = fmt.Errorf("configuring the candidate's plugins: %w", err)
			return
		}
		host.SetTools(c.toolConfig())
		if err := host.Start(ctx); err != nil {
			host.Close()
			c.startErr = fmt.Errorf("starting the candidate's plugins: %w", err)
			return
		}
		c.host, c.versions = host, map[string]string{}
		for _, p := range host.Plugins() {
			c.versions[p.Name] = p.Version
		}
	})
	return c.startErr
}

// toolConfig answers the tool calls of re-run reviews from the candidate
// policy's catalog, and forwards the rest on the replayed deployment's
// connection (ReviewersConfig.Forward), as serve does.
func (c *Reviewers) toolConfig() plugins.ToolConfig {
	cfg := plugins.ToolConfig{
		SOP: c.catalog.SOP,
		Describe: func(name string) (string, string, bool) {
			t, ok := c.catalog.Tool(name)
			return t.Description, string(t.InputSchema), ok
		},
	}
	cfg.Forward = c.cfg.Forward
	return cfg
}

// Close stops the plugins, if they were launched.
func (c *Reviewers) Close() {
	if c.host != nil {
		c.host.Close()
	}
}

// pluginOf names the plugin that reviews for persona p.
func (c *Reviewers) pluginOf(p *engine.Persona) string {
	if p.Plugin != "" {
		return p.Plugin
	}
	return c.defaultPlugin
}

// staleness says why the recorded reviews of a proposal would not be
// given again by the candidate set-up, or "" when the candidate routes
// the review to a persona that reviewed it, with the same quorum, and
// every recorded reviewer is unchanged: the same persona revision, model
// and plugin version.
func (c *Reviewers) staleness(ctx context.Context, p *recordedPolicy, routedTo string, quorum int) string {
	switch {
	case p.reviewErr != "":
		return p.reviewErr
	case len(p.reviews) == 0:
		return "no review record of the proposal in the range (recorded by an older gated, or the range starts after the review)"
	case max(quorum, 1) != max(p.Review.Quorum, 1):
		return fmt.Sprintf("the candidate asks a quorum of %d, the recorded decision %d", max(quorum, 1), max(p.Review.Quorum, 1))
	}
	if !slices.ContainsFunc(p.reviews, func(rv *recordedReview) bool { return rv.Started.Persona == routedTo }) {
		names := make([]string, 0, len(p.reviews))
		for _, rv := range p.reviews {
			names = append(names, rv.Started.Persona)
		}
		return fmt.Sprintf("the candidate routes the review to persona %s; the recorded review is by %s", routedTo, strings.Join(slices.Compact(names), ", "))
	}
	for _, rv := range p.reviews {
		s := rv.Started
		if rv.Finished == nil {
			return fmt.Sprintf("review %s by persona %s has no review.finished record in the range", s.ReviewID, s.Persona)
		}
		cand, ok := c.personas.Persona(s.Persona)
		switch {
		case !ok:
			return fmt.Sprintf("persona %s is not in the candidate set", s.Persona)
		case s.PersonaRevision == "":
			return fmt.Sprintf("the review by persona %s was recorded without the persona's revision (an older gated)", s.Persona)
		case s.PersonaRevision != cand.Revision:
			return fmt.Sprintf("persona %s changed: revision %s recorded, %s in the candidate set", s.Persona, s.PersonaRevision, cand.Revision)
		case s.Model != cand.Model:
			return fmt.Sprintf("persona %s's model changed: %q recorded, %q in the candidate set", s.Persona, s.Model, cand.Model)
		}
		if err := c.start(ctx); err != nil {
			return err.Error()
		}
		name := c.pluginOf(cand)
		version, ok := c.versions[name]
		switch {
		case !ok:
			return fmt.Sprintf("persona %s's plugin %s is not configured in the candidate set-up", s.Persona, name)
		case version != rv.Finished.PluginVersion:
			return fmt.Sprintf("plugin %s changed: version %q recorded, %q in the candidate set-up", name, rv.Finished.PluginVersion, version)
		}
	}
	return ""
}

// keepReview counts a proposal that both policies send to review: its
// recorded review result is reused when every reviewer is unchanged, and
// counted stale, with the reason, when one changed.
func (rep *Report) keepReview(ctx context.Context, r *replayEvent, p *recordedPolicy, routedTo string, quorum int, reviewers *Reviewers) {
	why := "the candidate's reviewers are unknown"
	if reviewers != nil {
		why = reviewers.staleness(ctx, p, routedTo, quorum)
	}
	if why == "" {
		rep.ReviewReused++
		return
	}
	rep.ReviewStale++
	if len(rep.ReviewStaleNamed) < maxNamed {
		rep.ReviewStaleNamed = append(rep.ReviewStaleNamed, Missing{Tenant: r.Event.Tenant, ID: r.Event.ProposalID, Seq: r.Seq, Why: why})
	}
}
