package audit

import "fmt"

// RangeEnd is what a reader of a range knows of where the stream ends,
// for Checker.Finish: the chain alone cannot show records deleted from
// the end of the stream.
type RangeEnd struct {
	// From is the first stream sequence the range asked for; 0 when it
	// starts at a time, or at the stream's first record.
	From uint64
	// StreamLast is the stream's last sequence, taken before the read
	// began (the stream keeps counting it once the messages there are
	// deleted); 0 leaves the end of the stream unchecked.
	StreamLast uint64
}

// AnchorCheck says what became of the anchors a Checker was given.
type AnchorCheck struct {
	// Given is how many anchors there were.
	Given int `json:"given"`
	// Matched is how many anchored records the range holds: their hash
	// was compared (a different one is a problem of kind modified).
	Matched int `json:"matched"`
	// Before is how many anchor records older than the range: it cannot
	// check them, and they are not a problem.
	Before int `json:"before"`
	// Missing is how many anchored records should be in the range and
	// are not: each is a problem of kind removed (the chain was cut
	// short or rewritten).
	Missing int `json:"missing"`
}

// Finish ends the check of the range and reports what it found, as
// Report does, and besides: with every tenant's records in the range
// and end.StreamLast set, the stream sequences missing after the last
// message read (deleted from the end of the stream); and each anchor
// whose record should be in the range but is not. An anchor whose
// record is older than the range (its sequence before the range's
// first, or its n before its tenant's first record in the range) is
// counted in AnchorCheck.Before, not reported. Call it once.
func (c *Checker) Finish(end RangeEnd) (*Report, AnchorCheck) {
	v := c.v
	rep := &v.report
	first := end.From
	if rep.Messages > 0 {
		first = rep.FirstSeq
	}
	if c.seqs && end.StreamLast > 0 {
		next := end.From
		if rep.Messages > 0 {
			next = rep.LastSeq + 1
		}
		if next > 0 && end.StreamLast >= next {
			v.problem(next, "", ProblemRemoved, fmt.Sprintf("stream sequences %d-%d are missing at the end of the stream: deleted from it", next, end.StreamLast))
		}
	}
	var ac AnchorCheck
	for tenant, anchors := range v.anchors {
		ch := v.chains[tenant]
		for i, a := range anchors {
			ac.Given++
			if a.N == 0 { // found
				continue
			}
			switch {
			case a.Seq != 0 && first != 0 && a.Seq < first,
				ch != nil && ch.started && a.N < ch.first,
				a.Seq == 0 && first == 0 && (ch == nil || !ch.started):
				ac.Before++
				anchors[i].N = 0
			default:
				ac.Missing++
			}
		}
	}
	ac.Matched = v.anchored
	return v.finish(), ac
}
