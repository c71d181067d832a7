package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

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

func (o *PolicySource) register(f *pflag.FlagSet) {
	f.StringVar(&o.Dir, "policies", "", "directory of .rego files and data documents added to the embedded default bundle")
	f.BoolVar(&o.Replace, "policies-replace", false, "use --policies instead of the embedded default bundle")
	f.StringArrayVar(&o.DataFiles, "policy-data", nil, "YAML or JSON data document merged at the data root (repeatable), e.g. a file with gated: {config: ...}")
	f.StringVar(&o.Evaluator, "policy-evaluator", "auto", "auto: interpret OPA's plan of the decision when the policy allows it, else topdown; topdown: always OPA's general evaluator")
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
