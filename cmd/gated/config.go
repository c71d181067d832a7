package main

import (
	"context"

	"github.com/gated/gated/internal/server"
)

type configKey struct{}

// withConfig returns ctx carrying cfg, for commands to read back with
// configFrom.
func withConfig(ctx context.Context, cfg *server.ConfigFile) context.Context {
	return context.WithValue(ctx, configKey{}, cfg)
}

// configFrom returns the configuration file loaded for the running
// command, or an empty one when there is none.
func configFrom(ctx context.Context) *server.ConfigFile {
	if ctx != nil {
		if cfg, ok := ctx.Value(configKey{}).(*server.ConfigFile); ok && cfg != nil {
			return cfg
		}
	}
	return &server.ConfigFile{}
}
