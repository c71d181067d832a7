package server

import (
	"fmt"
	"slices"
	"time"

	"github.com/gated/gated/personas"
	"go.uber.org/zap"
)

// logPersonaReload logs one reload of the --personas directory.
func logPersonaReload(log *zap.Logger, r personas.Reload) {
	for _, p := range r.Warnings {
		log.Warn("persona", zap.String("warning", p.String()))
	}
	for _, p := range r.Errors {
		log.Error("persona file skipped", zap.String("error", p.String()))
	}
	switch {
	case !r.OK:
		log.Error("persona reload refused: the last personas stay in force",
			zap.String("dir", r.Root), zap.String("error", r.Error), zap.Strings("personas", r.Personas))
	case r.Changed:
		log.Info("personas reloaded", zap.String("dir", r.Root), zap.Strings("personas", r.Personas),
			zap.Int("files", len(r.Files)), zap.Int("warnings", len(r.Warnings)), zap.Int("errors", len(r.Errors)),
			zap.Duration("took", r.Duration.Round(time.Microsecond)))
	default:
		log.Info("persona files changed but load alike: personas unchanged", zap.String("dir", r.Root))
	}
}

// unroutedPersona is a persona that names a plugin serve does not run.
type unroutedPersona struct {
	Persona, Plugin string
}

// personasWithoutPlugin lists the personas of snap that name a plugin
// outside configured, sorted by persona. A persona that names no plugin
// goes to the default plugin, which serve checks on its own.
func personasWithoutPlugin(snap *personas.Snapshot, configured []string) []unroutedPersona {
	var out []unroutedPersona
	for _, e := range snap.Entries() {
		if p := e.Persona.Plugin; p != "" && !slices.Contains(configured, p) {
			out = append(out, unroutedPersona{Persona: e.Persona.Name, Plugin: p})
		}
	}
	return out
}

// warnPersonasWithoutPlugin logs one warning per persona that names a
// plugin serve does not run. Such a persona loads fine, but every review
// routed to it is blocked, so serve says so at start and at each reload
// instead of leaving it to the first blocked verdict.
func warnPersonasWithoutPlugin(log *zap.Logger, snap *personas.Snapshot, configured []string) {
	for _, u := range personasWithoutPlugin(snap, configured) {
		log.Warn(fmt.Sprintf("persona %q names plugin %q, which is not configured: its reviews will be blocked", u.Persona, u.Plugin),
			zap.String("persona", u.Persona), zap.String("plugin", u.Plugin), zap.Strings("configured", configured))
	}
}
