package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/spf13/cobra"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/strictjson"
	"github.com/gated/gated/personas"
	"github.com/gated/gated/policies"
)

// policyCmd is `gated policy`: tools for policy authors that work on a
// bundle without a running gate or NATS.
func policyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Test, check and try out a policy bundle",
		Long: `policy works on a policy bundle without NATS: the embedded default bundle,
plus a directory of your own (--policies DIR), or your directory alone
(--policies DIR --policies-replace), plus data files (--policy-data FILE).`,
	}
	c.AddCommand(policyTestCmd(), policyEvalCmd(), policyCheckCmd())
	return c
}

// loadPolicyBundle reads the bundle that o names, and prints a note about
// the policy directory, if there is one, on errw. args is the optional
// positional DIR of `test` and `check`, the same as --policies DIR.
func loadPolicyBundle(o *policySourceOptions, args []string, errw io.Writer) (*policies.Bundle, []string, error) {
	if len(args) > 0 {
		if o.dir != "" {
			return nil, nil, usageError("give the policy directory either as an argument or as --policies, not both (%s and %s)", args[0], o.dir)
		}
		o.dir = args[0]
	}
	src, note, err := o.sources()
	if err != nil {
		return nil, nil, err
	}
	if note != "" {
		fmt.Fprintln(errw, "note:", note)
	}
	return policies.LoadFiles(src)
}

// checkFormat refuses an output format other than text or json.
func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return usageError("--format %q: want text or json", format)
	}
	return nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}

// --- gated policy test --------------------------------------------------------

type policyTestOptions struct {
	bundle         policySourceOptions
	run            string
	format         string
	verbose        bool
	includeDefault bool
}

func policyTestCmd() *cobra.Command {
	o := &policyTestOptions{}
	c := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the bundle's Rego tests, report coverage and check the evaluators agree",
		Long: `test runs the Rego tests (rules named test_* in *_test.rego files) and
reports the line coverage of every non-test file. The tests run on OPA's
topdown evaluator; gated decides with its planned evaluator when the bundle
allows it, so test also records every input (and every with data...
override) under which the tests evaluate the bundle's rules, decides
data.gated.decision for each with both evaluators, and reports any input
they decide differently. gated refuses to serve or reload such a bundle.

With no DIR it tests the embedded default bundle. With DIR it runs DIR's
tests against the default bundle plus DIR (or DIR alone with
--policies-replace): exactly the tests gated runs before it serves or
reloads that policy. The default bundle's own tests assume the default
data, which DIR may rightly change; --include-default runs them as well,
as stock "opa test" on both directories would.

Exit status: 0 every test passed (or none was found) and the evaluators
agree, 1 a test failed or errored, the evaluators disagree, or the bundle
does not load or compile, 2 bad usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyTest(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, args)
		},
	}
	f := c.Flags()
	o.bundle.register(f)
	f.StringVar(&o.run, "run", "", "run only the tests whose names match this regular expression")
	f.StringVar(&o.format, "format", "text", "text or json")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "list every test, not only the failures")
	f.BoolVar(&o.includeDefault, "include-default", false, "with DIR, also run the default bundle's tests")
	return c
}

func runPolicyTest(ctx context.Context, w, errw io.Writer, o *policyTestOptions, args []string) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if _, err := regexp.Compile(o.run); err != nil {
		return usageError("--run %q: %v", o.run, err)
	}
	b, _, err := loadPolicyBundle(&o.bundle, args, errw)
	if err != nil {
		return err
	}
	userOnly := o.bundle.dir != "" && !o.includeDefault
	if userOnly {
		b = b.UserTests()
	}
	report, err := policies.RunTests(ctx, b, o.run)
	if err != nil {
		return err
	}
	if userOnly {
		// Coverage is about the files whose tests ran.
		for name := range report.Coverage.Files {
			if strings.HasPrefix(name, "default/") {
				delete(report.Coverage.Files, name)
			}
		}
	}
	// The tests ran on topdown; the parity check decides their inputs with
	// the planned evaluator too, as gated does before it serves the bundle.
	var parity *policies.ParityReport
	var parityErr error
	if len(report.Results) > 0 {
		parity, parityErr = checkParity(ctx, b, &o.bundle, o.run)
	}
	sum := summarize(report)
	if o.format == "json" {
		doc := testDocument(report, sum)
		doc.Parity = parityDocument(parity, parityErr)
		err = writeJSON(w, doc)
	} else {
		err = writeTestText(w, report, sum, o.verbose, o.run)
		if err == nil {
			err = writeParityText(w, parity, parityErr)
		}
	}
	if err != nil {
		return err
	}
	if bad := sum.Failed + sum.Errored; bad > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d tests did not pass (%d failed, %d errored)", bad, sum.Total, sum.Failed, sum.Errored)}
	}
	if parityErr != nil {
		return &exitError{code: exitFailure, err: fmt.Errorf("parity check: %w", parityErr)}
	}
	if parity != nil && len(parity.Disagreements) > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%w on %d of %d test inputs", policies.ErrEvaluatorsDisagree, len(parity.Disagreements), parity.Compared)}
	}
	return nil
}

// checkParity compiles b as serve would and compares the planned
// evaluator with topdown on the inputs of b's tests that match filter.
func checkParity(ctx context.Context, b *policies.Bundle, o *policySourceOptions, filter string) (*policies.ParityReport, error) {
	ev, err := policies.Compile(ctx, b, o.compileOptions()...)
	if err != nil {
		return nil, err
	}
	return policies.CheckParity(ctx, ev, b, filter)
}

// parityJSON is the parity check in `policy test --format json`.
type parityJSON struct {
	Evaluator     policies.PlanStatus     `json:"evaluator"`
	Compared      int                     `json:"compared"`
	Skipped       int                     `json:"skipped"`
	Disagreements []policies.Disagreement `json:"disagreements"`
	Error         string                  `json:"error,omitempty"`
}

func parityDocument(r *policies.ParityReport, err error) parityJSON {
	switch {
	case err != nil:
		return parityJSON{Disagreements: []policies.Disagreement{}, Error: err.Error()}
	case r == nil: // no tests
		return parityJSON{Disagreements: []policies.Disagreement{}}
	}
	return parityJSON{Evaluator: r.Evaluator, Compared: r.Compared, Skipped: r.Skipped, Disagreements: r.Disagreements}
}

// writeParityText prints the parity check: one line when the evaluators
// agree, every disagreement when they do not.
func writeParityText(w io.Writer, r *policies.ParityReport, err error) error {
	var line string
	switch {
	case err == nil && r == nil:
		return nil // no tests, no inputs
	case err != nil:
		line = "parity: not checked: " + err.Error()
	case r.Evaluator.Evaluator != policies.EvaluatorPlanned:
		line = fmt.Sprintf("parity: topdown decides this bundle (%s): nothing to compare", r.Evaluator.Reason)
	case len(r.Disagreements) == 0:
		line = fmt.Sprintf("parity: PASS: the planned evaluator decides the %d inputs of these tests as topdown does", r.Compared)
	default:
		line = fmt.Sprintf("parity: FAIL: the planned evaluator and topdown disagree on %d of %d inputs of these tests", len(r.Disagreements), r.Compared)
		for _, d := range r.Disagreements {
			line += "\n" + d.String()
		}
	}
	if err == nil && r.Skipped > 0 {
		line += fmt.Sprintf("\n  (%d evaluations under a mocked function or rule not compared)", r.Skipped)
	}
	_, werr := fmt.Fprintln(w, line)
	return werr
}

// testSummary counts a test run's results.
type testSummary struct {
	Total    int     `json:"total"`
	Passed   int     `json:"passed"`
	Failed   int     `json:"failed"`
	Errored  int     `json:"errored"`
	Skipped  int     `json:"skipped"`
	Coverage float64 `json:"coverage"`
}

func summarize(r *policies.TestReport) testSummary {
	s := testSummary{Total: len(r.Results)}
	for _, res := range r.Results {
		switch testOutcome(res) {
		case "PASS":
			s.Passed++
		case "FAIL":
			s.Failed++
		case "ERROR":
			s.Errored++
		case "SKIP":
			s.Skipped++
		}
	}
	covered, notCovered := 0, 0
	for _, fc := range fileCoverages(r.Coverage) {
		covered += fc.CoveredLines
		notCovered += fc.NotCoveredLines
	}
	if covered+notCovered > 0 {
		s.Coverage = 100 * float64(covered) / float64(covered+notCovered)
	}
	return s
}

// testOutcome is PASS, FAIL, ERROR or SKIP.
func testOutcome(r *tester.Result) string {
	switch {
	case r.Error != nil:
		return "ERROR"
	case r.Fail:
		return "FAIL"
	case r.Skip:
		return "SKIP"
	}
	return "PASS"
}

// testLocation is the file:line of a test, or "" when unknown.
func testLocation(r *tester.Result) string {
	if r.Location == nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row)
}

// failedAt is the file:line and text of the expression a failed test
// stopped at, or "".
func failedAt(r *tester.Result) string {
	if r.FailedAt == nil || r.FailedAt.Location == nil {
		return ""
	}
	loc := r.FailedAt.Location
	return fmt.Sprintf("%s:%d: %s", loc.File, loc.Row, bytes.TrimSpace(loc.Text))
}

// fileCoverage is the coverage of one non-test file.
type fileCoverage struct {
	File            string      `json:"file"`
	Coverage        float64     `json:"coverage"`
	CoveredLines    int         `json:"covered_lines"`
	NotCoveredLines int         `json:"not_covered_lines"`
	NotCovered      []lineRange `json:"not_covered"`
}

// lineRange is an inclusive range of lines.
type lineRange struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

func (r lineRange) String() string {
	if r.Start == r.End {
		return fmt.Sprint(r.Start)
	}
	return fmt.Sprintf("%d-%d", r.Start, r.End)
}

// fileCoverages lists the coverage of the non-test files, by name. OPA's
// report also holds the lines of the tests themselves, which are left out.
func fileCoverages(rep cover.Report) []fileCoverage {
	var out []fileCoverage
	for name, fr := range rep.Files {
		if strings.HasSuffix(name, "_test.rego") || fr == nil {
			continue
		}
		fc := fileCoverage{File: name, Coverage: fr.Coverage, CoveredLines: fr.CoveredLines,
			NotCoveredLines: fr.NotCoveredLines, NotCovered: mergeRanges(fr.NotCovered)}
		if fc.CoveredLines+fc.NotCoveredLines == 0 {
			fc.Coverage = 100
		}
		out = append(out, fc)
	}
	slices.SortFunc(out, func(a, b fileCoverage) int { return strings.Compare(a.File, b.File) })
	return out
}

// mergeRanges turns OPA's ranges into sorted line ranges, joining those
// that touch.
func mergeRanges(rs []cover.Range) []lineRange {
	out := []lineRange{}
	for _, r := range rs {
		out = append(out, lineRange{Start: r.Start.Row, End: max(r.End.Row, r.Start.Row)})
	}
	slices.SortFunc(out, func(a, b lineRange) int { return a.Start - b.Start })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && r.Start <= merged[n-1].End+1 {
			merged[n-1].End = max(merged[n-1].End, r.End)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// writeTestText prints one line per test (failures only unless verbose),
// a summary line, and the coverage of every non-test file.
func writeTestText(w io.Writer, r *policies.TestReport, s testSummary, verbose bool, filter string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, res := range r.Results {
		outcome := testOutcome(res)
		if !verbose && (outcome == "PASS" || outcome == "SKIP") {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s.%s\t(%s)\t%s\n", outcome, res.Package, res.Name, res.Duration.Round(time.Microsecond), testLocation(res))
		for _, detail := range testDetails(res) {
			fmt.Fprintf(tw, "  %s\n", detail)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, summaryLine(s, filter))
	if s.Total == 0 {
		return nil // no coverage to speak of
	}
	for _, fc := range fileCoverages(r.Coverage) {
		fmt.Fprintf(tw, "  %s\t%.1f%%\t%s\n", fc.File, fc.Coverage, notCoveredText(fc.NotCovered))
	}
	return tw.Flush()
}

// testDetails are the indented lines under a failed or errored test.
func testDetails(res *tester.Result) []string {
	var lines []string
	if res.Error != nil {
		for _, l := range strings.Split(res.Error.Error(), "\n") {
			lines = append(lines, "error: "+l)
		}
	}
	if at := failedAt(res); at != "" {
		lines = append(lines, "failed at "+at)
	}
	if res.Fail || res.Error != nil {
		for _, l := range strings.Split(strings.TrimRight(string(res.Output), "\n"), "\n") {
			if l != "" {
				lines = append(lines, "output: "+l)
			}
		}
	}
	return lines
}

func summaryLine(s testSummary, filter string) string {
	if s.Total == 0 {
		if filter != "" {
			return fmt.Sprintf("no tests match --run %q", filter)
		}
		return "no tests found: name test rules test_* in *_test.rego files"
	}
	verdict := "PASS"
	if s.Failed+s.Errored > 0 {
		verdict = "FAIL"
	}
	line := fmt.Sprintf("%s: %d/%d tests", verdict, s.Passed, s.Total-s.Skipped)
	if s.Failed > 0 {
		line += fmt.Sprintf(", %d failed", s.Failed)
	}
	if s.Errored > 0 {
		line += fmt.Sprintf(", %d errored", s.Errored)
	}
	if s.Skipped > 0 {
		line += fmt.Sprintf(", %d skipped", s.Skipped)
	}
	return line + fmt.Sprintf(", coverage %.1f%%", s.Coverage)
}

func notCoveredText(rs []lineRange) string {
	if len(rs) == 0 {
		return ""
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return "(not covered: lines " + strings.Join(parts, ", ") + ")"
}

// testJSON is one test in `policy test --format json`.
type testJSON struct {
	Package    string `json:"package"`
	Name       string `json:"name"`
	Location   string `json:"location"`
	Result     string `json:"result"`
	DurationNS int64  `json:"duration_ns"`
	Error      string `json:"error,omitempty"`
	FailedAt   string `json:"failed_at,omitempty"`
	Output     string `json:"output,omitempty"`
}

// testDoc is the output of `policy test --format json`.
type testDoc struct {
	Tests    []testJSON     `json:"tests"`
	Summary  testSummary    `json:"summary"`
	Coverage []fileCoverage `json:"coverage"`
	Parity   parityJSON     `json:"parity"`
}

func testDocument(r *policies.TestReport, s testSummary) testDoc {
	doc := testDoc{Tests: []testJSON{}, Summary: s, Coverage: fileCoverages(r.Coverage)}
	if doc.Coverage == nil {
		doc.Coverage = []fileCoverage{}
	}
	for _, res := range r.Results {
		t := testJSON{Package: res.Package, Name: res.Name, Location: testLocation(res),
			Result: strings.ToLower(testOutcome(res)), DurationNS: res.Duration.Nanoseconds(),
			FailedAt: failedAt(res), Output: string(res.Output)}
		if res.Error != nil {
			t.Error = res.Error.Error()
		}
		doc.Tests = append(doc.Tests, t)
	}
	return doc
}

// --- gated policy check -------------------------------------------------------

func policyCheckCmd() *cobra.Command {
	o := &policySourceOptions{}
	c := &cobra.Command{
		Use:   "check [DIR]",
		Short: "Load and compile the bundle in OPA strict mode",
		Long: `check loads the default bundle plus DIR (or DIR alone with --policies-replace)
and the --policy-data files, compiles it in OPA strict mode (unused variables
and imports are errors), runs the bundle's data checks
(data.gated.config_errors) and checks the shape of the decision on sample
proposals. It prints the bundle's warnings (data.gated.config_warnings) on
stderr, such as an SOP action pattern with **, which spans any number of
words of an action; warnings do not fail the check. It does not run the
Rego tests: "gated policy test" does.
Exit status: 0 the bundle is sound, 1 it is not, 2 bad usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyCheck(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, args)
		},
	}
	o.register(c.Flags())
	return c
}

func runPolicyCheck(ctx context.Context, w, errw io.Writer, o *policySourceOptions, args []string) error {
	ev, err := checkBundle(ctx, w, errw, o, args)
	var ex *exitError
	switch {
	case err == nil:
		for _, warning := range ev.ConfigWarnings() {
			fmt.Fprintln(errw, "warning:", warning)
		}
		fmt.Fprintf(w, "ok: revision %s (strict mode)\n", ev.Revision())
		if st := ev.Plan(); st.Reason != "" {
			fmt.Fprintf(w, "evaluator: %s (%s)\n", st.Evaluator, st.Reason)
		} else {
			fmt.Fprintf(w, "evaluator: %s\n", st.Evaluator)
		}
		return nil
	case errors.As(err, &ex):
		return err
	}
	fmt.Fprintln(errw, strings.TrimSpace(err.Error()))
	fmt.Fprintln(errw, `policy check failed; fix the problems above (check only compiles: "gated policy test" runs the Rego tests)`)
	return &exitError{code: exitFailure, err: err, silent: true}
}

// checkBundle loads the bundle, lists its files on w and compiles it in
// strict mode.
func checkBundle(ctx context.Context, w, errw io.Writer, o *policySourceOptions, args []string) (*policies.Evaluator, error) {
	b, files, err := loadPolicyBundle(o, args, errw)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		fmt.Fprintf(w, "checked %s\n", f)
	}
	return policies.Compile(ctx, b, append(o.compileOptions(), policies.Strict())...)
}

// --- gated policy eval --------------------------------------------------------

type policyEvalOptions struct {
	bundle      policySourceOptions
	file        string
	persona     string
	personasDir string
	history     string
	now         string
	format      string
}

func policyEvalCmd() *cobra.Command {
	o := &policyEvalOptions{}
	c := &cobra.Command{
		Use:   "eval -f proposal.json",
		Short: "Show what the policy decides for one proposal, and which rules fired",
		Long: `eval decodes one proposal as strictly as the gate does and evaluates the
policy on it locally, with no NATS and no reviewer: the persona is --persona,
else the proposal's reviewer, else "reviewer", and when the policy routes the
review to another persona eval evaluates again with that one, as the gate
does. It prints what the gate decides before any review, with the gate's
own outcome function: approved or rejected at policy, blocked at review,
or needs review. --history is a JSON array of verdicts (as gated stores
them) that the policy sees as the recent verdicts on the proposal's target.
Exit status: 0 the gate approves at policy or routes to review, 3 it
rejects, blocks or fails the proposal before review,
2 bad usage, 1 any other error (an invalid proposal or history, a bundle that
does not load).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPolicyEval(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := c.Flags()
	o.bundle.register(f)
	f.StringVarP(&o.file, "file", "f", "", "proposal JSON file, or - for standard input")
	f.StringVar(&o.persona, "persona", "", "evaluate with this persona (default: the proposal's reviewer, else reviewer)")
	f.StringVar(&o.personasDir, "personas", "", "directory of persona files (*.md) added to the built-in personas")
	f.StringVar(&o.history, "history", "", "JSON file holding an array of recent verdicts on the proposal's target")
	f.StringVar(&o.now, "now", "", "evaluate at this RFC 3339 time (default: now)")
	f.StringVar(&o.format, "format", "text", "text or json")
	return c
}

// evalRun is one `policy eval`: its input and what the policy said.
type evalRun struct {
	personaName string
	persona     *engine.Persona
	routedFrom  string // the persona first evaluated, when the policy routed away from it
	// addedFrom is the routed persona when the decision shown is that of
	// a reviewer the proposal added (review.also), which the policy
	// refuses; missing are added reviewers that are not loaded.
	addedFrom string
	missing   []string
	decision  engine.PolicyDecision
	fired     []policies.Fired
	revision  string
	// settled is what the gate decides before any review, as the engine
	// decides it; done is false when the proposal goes on to review.
	settled engine.Settled
	done    bool
}

func runPolicyEval(ctx context.Context, stdin io.Reader, w, errw io.Writer, o *policyEvalOptions) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if o.file == "" {
		return usageError("-f is required: a proposal JSON file, or - for standard input")
	}
	now, err := parseNow(o.now)
	if err != nil {
		return err
	}
	data, err := readInput(o.file, stdin)
	if err != nil {
		return usageError("reading %s: %v", o.file, err)
	}
	p, err := engine.DecodeProposal(data, "", "", engine.Limits{})
	if err != nil {
		name := o.file
		if name == "-" {
			name = "standard input"
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	history, err := readHistory(o.history)
	if err != nil {
		return err
	}
	reg, err := loadPersonas(o.personasDir, errw)
	if err != nil {
		return err
	}
	if o.persona != "" {
		if _, ok := reg.Persona(o.persona); !ok {
			return usageError("--persona %q: no such persona (known: %s)", o.persona, strings.Join(reg.Names(), ", "))
		}
	}
	b, _, err := loadPolicyBundle(&o.bundle, nil, errw)
	if err != nil {
		return err
	}
	ev, err := policies.Compile(ctx, b, o.bundle.compileOptions()...)
	if err != nil {
		return err
	}
	run, err := evaluate(ctx, ev, reg, engine.PolicyInput{Proposal: p, History: history, Now: now}, o.persona)
	if err != nil {
		return err
	}
	if o.format == "json" {
		err = writeJSON(w, evalDocument(run))
	} else {
		err = writeEvalText(w, run)
	}
	if err != nil {
		return err
	}
	if run.done && run.settled.Outcome != engine.OutcomeApproved {
		return &exitError{code: exitNotApproved, err: fmt.Errorf("%s at %s", run.settled.Outcome, run.settled.Stage), silent: true}
	}
	return nil
}

// parseNow reads --now, defaulting to the current time.
func parseNow(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageError("--now %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return t, nil
}

// loadPersonas loads the built-in personas plus those under dir, printing
// the loader's warnings.
func loadPersonas(dir string, errw io.Writer) (*personas.Registry, error) {
	if dir != "" {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			return nil, usageError("--personas %s: not a directory", dir)
		}
	}
	reg, warnings, err := personas.Load(dir)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintln(errw, "gated: warning:", w)
	}
	return reg, nil
}

// readHistory decodes --history strictly: a JSON array of verdicts, no
// field the verdict schema lacks, every decided_at set.
func readHistory(name string) ([]engine.Verdict, error) {
	if name == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, usageError("reading --history: %v", err)
	}
	var items []json.RawMessage
	if err := strictJSON(raw, &items); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of verdicts: %v", name, err)
	}
	history := make([]engine.Verdict, len(items))
	for i, item := range items {
		if err := strictJSON(item, &history[i]); err != nil {
			return nil, fmt.Errorf("%s: verdict [%d]: %v", name, i, err)
		}
		if history[i].DecidedAt.IsZero() {
			return nil, fmt.Errorf("%s: verdict [%d]: decided_at is missing: want an RFC 3339 time", name, i)
		}
	}
	return history, nil
}

// strictJSON decodes one JSON value into v, refusing unknown fields and
// trailing data.
func strictJSON(raw []byte, v any) error {
	err := strictjson.Decode(raw, v)
	if typ, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typ.Field != "" {
		return fmt.Errorf("field %s must not be %s", typ.Field, typ.Value)
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// evaluate runs the policy as the engine's judge does: with the persona
// asked for, else the default persona, and once more with the persona the
// policy routes the review to, unless the persona was given explicitly.
// Each reviewer the policy adds (review.also, the proposal's reviewer) is
// evaluated in its own name too, as the gate does before any review. What
// the gate then decides comes from the engine's own functions
// (engine.PolicyOutcome, engine.AddedOutcome), so the dry run cannot
// disagree with the gate.
func evaluate(ctx context.Context, ev *policies.Evaluator, reg *personas.Registry, in engine.PolicyInput, explicit string) (*evalRun, error) {
	name := explicit
	if name == "" {
		name = engine.DefaultPersona
	}
	var fired []policies.Fired
	explain := func(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
		d, f, err := ev.Explain(ctx, in)
		fired = f
		return d, err
	}
	d, routed, err := engine.EvaluateRouted(ctx, explain, reg, in, name, explicit == "")
	if err != nil {
		if routed.From != "" {
			return nil, fmt.Errorf("evaluating the policy with persona %q (routed from %q): %w", routed.Name, routed.From, err)
		}
		return nil, fmt.Errorf("evaluating the policy with persona %q: %w", routed.Name, err)
	}
	run := &evalRun{
		personaName: routed.Name, persona: routed.Persona, routedFrom: routed.From,
		decision: d, fired: fired, revision: ev.Revision(),
	}
	run.settled, run.done = engine.PolicyOutcome(in.Proposal, d, routed)
	if run.done || explicit != "" {
		return run, nil
	}
	// The gate checks the added reviewers in order and stops at the first
	// that cannot review.
	seen := map[string]bool{routed.Name: true}
	for _, also := range d.Review.Also {
		if also == "" || seen[also] {
			continue
		}
		seen[also] = true
		var (
			ad      engine.PolicyDecision
			aRouted = engine.Routed{Name: also}
			aErr    error
			loaded  bool
			settled engine.Settled
			decided bool
		)
		if _, loaded = reg.Persona(also); loaded {
			ad, aRouted, aErr = engine.EvaluateRouted(ctx, explain, reg, in, also, false)
			loaded = aRouted.Persona != nil
		}
		if settled, decided = engine.AddedOutcome(also, loaded, d, ad, aErr); !decided {
			continue
		}
		run.settled, run.done = settled, true
		switch {
		case !loaded:
			run.missing = append(run.missing, also)
		case len(ad.Denies) > 0:
			run.addedFrom = routed.Name
			run.personaName, run.persona, run.decision, run.fired = also, aRouted.Persona, ad, fired
		}
		return run, nil
	}
	return run, nil
}

// outcome is what the gate decides before any review, for the JSON
// document: rejected, approved, blocked or error, or review when a
// reviewer decides.
func (r *evalRun) outcome() string {
	if r.done {
		return string(r.settled.Outcome)
	}
	return "review"
}

// reviewer is the persona that would review.
func (r *evalRun) reviewer() string {
	if r.decision.Review.Persona != "" {
		return r.decision.Review.Persona
	}
	return r.personaName
}

// outcomeText is the outcome in words.
func (r *evalRun) outcomeText() string {
	switch {
	case !r.done:
	case r.settled.Outcome == engine.OutcomeRejected || r.settled.Outcome == engine.OutcomeApproved:
		return fmt.Sprintf("%s at %s", r.settled.Outcome, r.settled.Stage)
	default:
		return fmt.Sprintf("%s at %s: %s", r.settled.Outcome, r.settled.Stage, r.settled.Reason)
	}
	return fmt.Sprintf("needs review by %s (quorum %d)", r.reviewer(), r.decision.Review.Quorum)
}

// notes are what the gate would do beyond the policy's decision: block a
// review no loaded persona or no single reviewer can take.
func (r *evalRun) notes() []string {
	var notes []string
	if r.routedFrom != "" && r.addedFrom == "" {
		notes = append(notes, fmt.Sprintf("the policy routed the review from persona %s to %s; shown is the second evaluation", r.routedFrom, r.personaName))
	}
	if r.addedFrom != "" {
		notes = append(notes, fmt.Sprintf("the proposal asks persona %s to review beside %s, and the policy refuses it; shown is the evaluation in its name", r.personaName, r.addedFrom))
	}
	for _, name := range r.missing {
		notes = append(notes, fmt.Sprintf("the proposal asks persona %s to review as well, and no persona named %q is loaded (--personas DIR?): the gate would block this proposal", name, name))
	}
	if r.persona == nil && r.addedFrom == "" && r.outcome() == string(engine.OutcomeBlocked) {
		notes = append(notes, fmt.Sprintf("no persona named %q is loaded (--personas DIR?): the gate would block this proposal", r.personaName))
	}
	if r.outcome() != "review" {
		return notes
	}
	if r.reviewer() != r.personaName {
		notes = append(notes, fmt.Sprintf("the policy routes the review to %s but saw persona %s, given by --persona", r.reviewer(), r.personaName))
	}
	if q := r.decision.Review.Quorum; q > 1 {
		notes = append(notes, fmt.Sprintf("a quorum of %d: %d distinct personas must approve (this one, then those in review.also, then those in review.personas, then the other loaded personas by name); fewer eligible ones block the proposal", q, q))
	}
	return notes
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// writeEvalText prints the decision for people.
func writeEvalText(w io.Writer, r *evalRun) error {
	d := r.decision
	fmt.Fprintln(w, r.outcomeText())
	for _, deny := range d.Denies {
		fmt.Fprintf(w, "  deny %s: %s\n", deny.Rule, deny.Message)
	}
	for _, n := range r.notes() {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	persona := r.personaName
	if r.persona == nil {
		persona += " (not loaded: the policy saw null)"
	}
	fmt.Fprintf(tw, "persona:\t%s\n", persona)
	if len(d.Review.Also) > 0 {
		fmt.Fprintf(tw, "also reviewing:\t%s (added by the proposal)\n", strings.Join(d.Review.Also, ", "))
	}
	why := d.Review.Why
	if why == "" {
		why = "(no reason given)"
	}
	fmt.Fprintf(tw, "review:\t%s\n", why)
	fmt.Fprintf(tw, "reviewer tools:\t%s\n", listOrNone(d.ReviewerTools))
	fmt.Fprintf(tw, "denied tools:\t%s\n", listOrNone(d.DeniedTools))
	sop := "none"
	if d.SOP != nil {
		sop = d.SOP.ID
		if d.SOP.Title != "" {
			sop += " (" + d.SOP.Title + ")"
		}
	}
	fmt.Fprintf(tw, "sop:\t%s\n", sop)
	if d.Skipped {
		fmt.Fprintf(tw, "skipped:\t%s\n", "review waived by configuration")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "rules that fired:")
	for _, f := range r.fired {
		mark := ""
		if f.Default {
			mark = "  (default)"
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", f.Location, f.Rule, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "policy revision %s, evaluated in %d µs\n", r.revision, d.Eval.Microseconds())
	return err
}

// evalDecisionJSON is data.gated.decision as `policy eval --format json`
// prints it.
type evalDecisionJSON struct {
	Deny          []engine.Deny `json:"deny"`
	Review        engine.Route  `json:"review"`
	ReviewerTools []string      `json:"reviewer_tools"`
	DeniedTools   []string      `json:"denied_tools"`
	SOP           *engine.SOP   `json:"sop"`
	Skipped       bool          `json:"skipped"`
}

// evalDoc is the output of `policy eval --format json`.
type evalDoc struct {
	Outcome    string           `json:"outcome"`
	Stage      string           `json:"stage,omitempty"`
	Reason     string           `json:"reason,omitempty"`
	Persona    string           `json:"persona"`
	Loaded     bool             `json:"persona_loaded"`
	RoutedFrom string           `json:"routed_from,omitempty"`
	Decision   evalDecisionJSON `json:"decision"`
	Fired      []policies.Fired `json:"fired"`
	Notes      []string         `json:"notes,omitempty"`
	Revision   string           `json:"revision"`
	EvalUS     int64            `json:"eval_us"`
}

func evalDocument(r *evalRun) evalDoc {
	d := r.decision
	doc := evalDoc{
		Outcome: r.outcome(), Persona: r.personaName, Loaded: r.persona != nil, RoutedFrom: r.routedFrom,
		Decision: evalDecisionJSON{Deny: d.Denies, Review: d.Review, ReviewerTools: d.ReviewerTools,
			DeniedTools: d.DeniedTools, SOP: d.SOP, Skipped: d.Skipped},
		Fired: r.fired, Notes: r.notes(), Revision: r.revision, EvalUS: d.Eval.Microseconds(),
	}
	if r.done {
		doc.Stage, doc.Reason = string(r.settled.Stage), r.settled.Reason
	}
	if doc.Decision.Deny == nil {
		doc.Decision.Deny = []engine.Deny{}
	}
	if doc.Decision.ReviewerTools == nil {
		doc.Decision.ReviewerTools = []string{}
	}
	if doc.Decision.DeniedTools == nil {
		doc.Decision.DeniedTools = []string{}
	}
	if doc.Fired == nil {
		doc.Fired = []policies.Fired{}
	}
	return doc
}
