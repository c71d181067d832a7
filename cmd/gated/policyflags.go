package main

import (
	"github.com/spf13/pflag"

	"github.com/gated/gated/policies"
)

// policySourceOptions are the flags that say where the policy comes from,
// shared by serve and the policy commands.
type policySourceOptions struct {
	dir       string
	replace   bool
	dataFiles []string
	evaluator string
}

func (o *policySourceOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.dir, "policies", "", "directory of .rego files and data documents added to the embedded default bundle")
	f.BoolVar(&o.replace, "policies-replace", false, "use --policies instead of the embedded default bundle")
	f.StringArrayVar(&o.dataFiles, "policy-data", nil, "YAML or JSON data document merged at the data root (repeatable), e.g. a file with gated: {config: ...}")
	f.StringVar(&o.evaluator, "policy-evaluator", "auto", "auto: interpret OPA's plan of the decision when the policy allows it, else topdown; topdown: always OPA's general evaluator")
}

func (o *policySourceOptions) sources() (policies.Sources, error) {
	if o.replace && o.dir == "" {
		return policies.Sources{}, usageError("--policies-replace needs --policies DIR: there must be a policy to use instead of the default")
	}
	var topdown bool
	switch o.evaluator {
	case "auto", "":
	case policies.EvaluatorTopdown:
		topdown = true
	default:
		return policies.Sources{}, usageError("--policy-evaluator %q: want auto or topdown", o.evaluator)
	}
	return policies.Sources{Dir: o.dir, Replace: o.replace, DataFiles: o.dataFiles, Topdown: topdown}, nil
}

// compileOptions are the Compile options the flags ask for; sources has
// checked them.
func (o *policySourceOptions) compileOptions() []policies.CompileOption {
	if o.evaluator == policies.EvaluatorTopdown {
		return []policies.CompileOption{policies.Topdown()}
	}
	return nil
}
