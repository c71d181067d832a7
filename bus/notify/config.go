package notify

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/yamlpos"
)

// Kind is the kind of a notification; a sink lists the kinds it takes.
type Kind string

// The kinds of notification.
const (
	// KindAwaitingOperator: a proposal's verdict is held for an operator
	// (an operator.awaited record).
	KindAwaitingOperator Kind = "awaiting_operator"
	// KindEscalation: a run used its last review round and is handed to a
	// human (a run verdict whose next step is an escalation).
	KindEscalation Kind = "escalation"
	// KindTimeout: a verdict with outcome timeout, a review's or an
	// operator's deadline passed.
	KindTimeout Kind = "timeout"
	// KindPluginDown: a reviewer plugin exited, missed its health checks,
	// or was refused at launch.
	KindPluginDown Kind = "plugin_down"
	// KindAuditVerificationFailed: a message of the audit stream did not
	// verify (an audit.verification_failed record).
	KindAuditVerificationFailed Kind = "audit_verification_failed"
	// KindDecided: any other verdict, an operator's included. Held
	// verdicts are awaiting_operator instead.
	KindDecided Kind = "decided"
)

// Kinds lists every kind, in the order the docs give them.
var Kinds = []Kind{KindAwaitingOperator, KindEscalation, KindTimeout, KindPluginDown, KindAuditVerificationFailed, KindDecided}

// Format is the shape of a notification's body.
type Format string

// The body formats.
const (
	// FormatJSON is the Notification document.
	FormatJSON Format = "json"
	// FormatSlack is a Slack-compatible message, {"text", "blocks"}.
	FormatSlack Format = "slack"
)

// Defaults and bounds of a sink's settings.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 8
	DefaultBackoff     = time.Second
	DefaultMaxAge      = 15 * time.Minute
	DefaultQueue       = 1024
	// MaxBackoff caps the pause between two attempts.
	MaxBackoff = 2 * time.Minute
	// MinSecretLen is the shortest HMAC secret a sink accepts, in bytes.
	MinSecretLen = 16

	minTimeout, maxTimeout = 100 * time.Millisecond, 2 * time.Minute
	minBackoff, maxBackoff = 10 * time.Millisecond, time.Minute
	minMaxAge, maxMaxAge   = time.Second, 24 * time.Hour
	maxAttemptsBound       = 100
	maxQueue               = 65536
	maxSinks               = 64
)

// Sink is one webhook: where notifications go, which ones, in what
// format, signed with what secret, and how hard gated tries.
type Sink struct {
	// Name identifies the sink in logs, metrics and audit records:
	// [a-z0-9_-]{1,64}, unique in the file.
	Name string
	// URL is the http or https endpoint. Logs and audit records name its
	// scheme and host only (see Sink.Endpoint): the rest may hold a token.
	URL string
	// Kinds are the notifications the sink takes; at least one.
	Kinds []Kind
	// Tenants are the tenants whose notifications the sink takes; empty
	// takes every tenant's and gated's own (plugin_down, and
	// audit_verification_failed for a message of no tenant).
	Tenants []string
	// Format of the body. Default FormatJSON.
	Format Format
	// SecretFile (relative to the notify file's directory) or SecretEnv
	// names where the HMAC secret is; exactly one is given. The secret
	// itself is never in the notify file.
	SecretFile, SecretEnv string
	// Secret signs every request; LoadConfig reads it. At least
	// MinSecretLen bytes.
	Secret []byte
	// Timeout bounds one request, answer included. Default 10s; 100ms to 2m.
	Timeout time.Duration
	// MaxAttempts bounds the requests for one notification. Default 8;
	// 1 to 100.
	MaxAttempts int
	// Backoff is the pause after the first failed attempt; it doubles
	// after each (with jitter), up to MaxBackoff. Default 1s; 10ms to 1m.
	Backoff time.Duration
	// MaxAge bounds how long after gated read its record a notification
	// may still be sent, queueing included. Default 15m; 1s to 24h.
	MaxAge time.Duration
	// Queue bounds the notifications waiting for the sink; one that finds
	// it full fails at once. Default 1024; 1 to 65536.
	Queue int
}

// Takes reports whether the sink takes a notification of kind for
// tenant (gated.UnknownTenant for gated's own events).
func (s *Sink) Takes(kind Kind, tenant string) bool {
	if !slices.Contains(s.Kinds, kind) {
		return false
	}
	return len(s.Tenants) == 0 || slices.Contains(s.Tenants, tenant)
}

// Endpoint is the sink's URL as logs and audit records show it: scheme
// and host, since a webhook's path or query often holds its token.
func (s *Sink) Endpoint() string {
	u, err := url.Parse(s.URL)
	if err != nil {
		return "(unparsable)"
	}
	return u.Scheme + "://" + u.Host
}

// Config is a notify file: the webhook sinks.
type Config struct {
	Sinks []Sink
}

var sinkName = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// LoadConfig reads the notify file at path (see ParseConfig) and each
// sink's secret: a secret_file relative to the file's directory, its
// content with surrounding white space trimmed, or the environment
// variable secret_env, read with getenv. Errors wrap ErrInvalidConfig;
// none quotes a secret.
func LoadConfig(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	cfg, err := ParseConfig(path, data)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Sinks {
		s := &cfg.Sinks[i]
		var secret []byte
		switch {
		case s.SecretFile != "":
			file := s.SecretFile
			if !filepath.IsAbs(file) {
				file = filepath.Join(filepath.Dir(path), file)
			}
			raw, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: sinks[%d] (%s): secret_file: %v", ErrInvalidConfig, path, i, s.Name, err)
			}
			secret = bytes.TrimSpace(raw)
		default:
			secret = []byte(strings.TrimSpace(getenv(s.SecretEnv)))
			if len(secret) == 0 {
				return nil, fmt.Errorf("%w: %s: sinks[%d] (%s): secret_env: the environment variable %s is empty or not set", ErrInvalidConfig, path, i, s.Name, s.SecretEnv)
			}
		}
		if len(secret) < MinSecretLen {
			return nil, fmt.Errorf("%w: %s: sinks[%d] (%s): the secret has %d bytes; give at least %d random bytes (e.g. openssl rand -hex 32)",
				ErrInvalidConfig, path, i, s.Name, len(secret), MinSecretLen)
		}
		s.Secret = secret
	}
	return cfg, nil
}

// ParseConfig parses a notify file named name; it reads no secret (see
// LoadConfig):
//
//	sinks:
//	  - name: oncall                     # [a-z0-9_-]{1,64}
//	    url: https://hooks.example.com/gated
//	    events: [awaiting_operator, escalation, timeout, plugin_down, audit_verification_failed, decided]
//	    tenants: [acme]                  # absent: every tenant, and gated's own events
//	    format: json                     # or slack
//	    secret_file: oncall.secret       # or secret_env: GATED_ONCALL_SECRET
//	    timeout: 10s                     # per request
//	    max_attempts: 8
//	    backoff: 1s                      # first pause; doubles, with jitter
//	    max_age: 15m                     # give up on a notification this old
//	    queue: 1024                      # notifications waiting at most
//
// Errors wrap ErrInvalidConfig and name the file, the line and the
// field: an unknown key, a missing or malformed value, a value out of
// bounds, a sink name given twice, an inline secret.
func ParseConfig(name string, data []byte) (*Config, error) {
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrInvalidConfig, name, line, fmt.Sprintf(format, args...))
	}
	root, err := yamlpos.Parse(data)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return nil, fmt.Errorf("%w: %s: empty; list the webhooks under sinks:", ErrInvalidConfig, name)
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		if errors.Is(e, yamlpos.ErrMoreThanOneDocument) {
			return nil, fail(e.Line, "a notify file holds one YAML document")
		}
		return nil, fail(e.Line, "%s", e.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, name, err)
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root.Line, "want a mapping with the key sinks")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if k.Value != "sinks" {
			return nil, fail(k.Line, "%s: unknown key; the file has one key, sinks", clip(k.Value))
		}
		if list != nil {
			return nil, fail(k.Line, "sinks: given twice")
		}
		list = yamlpos.Deref(root.Content[i+1])
	}
	if list == nil || yamlpos.IsNull(list) || (list.Kind == yaml.SequenceNode && len(list.Content) == 0) {
		return nil, fail(root.Line, "sinks: lists no webhook; without one, leave --notify unset")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fail(list.Line, "sinks: want a list of {name, url, events, ...}")
	}
	if len(list.Content) > maxSinks {
		return nil, fail(list.Line, "sinks: %d webhooks; at most %d", len(list.Content), maxSinks)
	}
	cfg := &Config{}
	names := map[string]int{}
	for i, item := range list.Content {
		item = yamlpos.Deref(item)
		at := fmt.Sprintf("sinks[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fail(item.Line, "%s: want a mapping {name, url, events, ...}", at)
		}
		s, err := parseSink(item, func(line int, format string, args ...any) error {
			return fail(line, "%s: %s", at, fmt.Sprintf(format, args...))
		})
		if err != nil {
			return nil, err
		}
		if j, dup := names[s.Name]; dup {
			return nil, fail(item.Line, "%s: name %s is sinks[%d]'s too; give each sink a name of its own", at, s.Name, j)
		}
		names[s.Name] = i
		cfg.Sinks = append(cfg.Sinks, s)
	}
	return cfg, nil
}

// parseSink reads one entry of sinks.
func parseSink(item *yaml.Node, fail func(line int, format string, args ...any) error) (Sink, error) {
	s := Sink{Format: FormatJSON, Timeout: DefaultTimeout, MaxAttempts: DefaultMaxAttempts,
		Backoff: DefaultBackoff, MaxAge: DefaultMaxAge, Queue: DefaultQueue}
	seen := map[string]bool{}
	scalar := func(k, v *yaml.Node) (string, error) {
		if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) || v.Value == "" {
			return "", fail(v.Line, "%s: want a value", k.Value)
		}
		return v.Value, nil
	}
	for j := 0; j+1 < len(item.Content); j += 2 {
		k, v := item.Content[j], yamlpos.Deref(item.Content[j+1])
		if seen[k.Value] {
			return s, fail(k.Line, "%s: given twice", clip(k.Value))
		}
		seen[k.Value] = true
		switch k.Value {
		case "name":
			val, err := scalar(k, v)
			if err != nil {
				return s, err
			}
			if !sinkName.MatchString(val) {
				return s, fail(v.Line, "name: want a name matching [a-z0-9_-]{1,64}")
			}
			s.Name = val
		case "url":
			val, err := scalar(k, v)
			if err != nil {
				return s, err
			}
			if err := checkURL(val); err != nil {
				return s, fail(v.Line, "url: %v", err)
			}
			s.URL = val
		case "events":
			kinds, err := parseKinds(v)
			if err != nil {
				return s, fail(v.Line, "events: %v", err)
			}
			s.Kinds = kinds
		case "tenants":
			tenants, err := parseTenants(v)
			if err != nil {
				return s, fail(v.Line, "tenants: %v", err)
			}
			s.Tenants = tenants
		case "format":
			val, err := scalar(k, v)
			if err != nil {
				return s, err
			}
			switch Format(val) {
			case FormatJSON, FormatSlack:
				s.Format = Format(val)
			default:
				return s, fail(v.Line, "format: %s: want json or slack", clip(val))
			}
		case "secret_file":
			val, err := scalar(k, v)
			if err != nil {
				return s, err
			}
			s.SecretFile = val
		case "secret_env":
			val, err := scalar(k, v)
			if err != nil {
				return s, err
			}
			if !envName.MatchString(val) {
				return s, fail(v.Line, "secret_env: want the name of an environment variable, e.g. GATED_NOTIFY_SECRET")
			}
			s.SecretEnv = val
		case "secret", "hmac_secret", "key":
			// Not quoted: the value is a secret that is now exposed.
			return s, fail(k.Line, "%s: a secret is never written in the notify file; put it in a file (secret_file) or an environment variable (secret_env), and replace this one, which is now exposed", k.Value)
		case "timeout":
			d, err := parseDuration(k, v, minTimeout, maxTimeout)
			if err != nil {
				return s, fail(v.Line, "%v", err)
			}
			s.Timeout = d
		case "backoff":
			d, err := parseDuration(k, v, minBackoff, maxBackoff)
			if err != nil {
				return s, fail(v.Line, "%v", err)
			}
			s.Backoff = d
		case "max_age":
			d, err := parseDuration(k, v, minMaxAge, maxMaxAge)
			if err != nil {
				return s, fail(v.Line, "%v", err)
			}
			s.MaxAge = d
		case "max_attempts":
			n, err := parseInt(k, v, 1, maxAttemptsBound)
			if err != nil {
				return s, fail(v.Line, "%v", err)
			}
			s.MaxAttempts = n
		case "queue":
			n, err := parseInt(k, v, 1, maxQueue)
			if err != nil {
				return s, fail(v.Line, "%v", err)
			}
			s.Queue = n
		default:
			return s, fail(k.Line, "%s: unknown key; a sink has name, url, events, tenants, format, secret_file or secret_env, timeout, max_attempts, backoff, max_age and queue", clip(k.Value))
		}
	}
	switch {
	case s.Name == "":
		return s, fail(item.Line, "name is required")
	case s.URL == "":
		return s, fail(item.Line, "(%s) url is required", s.Name)
	case len(s.Kinds) == 0:
		return s, fail(item.Line, "(%s) events is required: list the kinds of notification the sink takes", s.Name)
	case s.SecretFile == "" && s.SecretEnv == "":
		return s, fail(item.Line, "(%s) secret_file or secret_env is required: every notification is signed", s.Name)
	case s.SecretFile != "" && s.SecretEnv != "":
		return s, fail(item.Line, "(%s) give secret_file or secret_env, not both", s.Name)
	}
	return s, nil
}

// checkURL accepts absolute http and https URLs with a host, and no
// user information or fragment. It does not quote the URL, which may
// hold a token.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("the URL names no host")
	case u.User != nil:
		return errors.New("the URL holds user information; use the signature (secret_file or secret_env) to authenticate gated")
	case u.Fragment != "":
		return errors.New("the URL has a fragment, which is never sent")
	}
	return nil
}

func parseKinds(v *yaml.Node) ([]Kind, error) {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		return nil, fmt.Errorf("want a list of kinds: %s", kindList())
	}
	var out []Kind
	for _, n := range v.Content {
		n = yamlpos.Deref(n)
		if n.Kind != yaml.ScalarNode || !slices.Contains(Kinds, Kind(n.Value)) {
			return nil, fmt.Errorf("line %d: %s: want one of %s", n.Line, clip(n.Value), kindList())
		}
		if slices.Contains(out, Kind(n.Value)) {
			return nil, fmt.Errorf("line %d: %s is listed twice", n.Line, n.Value)
		}
		out = append(out, Kind(n.Value))
	}
	return out, nil
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

func parseTenants(v *yaml.Node) ([]string, error) {
	if yamlpos.IsNull(v) {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, errors.New("want a list of tenant tokens (absent: every tenant)")
	}
	var out []string
	for _, t := range v.Content {
		t = yamlpos.Deref(t)
		if t.Kind != yaml.ScalarNode || yamlpos.IsNull(t) || !gated.ValidTenant(t.Value) || t.Value == gated.UnknownTenant {
			return nil, fmt.Errorf("line %d: want a tenant token matching [a-z0-9_-]{1,64}", t.Line)
		}
		if slices.Contains(out, t.Value) {
			return nil, fmt.Errorf("line %d: %s is listed twice", t.Line, t.Value)
		}
		out = append(out, t.Value)
	}
	return out, nil
}

func parseDuration(k, v *yaml.Node, lo, hi time.Duration) (time.Duration, error) {
	if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) {
		return 0, fmt.Errorf("%s: want a duration such as 10s", k.Value)
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		return 0, fmt.Errorf("%s: %s is not a duration such as 10s", k.Value, clip(v.Value))
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("%s: %s is out of bounds: from %s to %s", k.Value, d, lo, hi)
	}
	return d, nil
}

func parseInt(k, v *yaml.Node, lo, hi int) (int, error) {
	if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) {
		return 0, fmt.Errorf("%s: want a whole number", k.Value)
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil {
		return 0, fmt.Errorf("%s: %s is not a whole number", k.Value, clip(v.Value))
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%s: %d is out of bounds: from %d to %d", k.Value, n, lo, hi)
	}
	return n, nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}
