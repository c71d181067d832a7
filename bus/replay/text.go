package replay

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gated/gated"
)

// WriteText writes the report for a person to read, as `gated policy
// replay` prints it. It returns w's error.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "candidate policy revision %s\n", rep.Revision)
	fmt.Fprintf(&b, "audit range: seq %d-%d, %d records\n", rep.FirstSeq, rep.LastSeq, rep.Records)
	writeIntegrityText(&b, rep.Integrity)
	if !rep.Intact {
		fmt.Fprintf(&b, "RANGE NOT INTACT: %d problem(s); the replay below is incomplete\n", len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintf(&b, "  seq %d tenant %s: %s: %s\n", p.Seq, p.Tenant, p.Kind, p.Detail)
		}
	}
	fmt.Fprintf(&b, "verdicts: %d, replayed: %d, flipped: %d, not decided by the policy: %d, input not rebuildable: %d\n",
		rep.Verdicts, rep.Replayed, rep.Flips, sumCounts(rep.NotPolicy), rep.Unrebuildable)
	fmt.Fprintf(&b, "reviews reused: %d proposal(s) both policies send to review keep their recorded result, the reviewers unchanged; review stale: %d (reviewer changed, result kept)\n",
		rep.ReviewReused, rep.ReviewStale)
	writeReviewChangesText(&b, rep)
	writeCounts(&b, "outcomes (old -> new)", rep.Outcomes)
	writeCounts(&b, "differences by kind (as shadow mode counts them)", rep.Differences)
	writeCounts(&b, "flips by rule", rep.FlipsByRule)
	writeCounts(&b, "flips by tenant", rep.FlipsByTenant)
	writeCounts(&b, "flips by action", rep.FlipsByAction)
	writeCounts(&b, "not decided by the policy, by stage", rep.NotPolicy)
	if len(rep.Shown) > 0 {
		fmt.Fprintf(&b, "first %d flip(s):\n", len(rep.Shown))
		for _, f := range rep.Shown {
			fmt.Fprintf(&b, "  %s.%s (%s, seq %d)\n    old: %s at %s: %s\n    new: %s at %s: %s\n", f.Tenant, f.ID, f.Action, f.Seq,
				f.Old.Outcome, f.Old.Stage, f.Old.Reason, f.New.Outcome, f.New.Stage, f.New.Reason)
		}
	}
	if rep.Unrebuildable > 0 {
		fmt.Fprintf(&b, "input not rebuildable (%d, first %d named):\n", rep.Unrebuildable, len(rep.UnrebuildableNamed))
		for _, m := range rep.UnrebuildableNamed {
			fmt.Fprintf(&b, "  %s.%s (seq %d): %s\n", m.Tenant, m.ID, m.Seq, m.Why)
		}
	}
	if rep.ReviewStale > 0 {
		fmt.Fprintf(&b, "review stale (%d, first %d named):\n", rep.ReviewStale, len(rep.ReviewStaleNamed))
		for _, m := range rep.ReviewStaleNamed {
			fmt.Fprintf(&b, "  %s.%s (seq %d): %s\n", m.Tenant, m.ID, m.Seq, m.Why)
		}
	}
	if rep.Rereview != nil {
		writeRereviewText(&b, rep.Rereview)
	}
	fmt.Fprintf(&b, "replayed %d in %.2fs (%.0f/s) on %d worker(s): read %d records in %.2fs (%.0f/s), decided in %.2fs (%.0f/s)\n",
		rep.Replayed, rep.Seconds, rep.Rate, rep.Workers, rep.Records, rep.ReadSeconds, rep.ReadRate, rep.DecideSeconds, rep.DecideRate)
	_, err := io.WriteString(w, b.String())
	return err
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// writeCounts prints a titled count table, largest first.
func writeCounts(b *strings.Builder, title string, m map[string]int) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	fmt.Fprintf(b, "%s:\n", title)
	for _, k := range keys {
		fmt.Fprintf(b, "  %8d  %s\n", m[k], k)
	}
}

// writeReviewChangesText prints the proposals whose reviewers change.
func writeReviewChangesText(b *strings.Builder, rep *Report) {
	fmt.Fprintf(b, "review changed: %d proposal(s) both policies send to review, to other reviewers (persona, quorum or also): not a flip, but their recorded review does not stand for the candidate\n", rep.ReviewChanged)
	for _, c := range rep.ReviewChanges {
		fmt.Fprintf(b, "  %s.%s (%s, seq %d): %s -> %s\n", c.Tenant, c.ID, c.Action, c.Seq, routeText(c.Old), routeText(c.New))
	}
}

// routeText names a routing's reviewers.
func routeText(r *gated.Route) string {
	if r == nil {
		return "-"
	}
	s := fmt.Sprintf("%s quorum %d", r.Persona, r.Quorum)
	if len(r.Also) > 0 {
		s += " also " + strings.Join(r.Also, ",")
	}
	return s
}

// writeIntegrityText prints what the range check covered.
func writeIntegrityText(b *strings.Builder, in Integrity) {
	if in.MACsChecked {
		fmt.Fprintf(b, "MACs checked with key %s\n", strings.Join(in.KeyIDs, ", "))
	} else {
		fmt.Fprintln(b, "MACs not checked (no --audit-key-file: forged records that follow the format go unnoticed)")
	}
	ac := in.Anchors
	for _, how := range in.EndChecked {
		switch how {
		case endByStreamSeq:
			fmt.Fprintln(b, "end of the range checked against the stream's last sequence (records deleted from the end of the stream)")
		case endByVerdict:
			v := in.LatestVerdict
			fmt.Fprintf(b, "end of the stream checked against the latest stored verdict (%s.%s, audit_seq %d)\n", v.Tenant, v.ID, v.AuditSeq)
		case endByAnchors:
			fmt.Fprintf(b, "end of the range checked against %d anchor(s): %d matched, %d missing\n", ac.Matched+ac.Missing, ac.Matched, ac.Missing)
		}
	}
	if len(in.EndChecked) == 0 {
		fmt.Fprintln(b, "end of the range not checked: records cut from the end of one tenant's chain leave no trace in it, and the verdict store holds no verdict of it to check against; give --anchors (the heads of an earlier audit verify --json)")
	}
	if ac.Before > 0 {
		fmt.Fprintf(b, "%d anchor(s) before the range: not checked by it\n", ac.Before)
	}
}

// writeRereviewText prints the re-review section of a replay report,
// with the first Config.Show disagreements.
func writeRereviewText(b *strings.Builder, rr *RereviewReport) {
	fmt.Fprintf(b, "rereview of persona %s (revision %s) on plugin %s %s", rr.Persona, rr.PersonaRevision, rr.Plugin, rr.PluginVersion)
	if rr.Model != "" {
		fmt.Fprintf(b, ", model %s", rr.Model)
	}
	fmt.Fprintf(b, ":\n  reviewed again: %d, agreed: %d, disagreed: %d, flip rate %.4f\n", rr.Reviewed, rr.Agreed, rr.Disagreed, rr.FlipRate)
	if rr.Kappa != nil {
		fmt.Fprintf(b, "  Cohen's kappa: %.4f (%s)\n", *rr.Kappa, rr.KappaExact)
	} else {
		fmt.Fprintf(b, "  Cohen's kappa: undefined: %s\n", rr.KappaUndefined)
	}
	if rr.Unrebuildable > 0 {
		fmt.Fprintf(b, "  review requests not rebuildable: %d\n", rr.Unrebuildable)
		for _, m := range rr.UnrebuildableNamed {
			fmt.Fprintf(b, "    %s.%s (seq %d): %s\n", m.Tenant, m.ID, m.Seq, m.Why)
		}
	}
	writeCounts(b, "rereview (recorded -> candidate)", rr.Table)
	n := min(rr.show, len(rr.Disagreements))
	if n > 0 {
		fmt.Fprintf(b, "first %d disagreement(s):\n", n)
		for _, d := range rr.Disagreements[:n] {
			fmt.Fprintf(b, "  %s.%s (%s, seq %d)\n    recorded: %s: %s\n    candidate: %s: %s\n", d.Tenant, d.ID, d.Action, d.Seq,
				d.Recorded, d.RecordedWhy, d.Candidate, d.CandidateWhy)
		}
	}
	fmt.Fprintf(b, "  reviewed in %.2fs (%.1f/s)\n", rr.Seconds, rr.Rate)
}
