package mcpgate

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// PrintTools prints, as a table, how each upstream tool maps onto a
// proposal and whether tools/list shows it.
func (g *Gate) PrintTools(w io.Writer) error {
	tools := g.Tools()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tACTION\tCLASS\tTARGET\tREASON\tLISTED")
	for _, t := range tools {
		m := t.Mapping
		target := "arguments"
		if m.Target != nil {
			var parts []string
			for k, v := range m.Target {
				parts = append(parts, k+"="+v)
			}
			slices.Sort(parts)
			target = strings.Join(parts, ",")
		}
		if len(m.TargetFixed) > 0 {
			target += " +fixed"
		}
		listed := "yes"
		switch {
		case t.Hidden:
			listed = "no: " + t.Denied
		case t.Denied != "":
			listed = "marked: " + t.Denied
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%s)\t%s\t%s\t%s\n", m.Tool, m.Action, m.Class, m.ClassFrom, target, m.ReasonArgument, listed)
	}
	return tw.Flush()
}
