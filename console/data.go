package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

// Bounds of what one answer reads and returns.
const (
	// defaultLimit and maxLimit bound the verdicts of GET /api/verdicts.
	defaultLimit = 100
	maxLimit     = 1000
	// maxScan bounds the bucket entries one listing reads: past it the
	// answer says it is truncated.
	maxScan = 20000
	// maxProposalRecords bounds the audit records of one proposal's page.
	maxProposalRecords = 500
)

// filter selects verdicts: empty fields select all.
type filter struct {
	tenant  string
	outcome gated.Outcome
	action  string
}

func (f filter) match(v *gated.Verdict) bool {
	return (f.tenant == "" || v.Tenant == f.tenant) &&
		(f.outcome == "" || v.Outcome == f.outcome) &&
		(f.action == "" || v.Action == f.action)
}

var outcomes = []gated.Outcome{
	gated.OutcomeApproved, gated.OutcomeRejected, gated.OutcomeBlocked,
	gated.OutcomeError, gated.OutcomeTimeout, gated.OutcomeInvalid,
}

// readFilter reads the query's tenant, outcome and action, answering 400
// (or 403 for a tenant out of scope) and returning false when one is bad.
func (s *Server) readFilter(w http.ResponseWriter, r *http.Request, ses session) (filter, bool) {
	q := r.URL.Query()
	f := filter{tenant: q.Get("tenant"), outcome: gated.Outcome(q.Get("outcome")), action: q.Get("action")}
	if f.tenant != "" && !s.scoped(w, r, ses, f.tenant) {
		return f, false
	}
	if f.outcome != "" && !slices.Contains(outcomes, f.outcome) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("outcome %q: want one of approved, rejected, blocked, error, timeout, invalid", clip(string(f.outcome))))
		return f, false
	}
	if f.action != "" && !gated.ValidAction(f.action) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("action %q must match [A-Za-z0-9_-]{1,128}", clip(f.action)))
		return f, false
	}
	return f, true
}

// keyFilters are the bucket key filters of the verdicts ses may see,
// narrowed to tenant when it is set.
func keyFilters(ses session, tenant string) []string {
	switch {
	case tenant != "":
		return []string{tenant + ".*"}
	case len(ses.op.Tenants) == 0:
		return []string{"*.*"}
	}
	out := make([]string, len(ses.op.Tenants))
	for i, t := range ses.op.Tenants {
		out[i] = t + ".*"
	}
	return out
}

// decodeEntry reads a bucket entry as the verdict its key names. It
// returns nil for what is not a verdict of a two-token key, and for a
// verdict that is not the key's (the store refuses those too).
func decodeEntry(e jetstream.KeyValueEntry) (*gated.Verdict, json.RawMessage) {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return nil, nil
	}
	tenant, id, ok := strings.Cut(e.Key(), ".")
	if !ok || strings.Contains(id, ".") {
		return nil, nil
	}
	var v gated.Verdict
	if json.Unmarshal(e.Value(), &v) != nil || v.Tenant != tenant || v.ProposalID != id {
		return nil, nil
	}
	return &v, e.Value()
}

// scanVerdicts reads the verdicts under keys as the bucket holds them now,
// calling fn with each. It reads at most maxScan entries and reports
// whether it stopped there.
func (s *Server) scanVerdicts(ctx context.Context, keys []string, fn func(v *gated.Verdict, raw json.RawMessage)) (truncated bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wt, err := s.cfg.Verdicts.WatchFiltered(ctx, keys, jetstream.IgnoreDeletes())
	if err != nil {
		return false, fmt.Errorf("reading the verdict bucket: %w", err)
	}
	defer func() { _ = wt.Stop() }()
	n := 0
	for {
		select {
		case e, ok := <-wt.Updates():
			if !ok || e == nil {
				// nil marks the end of the values stored when the watch
				// began.
				return false, nil
			}
			if n++; n > maxScan {
				return true, nil
			}
			if v, raw := decodeEntry(e); v != nil {
				fn(v, raw)
			}
		case <-ctx.Done():
			return false, fmt.Errorf("reading the verdict bucket: %w", ctx.Err())
		}
	}
}

// Verdicts is the answer of GET /api/verdicts: the newest verdicts first.
type Verdicts struct {
	Verdicts []*gated.Verdict `json:"verdicts"`
	// Truncated is true when the bucket held more than one answer reads.
	Truncated bool `json:"truncated,omitempty"`
}

func (s *Server) handleVerdicts(w http.ResponseWriter, r *http.Request, ses session) {
	f, ok := s.readFilter(w, r, ses)
	if !ok {
		return
	}
	limit := defaultLimit
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a number from 1 to %d", clip(l), maxLimit))
			return
		}
		limit = n
	}
	out := Verdicts{Verdicts: []*gated.Verdict{}}
	truncated, err := s.scanVerdicts(r.Context(), keyFilters(ses, f.tenant), func(v *gated.Verdict, _ json.RawMessage) {
		if f.match(v) {
			out.Verdicts = append(out.Verdicts, v)
		}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	slices.SortStableFunc(out.Verdicts, func(a, b *gated.Verdict) int { return b.DecidedAt.Compare(a.DecidedAt) })
	if len(out.Verdicts) > limit {
		out.Verdicts = out.Verdicts[:limit]
	}
	out.Truncated = truncated
	writeJSON(w, http.StatusOK, out)
}

// handleFeed streams every verdict stored from now on that the session
// may see and the filter selects, as Server-Sent Events named "verdict"
// whose data is the verdict's JSON. The bucket's watch delivers each one
// as it is stored.
func (s *Server) handleFeed(w http.ResponseWriter, r *http.Request, ses session) {
	f, ok := s.readFilter(w, r, ses)
	if !ok {
		return
	}
	s.feeds.Add(1)
	defer s.feeds.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()
	wt, err := s.cfg.Verdicts.WatchFiltered(ctx, keyFilters(ses, f.tenant), jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "watching the verdict bucket: "+err.Error())
		return
	}
	defer func() { _ = wt.Stop() }()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// Every write has a deadline: a client that stops reading ends its
	// stream instead of holding the feed (and Close) forever.
	rc := http.NewResponseController(w)
	send := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(feedWriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(": watching\n\n") {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case e, ok := <-wt.Updates():
			if !ok {
				return
			}
			v, raw := decodeEntry(e)
			if v == nil || !f.match(v) {
				continue
			}
			if !send("event: verdict\ndata: %s\n\n", compact(raw)) {
				return
			}
		case <-tick.C:
			// Signed out or expired: the stream ends.
			if _, ok := s.session(r); !ok {
				send("event: expired\ndata: {}\n\n")
				return
			}
			if !send(": heartbeat\n\n") {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// compact puts a stored verdict on one line, as an event's data line
// must be.
func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return []byte("{}")
	}
	return b.Bytes()
}

// AuditRecord is one audit record of a proposal's page, with what the
// check of its tenant's chain found.
type AuditRecord struct {
	Seq    uint64          `json:"seq"`
	Event  string          `json:"event"`
	At     time.Time       `json:"at"`
	Stored time.Time       `json:"stored"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Verified is true when the record's hash, its link to the tenant's
	// record before it and (when MACsChecked) its MAC check out.
	Verified bool `json:"verified"`
	// Problems say what is wrong with it otherwise.
	Problems []audit.Problem `json:"problems,omitempty"`
}

// Proposal is the answer of GET /api/proposals/{tenant}/{id}.
type Proposal struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	// Verdict is the stored verdict, nil when none is stored (never
	// decided, under review, or past the verdict TTL).
	Verdict *gated.Verdict `json:"verdict"`
	// Proposal is the proposal as the policy received it, from the
	// policy.decided record; nil when no record holds it.
	Proposal json.RawMessage `json:"proposal,omitempty"`
	// Held says why the verdict waits for an operator, when it does.
	Held *Held `json:"held,omitempty"`
	// Audit is the proposal's records, oldest first.
	Audit []AuditRecord `json:"audit"`
	// MACsChecked is true when the console has the audit keys.
	MACsChecked bool `json:"macs_checked"`
	// ChainProblems counts the problems of the tenant's chain outside the
	// proposal's records.
	ChainProblems int `json:"chain_problems"`
}

func (s *Server) handleProposal(w http.ResponseWriter, r *http.Request, ses session) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	if !s.scoped(w, r, ses, tenant) {
		return
	}
	if !gated.ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("proposal id %q must match [A-Za-z0-9_-]{1,128}", clip(id)))
		return
	}
	out := Proposal{Tenant: tenant, ID: id, Audit: []AuditRecord{}, MACsChecked: len(s.cfg.AuditKeys) > 0}
	v, err := s.store.Get(r.Context(), tenant, id)
	switch {
	case errors.Is(err, gated.ErrNotFound):
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "reading the verdict: "+err.Error())
		return
	default:
		out.Verdict = v
		out.Held = held(v)
	}
	// The chain is checked from the tenant's first record, so that each of
	// the proposal's records is checked against the record it links to.
	check := audit.NewChecker(audit.VerifyOptions{Tenant: tenant, Keys: s.cfg.AuditKeys})
	err = audit.Read(r.Context(), s.cfg.JS, audit.Query{Tenant: tenant}, func(e audit.Entry) error {
		check.Add(e)
		if len(out.Audit) >= maxProposalRecords {
			return nil
		}
		if e.Record == nil {
			// A message that claims to hold the proposal's events but is
			// not a valid record: its events (a record's of version 3, or
			// the one of version 1) are shown, with what the check found.
			// Anything else names no proposal; the tenant's chain problems
			// count it.
			var claimed struct {
				gated.AuditEvent
				Events []gated.AuditEvent `json:"events"`
			}
			body, _ := audit.RecordJSON(e.Data)
			if json.Unmarshal(body, &claimed) != nil {
				return nil
			}
			for _, ev := range append(claimed.Events, claimed.AuditEvent) {
				if ev.ProposalID == id {
					out.Audit = append(out.Audit, AuditRecord{Seq: e.Seq, Event: ev.Event, At: ev.At, Stored: e.Stored, Data: ev.Data})
				}
			}
			return nil
		}
		if e.Record.ProposalID != id {
			return nil
		}
		for _, ev := range e.Record.Events() {
			out.addEvent(e.Seq, e.Stored, ev)
		}
		return nil
	})
	if err != nil && !errors.Is(err, audit.ErrNoStream) {
		writeError(w, http.StatusServiceUnavailable, "reading the audit stream: "+err.Error())
		return
	}
	rep := check.Report()
	bySeq := map[uint64][]audit.Problem{}
	for _, p := range rep.Problems {
		bySeq[p.Seq] = append(bySeq[p.Seq], p)
	}
	mine := 0
	for i := range out.Audit {
		a := &out.Audit[i]
		a.Problems = bySeq[a.Seq]
		a.Verified = len(a.Problems) == 0
		mine += len(a.Problems)
	}
	out.ChainProblems = len(rep.Problems) - mine
	writeJSON(w, http.StatusOK, out)
}

// addEvent adds one event of the proposal's record at seq to its page.
func (out *Proposal) addEvent(seq uint64, stored time.Time, ev gated.AuditEvent) {
	out.Audit = append(out.Audit, AuditRecord{Seq: seq, Event: ev.Event, At: ev.At, Stored: stored, Data: ev.Data})
	if ev.Event == gated.EventPolicyDecided && out.Proposal == nil {
		d, err := gated.DecodeAuditData[gated.PolicyDecidedData](ev)
		if err == nil && d.Input != nil && len(d.Input.Proposal) > 0 {
			out.Proposal = d.Input.Proposal
		}
	}
	if out.Held != nil && ev.Event == gated.EventOperatorAwaited {
		out.Held.fromAwaited(ev.Data)
	}
}
