package server

import (
	"github.com/gated/gated/plugins/llm"
	"github.com/gated/gated/plugins/sdk"
	"github.com/gated/gated/plugins/sop"
)

// ServeBundledPlugin serves the bundled reviewer name (sop or llm) over
// the plugin protocol: the server launches its bundled reviewers from its
// own executable (plugins.Bundled), which calls this. It returns once the
// plugin host is done with it.
func ServeBundledPlugin(name, version string) error {
	switch name {
	case sop.Name:
		sdk.Serve(sop.Reviewer{Version: version})
		return nil
	case llm.Name:
		// Keys and addresses come from the environment gated passes
		// (llm.EnvVars); none is needed to start.
		cfg := llm.ConfigFromEnv()
		cfg.Version = version
		sdk.Serve(llm.New(cfg))
		return nil
	}
	return usageError("no bundled plugin named %q (have: %s, %s)", name, sop.Name, llm.Name)
}
