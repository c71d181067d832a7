package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// ProblemCount is how many problems verify found, those of stored
// verdicts it did not list included.
func (rep *Report) ProblemCount() int {
	n := len(rep.Problems)
	if rep.Verdicts != nil {
		n += int(rep.Verdicts.Unlisted)
	}
	return n
}

// WriteText prints the report as gated audit verify does: a summary, the
// stored verdicts' check, each problem and note, the heads, and the count.
func (rep *Report) WriteText(w io.Writer) {
	macs := "MACs not checked (no --audit-key-file: forged records that follow the format go unnoticed)"
	if rep.MACsChecked {
		macs = "MACs checked with key " + strings.Join(rep.KeyIDs, ", ")
	}
	fmt.Fprintf(w, "%d messages (seq %d-%d), %d records, %d tenants; %s\n",
		rep.Messages, rep.FirstSeq, rep.LastSeq, rep.Records, len(rep.Heads), macs)
	if c := rep.Verdicts; c != nil {
		fmt.Fprintf(w, "%d stored verdicts checked against the stream: %d name their verdict.decided record, %d expired, %d problem(s)\n",
			c.Verdicts, c.Matched, c.Expired, c.Problems)
	} else {
		// Skipped, or there is no bucket: a note then says so.
		fmt.Fprintln(w, "stored verdicts not checked")
	}
	for _, p := range rep.Problems {
		tenant := p.Tenant
		if tenant == "" {
			tenant = "-"
		}
		proposal := ""
		if p.ProposalID != "" {
			proposal = " proposal " + p.ProposalID
		}
		fmt.Fprintf(w, "PROBLEM seq %d tenant %s%s %s: %s\n", p.Seq, tenant, proposal, p.Kind, p.Detail)
	}
	if c := rep.Verdicts; c != nil && c.Unlisted > 0 {
		fmt.Fprintf(w, "%d more problem(s) of stored verdicts, not listed\n", c.Unlisted)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if len(rep.Heads) > 0 {
		fmt.Fprintln(w, "heads (keep them outside NATS and pass them to --anchors later: a chain cut short at its end leaves no gap):")
		for _, h := range rep.Heads {
			fmt.Fprintf(w, "  %s n=%d seq=%d hash=%s\n", h.Tenant, h.N, h.Seq, h.Hash)
		}
	}
	if rep.Clean() {
		fmt.Fprintln(w, "no problem found")
	} else {
		fmt.Fprintf(w, "%d problem(s) found\n", rep.ProblemCount())
	}
}

// WriteJSONLines prints one JSON object a line: a summary, each problem,
// each note, each head. The head lines serve as --anchors.
func (rep *Report) WriteJSONLines(w io.Writer) {
	enc := json.NewEncoder(w)
	_ = enc.Encode(struct {
		Type        string        `json:"type"`
		Messages    uint64        `json:"messages"`
		Records     uint64        `json:"records"`
		FirstSeq    uint64        `json:"first_seq"`
		LastSeq     uint64        `json:"last_seq"`
		MACsChecked bool          `json:"macs_checked"`
		KeyIDs      []string      `json:"key_ids,omitempty"`
		Problems    int           `json:"problems"`
		Verdicts    *VerdictCheck `json:"verdicts,omitempty"`
	}{"summary", rep.Messages, rep.Records, rep.FirstSeq, rep.LastSeq, rep.MACsChecked, rep.KeyIDs, rep.ProblemCount(), rep.Verdicts})
	for _, p := range rep.Problems {
		_ = enc.Encode(struct {
			Type string `json:"type"`
			Problem
		}{"problem", p})
	}
	for _, n := range rep.Notes {
		_ = enc.Encode(map[string]string{"type": "note", "note": n})
	}
	for _, h := range rep.Heads {
		_ = enc.Encode(struct {
			Type string `json:"type"`
			Head
		}{"head", h})
	}
}

// WriteReviewers writes the track records as a table or (format "json")
// a JSON array, as gated report reviewers prints them.
func WriteReviewers(w io.Writer, rows []ReviewerStats, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tVERSION\tPERSONA\tMODEL\tREVIEWS\tAPPROVED\tREJECTED\tSUCCEEDED\tFAILED\tFAILED_RATE\tOVERRIDES\tP50_MS\tP99_MS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n",
			orDash(r.Plugin), orDash(r.PluginVersion), orDash(r.Persona), orDash(r.Model), r.Reviews, r.Approvals, r.Rejections,
			r.ApprovedSucceeded, r.ApprovedFailed, number(r.ApprovedThenFailedRate, 3), r.OperatorOverrides,
			number(r.LatencyP50MS, 1), number(r.LatencyP99MS, 1))
	}
	return tw.Flush()
}

func number(f *float64, prec int) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f, 'f', prec, 64)
}
