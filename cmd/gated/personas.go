package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gated/gated/personas"
)

// personasCmd is `gated personas`: tools for persona authors that work on
// files alone, without a running gate.
func personasCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "personas",
		Short: "List and check reviewer personas",
		Long: `personas works on the persona files gated serve loads with --personas DIR:
markdown files (*.md, in DIR and its subdirectories) whose YAML frontmatter
configures a reviewer and whose body is its system prompt. The built-in
personas (reviewer, dba) are always loaded first; a file may replace one.`,
	}
	c.AddCommand(personasListCmd(), personasLintCmd())
	return c
}

// personasDir checks the optional DIR argument: none means the built-ins
// alone; one must name an existing directory.
func personasDir(args []string) (string, error) {
	if len(args) == 0 {
		return "", nil
	}
	info, err := os.Stat(args[0])
	if err != nil || !info.IsDir() {
		return "", usageError("%s: not a directory of persona files", args[0])
	}
	return args[0], nil
}

// --- gated personas list ------------------------------------------------------

func personasListCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "list [DIR]",
		Short: "Show the personas gated would serve",
		Long: `list loads the built-in personas and the persona files under DIR, as
"gated serve --personas DIR" does, and shows every persona that loads: name,
plugin, model, permission mode, max turns, timeout, required gates and the
file it came from. A file that does not load is left out, with a warning on
standard error; "gated personas lint DIR" explains each problem.

In the text format an empty plugin reads (default): the gate's
--default-plugin serves it; an empty model (-) leaves the choice to the
plugin; an empty timeout (-) means the gate's --review-timeout.

Exit status: 0 listed, 1 DIR cannot be read, 2 bad usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPersonasList(cmd.OutOrStdout(), cmd.ErrOrStderr(), format, args)
		},
	}
	c.Flags().StringVar(&format, "format", "text", "text or json")
	return c
}

func runPersonasList(w, errw io.Writer, format string, args []string) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	dir, err := personasDir(args)
	if err != nil {
		return err
	}
	reg, rep, err := personas.New(dir)
	if err != nil {
		return err
	}
	for _, m := range rep.Messages() {
		fmt.Fprintln(errw, "gated: warning:", m)
	}
	entries := reg.Snapshot().Entries()
	if format == "json" {
		doc := struct {
			Dir      string                    `json:"dir,omitempty"`
			Personas []personas.PersonaListing `json:"personas"`
		}{Dir: dir, Personas: make([]personas.PersonaListing, len(entries))}
		for i, e := range entries {
			doc.Personas[i] = personas.ListingOf(e)
		}
		return writeJSON(w, doc)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPLUGIN\tMODEL\tPERMISSION\tTURNS\tTIMEOUT\tREQUIRED GATES\tSOURCE")
	for _, e := range entries {
		l := personas.ListingOf(e)
		source := l.Source
		if e.Origin == personas.OriginReplaced {
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

// --- gated personas lint ------------------------------------------------------

type personasLintOptions struct {
	format string
	strict bool
}

func personasLintCmd() *cobra.Command {
	o := &personasLintOptions{}
	c := &cobra.Command{
		Use:   "lint [DIR | FILE]",
		Short: "Check persona files and report every problem with its line",
		Long: `lint checks the persona files under DIR as "gated serve --personas DIR"
loads them, or the one FILE given, and prints every problem as
file:line: severity: message.

Errors keep a file out of the registry: YAML that does not parse, a missing
or invalid name, max_turns outside 1..50, a model that is not
provider/model with a known provider (anthropic, ollama, openai,
openai-compatible), a tools or disallowed_tools pattern that does not
compile as a glob, a timeout under 30s, an empty body. Warnings do not: an
unknown frontmatter key, a second file with a name already taken, a file
replacing a built-in persona. With no argument lint checks the built-ins.

Exit status: 0 no errors (warnings alone pass, unless --strict), 1 errors,
or warnings with --strict, or DIR cannot be read, 2 bad usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPersonasLint(cmd.OutOrStdout(), o, args)
		},
	}
	f := c.Flags()
	f.StringVar(&o.format, "format", "text", "text or json")
	f.BoolVar(&o.strict, "strict", false, "fail on warnings too")
	return c
}

func runPersonasLint(w io.Writer, o *personasLintOptions, args []string) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	report, err := lintPath(args)
	if err != nil {
		return err
	}
	if o.format == "json" {
		err = writeJSON(w, report)
	} else {
		err = personas.WriteLintText(w, report)
	}
	if err != nil {
		return err
	}
	silent := o.format == "text"
	switch {
	case report.Errors > 0:
		return &exitError{code: exitFailure, err: fmt.Errorf("%d persona errors", report.Errors), silent: silent}
	case o.strict && report.Warnings > 0:
		return &exitError{code: exitFailure, err: fmt.Errorf("%d persona warnings (--strict)", report.Warnings), silent: silent}
	}
	return nil
}

// lintPath checks the argument: nothing (the built-ins), a directory, or
// one file.
func lintPath(args []string) (*personas.LintReport, error) {
	r := &personas.LintReport{Problems: []personas.Problem{}, Files: []string{}}
	if len(args) == 1 {
		if info, err := os.Stat(args[0]); err == nil && info.Mode().IsRegular() {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return nil, err
			}
			p, problems := personas.Check(args[0], src)
			if p != nil {
				r.Personas, r.Files = []string{p.Name}, []string{args[0]}
			}
			r.Add(problems)
			return r, nil
		}
	}
	dir, err := personasDir(args)
	if err != nil {
		return nil, err
	}
	reg, rep, err := personas.New(dir)
	if err != nil {
		return nil, err
	}
	r.Personas = reg.Names()
	r.Files = append(r.Files, rep.Files...)
	r.Add(rep.Warnings)
	r.Add(rep.Errors)
	return r, nil
}
