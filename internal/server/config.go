package server

import (
	"strings"
	"time"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/natsconn"
	"github.com/gated/gated/plugins"
	"github.com/gated/gated/plugins/sop"
)

// MinReviewTimeout is the shortest review deadline the configuration
// accepts: reviewers need time to look things up, and a deadline that
// always fires is a gate that never opens.
const MinReviewTimeout = 30 * time.Second

// DefaultLLMMaxConcurrency is how many reviews the bundled llm reviewer
// runs at once unless --llm-max-concurrency says otherwise. A review
// mostly waits on the provider, so the bound is the provider's rate limit
// rather than this machine.
const DefaultLLMMaxConcurrency = 64

// Defaults is the configuration of a `gated serve` given no flag: each
// flag's default is its field's value here.
func Defaults() Config {
	return Config{
		DataDir:           "gated-data",
		PersonasWatch:     true,
		NATSListen:        "127.0.0.1:4222",
		LogFormat:         "auto",
		LogLevel:          "info",
		ReviewTimeout:     engine.DefaultReviewTimeout,
		ShutdownGrace:     30 * time.Second,
		MaxInFlight:       1024,
		AckWait:           30 * time.Second,
		MaxDeliver:        5,
		ReviewService:     true,
		OperatorDeadline:  engine.DefaultOperatorDeadline,
		BudgetsPoll:       5 * time.Second,
		ReviewWait:        fleet.DefaultWait,
		Replicas:          1,
		VerdictTTL:        bus.DefaultVerdictTTL,
		DuplicateWindow:   2 * time.Minute,
		GrantTTL:          DefaultGrantTTL,
		AuditPublish:      "auto",
		AuditCompress:     true,
		PolicyWatch:       true,
		PolicyPoll:        10 * time.Second,
		DefaultPlugin:     sop.Name,
		LLMMaxConcurrency: DefaultLLMMaxConcurrency,
		ToolTimeout:       plugins.DefaultToolCallTimeout,
		DedupeWindow:      engine.DefaultDedupeWindow,
		DedupeMax:         engine.DefaultDedupeMax,
		Policy:            PolicySource{Evaluator: "auto"},
	}
}

// Config is what `gated serve` runs: its flags and the config file fill
// it in, from Defaults. Each field is the flag of the same name (see
// gated serve --help); the last three are not flags.
type Config struct {
	DataDir       string
	PersonasDir   string
	PersonasWatch bool
	NATSListen    string
	NATSURL       string
	NATSConn      natsconn.Options
	HTTPAddr      string
	Pprof         bool
	LogFormat     string
	LogLevel      string
	ReviewTimeout time.Duration
	// OperatorDeadline is how long an action held for an operator waits.
	OperatorDeadline  time.Duration
	ShutdownGrace     time.Duration
	ReviewService     bool
	ReviewWait        time.Duration
	MaxInFlight       int
	TenantMaxInFlight int
	AckWait           time.Duration
	MaxDeliver        int
	MaxAckPending     int
	Replicas          int
	VerdictTTL        time.Duration
	DuplicateWindow   time.Duration
	AuditMaxAge       time.Duration
	AuditKeyFile      string
	GrantKeyFile      string
	GrantTTL          time.Duration
	AuditKeyRotate    bool
	AuditPublish      string
	AuditCompress     bool
	Policy            PolicySource
	Shadow            ShadowSource
	PolicyWatch       bool
	PolicyPoll        time.Duration
	ToolTimeout       time.Duration
	DedupeWindow      time.Duration
	DedupeMax         int
	PluginsDir        string
	DefaultPlugin     string
	LLMMaxConcurrency int
	Operators         string
	Notify            string
	// Budgets is the Budgets file; "" keeps the built-in limits.
	Budgets     string
	BudgetsPoll time.Duration

	// MetricsListen is the address of the listener that serves /metrics
	// alone; "" leaves /metrics to --http when no console is on it.
	MetricsListen string
	// MetricsTenantLabels has the budget metrics name each tenant.
	MetricsTenantLabels bool

	// ConfigFile is the --config file, named in errors about its plugins.
	ConfigFile string
	// ConfigPlugins are the plugins the --config file pins, in file order.
	ConfigPlugins []plugins.Spec
	// Version is gated's version, as the review service reports it.
	Version string
}

// check refuses options that do not go together, before anything starts,
// and loads the operators file.
func (o *Config) check() (operators *operator.List, err error) {
	if err := o.Shadow.Check(); err != nil {
		return nil, err
	}
	if o.OperatorDeadline <= 0 {
		return nil, usageError("--operator-deadline %s must be positive: a held action times out at its deadline", o.OperatorDeadline)
	}
	if err := CheckGrantTTL(o.GrantTTL); err != nil {
		return nil, err
	}
	if o.ReviewTimeout < MinReviewTimeout {
		return nil, usageError("--review-timeout %s is below the %s minimum: reviews need time, and a deadline that always fires blocks every change", o.ReviewTimeout, MinReviewTimeout)
	}
	switch {
	case o.Pprof && o.HTTPAddr == "":
		return nil, usageError("--pprof serves the profiles on the --http listener: give --http too")
	case o.MetricsListen != "" && o.MetricsListen == o.HTTPAddr:
		return nil, usageError("--metrics-listen %s is the --http address: give /metrics an address of its own", o.MetricsListen)
	case o.MetricsTenantLabels && o.metricsListener() == "":
		return nil, usageError("--metrics-tenant-labels names tenants on /metrics, which is not served: give --metrics-listen (with --operators, the console's --http listener serves no /metrics)")
	case o.ReviewWait <= 0:
		return nil, usageError("--review-wait %s must be positive", o.ReviewWait)
	case o.ShutdownGrace < 0:
		return nil, usageError("--shutdown-grace must not be negative")
	case o.Replicas < 1 || o.Replicas > 5:
		return nil, usageError("--replicas %d must be between 1 and 5", o.Replicas)
	case o.Replicas > 1 && o.NATSURL == "":
		return nil, usageError("--replicas %d needs a NATS cluster (--nats-url): the embedded server is a single node and keeps one copy", o.Replicas)
	case len(o.NATSConn.AuthFlags()) > 0 && o.NATSURL == "":
		return nil, usageError("%s apply to an external server: give --nats-url too (the embedded server has no authentication or TLS)", strings.Join(o.NATSConn.AuthFlags(), ", "))
	case o.MaxInFlight < 1:
		return nil, usageError("--max-in-flight %d must be at least 1", o.MaxInFlight)
	case o.TenantMaxInFlight < 0 || o.TenantMaxInFlight > o.MaxInFlight:
		return nil, usageError("--tenant-max-in-flight %d must be from 0 to --max-in-flight %d (0: 4 per core)", o.TenantMaxInFlight, o.MaxInFlight)
	case o.AckWait < bus.MinAckWait:
		return nil, usageError("--ack-wait %s must be at least %s: gated sends in-progress acks every third of it, and they must reach JetStream before it runs out", o.AckWait, bus.MinAckWait)
	case o.MaxDeliver < 1:
		return nil, usageError("--max-deliver %d must be at least 1", o.MaxDeliver)
	case o.LLMMaxConcurrency < 1 || o.LLMMaxConcurrency > 65536:
		return nil, usageError("--llm-max-concurrency %d must be from 1 to 65536", o.LLMMaxConcurrency)
	case o.MaxAckPending < 0:
		return nil, usageError("--max-ack-pending %d must not be negative (0: 4 × --max-in-flight)", o.MaxAckPending)
	case o.VerdictTTL < MinVerdictTTL(o.OperatorDeadline, o.GrantTTL):
		return nil, usageError("--verdict-ttl %s must be at least %s: a target's history spans %s (the policy's windows read it), and a held action's verdict must outlive its --operator-deadline and the grant an approval then carries (--grant-ttl)",
			o.VerdictTTL, MinVerdictTTL(o.OperatorDeadline, o.GrantTTL), store.HistoryWindow)
	case o.AuditMaxAge < 0:
		return nil, usageError("--audit-max-age must not be negative (0 keeps events)")
	case o.DuplicateWindow < time.Second || o.DuplicateWindow > o.VerdictTTL:
		return nil, usageError("--duplicate-window %s must be from 1s to --verdict-ttl (%s): after it, the stored verdict answers a proposal published again", o.DuplicateWindow, o.VerdictTTL)
	case o.ToolTimeout <= 0:
		return nil, usageError("--tool-timeout %s must be positive", o.ToolTimeout)
	case o.DedupeWindow < 0:
		return nil, usageError("--dedupe-window must not be negative (0 turns dedupe off)")
	case o.BudgetsPoll < 0:
		return nil, usageError("--budgets-poll must not be negative (0 disables)")
	case o.DedupeMax < 1:
		return nil, usageError("--dedupe-max %d must be at least 1", o.DedupeMax)
	}
	if err := asUsage(o.NATSConn.Validate()); err != nil {
		return nil, err
	}
	if o.Operators != "" {
		if !o.ReviewService {
			return nil, usageError("--operators needs --review-service: operator decisions are an endpoint of the review service")
		}
		if operators, err = operator.LoadList(o.Operators); err != nil {
			return nil, usageError("--operators: %v", err)
		}
	}
	return operators, nil
}

// MinVerdictTTL is the shortest --verdict-ttl that keeps what reads the
// verdict bucket whole: a target's history (store.HistoryWindow), and a
// held action's verdict until its operator's deadline and the grant its
// approval then carries expire.
func MinVerdictTTL(operatorDeadline, grantTTL time.Duration) time.Duration {
	return max(store.HistoryWindow, operatorDeadline+grantTTL)
}
