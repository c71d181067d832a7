package server

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/policies"
)

// PolicySource are the flags that say where the policy comes from,
// shared by serve and the policy commands.
type PolicySource struct {
	Dir       string
	Replace   bool
	DataFiles []string
	Evaluator string
}

// Sources returns the policy Sources the flags name, and a note for the
// user when --policies names the default bundle's own files. A directory
// that holds the embedded default bundle, such as the repository's
// policies/, is loaded in place of the embedded copy (as with
// --policies-replace) rather than on top of it, which would define each of
// its rules twice. The decision holds for the process's life, so a serve
// that watches the directory keeps it through later edits.
func (o *PolicySource) Sources() (policies.Sources, string, error) {
	src, err := o.flagSources()
	if err != nil || src.Dir == "" || src.Replace {
		return src, "", err
	}
	switch same, overlap := policies.DefaultBundleAt(src.Dir); {
	case same:
		src.Replace = true
		return src, fmt.Sprintf("%s holds the default bundle gated embeds (same files, same content): using it in place of the embedded copy, as --policies-replace does", src.Dir), nil
	case len(overlap) > 0:
		return src, fmt.Sprintf("%s has modules named like the default bundle's (%s) but is not the bundle gated embeds: loaded on top of it, a copy of the bundle defines its rules twice; pass --policies-replace to use %s instead", src.Dir, strings.Join(overlap, ", "), src.Dir), nil
	}
	return src, "", nil
}

// flagSources is what the flags say, checked.
func (o *PolicySource) flagSources() (policies.Sources, error) {
	if o.Replace && o.Dir == "" {
		return policies.Sources{}, usageError("--policies-replace needs --policies DIR: there must be a policy to use instead of the default")
	}
	var topdown bool
	switch o.Evaluator {
	case "auto", "":
	case policies.EvaluatorTopdown:
		topdown = true
	default:
		return policies.Sources{}, usageError("--policy-evaluator %q: want auto or topdown", o.Evaluator)
	}
	return policies.Sources{Dir: o.Dir, Replace: o.Replace, DataFiles: o.DataFiles, Topdown: topdown}, nil
}

// CompileOptions are the Compile options the flags ask for; sources has
// checked them.
func (o *PolicySource) CompileOptions() []policies.CompileOption {
	if o.Evaluator == policies.EvaluatorTopdown {
		return []policies.CompileOption{policies.Topdown()}
	}
	return nil
}

func logReload(log *zap.Logger, r policies.Reload) {
	switch {
	case !r.OK:
		log.Error("policy reload refused: the last good policy stays in force",
			zap.String("serving", r.Previous), zap.String("error", r.Error), zap.Duration("took", r.Duration))
	case r.Changed:
		log.Info("policy reloaded", zap.String("revision", r.Revision), zap.String("previous", r.Previous),
			zap.Int("tests", r.Tests), zap.Duration("took", r.Duration))
	default:
		log.Info("policy sources changed but decide alike: revision unchanged", zap.String("revision", r.Revision))
	}
}

// reloadEvent is the audit record of a reload attempt: gated's own event,
// under the reserved tenant token.
func reloadEvent(r policies.Reload, serving string) gated.AuditEvent {
	name := gated.EventPolicyReloaded
	if !r.OK {
		name = gated.EventPolicyReloadFailed
	}
	data, _ := json.Marshal(r)
	return gated.AuditEvent{
		V: gated.SchemaVersion, Event: name, Tenant: gated.UnknownTenant, At: r.At.UTC(),
		PolicyRevision: serving, Data: data,
	}
}
