package policies

// The reports of `gated policy test`: its text and its JSON document.

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/tester"
)

// parityJSON is the parity check in `policy test --format json`.
type parityJSON struct {
	Evaluator     PlanStatus     `json:"evaluator"`
	Compared      int            `json:"compared"`
	Skipped       int            `json:"skipped"`
	Disagreements []Disagreement `json:"disagreements"`
	Error         string         `json:"error,omitempty"`
}

func ParityDocument(r *ParityReport, err error) parityJSON {
	switch {
	case err != nil:
		return parityJSON{Disagreements: []Disagreement{}, Error: err.Error()}
	case r == nil: // no tests
		return parityJSON{Disagreements: []Disagreement{}}
	}
	return parityJSON{Evaluator: r.Evaluator, Compared: r.Compared, Skipped: r.Skipped, Disagreements: r.Disagreements}
}

// WriteParityText prints the parity check: one line when the evaluators
// agree, every disagreement when they do not.
func WriteParityText(w io.Writer, r *ParityReport, err error) error {
	var line string
	switch {
	case err == nil && r == nil:
		return nil // no tests, no inputs
	case err != nil:
		line = "parity: not checked: " + err.Error()
	case r.Evaluator.Evaluator != EvaluatorPlanned:
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

func Summarize(r *TestReport) testSummary {
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

// WriteTestText prints one line per test (failures only unless verbose),
// a summary line, and the coverage of every non-test file.
func WriteTestText(w io.Writer, r *TestReport, s testSummary, verbose bool, filter string) error {
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

func TestReportDocument(r *TestReport, s testSummary) testDoc {
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
