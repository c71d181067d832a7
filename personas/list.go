package personas

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteList prints the personas of reg, loaded from dir, as gated personas
// list does: a table, or (format "json") a JSON document.
func WriteList(w io.Writer, dir string, reg *Registry, format string) error {
	entries := reg.Snapshot().Entries()
	if format == "json" {
		doc := struct {
			Dir      string           `json:"dir,omitempty"`
			Personas []PersonaListing `json:"personas"`
		}{Dir: dir, Personas: make([]PersonaListing, len(entries))}
		for i, e := range entries {
			doc.Personas[i] = ListingOf(e)
		}
		out, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(out))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPLUGIN\tMODEL\tPERMISSION\tTURNS\tTIMEOUT\tREQUIRED GATES\tSOURCE")
	for _, e := range entries {
		l := ListingOf(e)
		source := l.Source
		if e.Origin == OriginReplaced {
			source = "(replaced)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.Name, orText(l.Plugin, "(default)"), orText(l.Model, "-"),
			orText(l.PermissionMode, "-"), l.MaxTurns, orText(l.Timeout, "-"), orText(strings.Join(l.RequiredGates, ","), "-"), source)
	}
	return tw.Flush()
}

func orText(s, empty string) string {
	if s == "" {
		return empty
	}
	return s
}
