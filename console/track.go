package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/budget"
	"github.com/gated/gated/engine"
)

// Bounds of the reviewers page's window.
const (
	// defaultWindow is the window of GET /api/reviewers without since.
	defaultWindow = "24h"
	// minWindow and maxWindow bound since: longer ranges are for
	// `gated report reviewers --since`, which does not hold a web request.
	minWindow = time.Minute
	maxWindow = 7 * 24 * time.Hour
)

// ParseWindow reads the since parameter of GET /api/reviewers: a Go
// duration such as 90m or 24h, or a whole number of days such as 7d,
// from 1m to 7d. Errors wrap ErrBadRequest and say what is accepted.
func ParseWindow(s string) (time.Duration, error) {
	bad := fmt.Errorf("%w: since %q: want a duration from 1m to 7d, such as 1h, 24h or 7d", ErrBadRequest, clip(s))
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > int(maxWindow/(24*time.Hour)) || strings.HasPrefix(days, "+") {
			return 0, bad
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, bad
		}
	}
	if d < minWindow || d > maxWindow {
		return 0, bad
	}
	return d, nil
}

// tenantsOf are the tenants a request reads: the query's tenant when it
// names one (answering 400 or 403, audited, and false when it is not one
// the session may see), else the session's tenants (nil: every tenant).
func (s *Server) tenantsOf(w http.ResponseWriter, r *http.Request, ses session) ([]string, bool) {
	if tenant := r.URL.Query().Get("tenant"); tenant != "" {
		if !s.scoped(w, r, ses, tenant) {
			return nil, false
		}
		return []string{tenant}, true
	}
	return slices.Clone(ses.op.Tenants), true
}

// Reviewers is the answer of GET /api/reviewers: each reviewer's track
// record over the audit records of the window on the tenants the session
// may see, as `gated report reviewers --since` computes it.
type Reviewers struct {
	// Since is the window asked for; From its start.
	Since string    `json:"since"`
	From  time.Time `json:"from"`
	// Tenants are the tenants summed; empty for every tenant.
	Tenants   []string              `json:"tenants"`
	Reviewers []audit.ReviewerStats `json:"reviewers"`
}

func (s *Server) handleReviewers(w http.ResponseWriter, r *http.Request, ses session) {
	since := r.URL.Query().Get("since")
	if since == "" {
		since = defaultWindow
	}
	window, err := ParseWindow(since)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tenants, ok := s.tenantsOf(w, r, ses)
	if !ok {
		return
	}
	from := s.cfg.Now().Add(-window).UTC()
	rows, err := audit.ReadTrackRecord(r.Context(), s.cfg.JS, tenants, from)
	switch {
	case errors.Is(err, audit.ErrNoStream):
		rows = []audit.ReviewerStats{}
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "reading the audit stream: "+err.Error())
		return
	}
	if tenants == nil {
		tenants = []string{}
	}
	writeJSON(w, http.StatusOK, Reviewers{Since: since, From: from, Tenants: tenants, Reviewers: rows})
}

// Budgets is the answer of GET /api/budgets: for each tenant the session
// may see, its limits, counters and when each resets, its agents', and
// the budget refusals of the last ten minutes by limit.
type Budgets struct {
	// File is the budgets file in force, "" for the built-in limits.
	File    string         `json:"file"`
	Tenants []TenantBudget `json:"tenants"`
}

// TenantBudget is one tenant's part of Budgets.
type TenantBudget struct {
	budget.TenantUsage
	// Refused counts the budget.refused records of the last ten minutes
	// by scope, agent and limit.
	Refused []RefusedByLimit `json:"refused_10m"`
}

// RefusedByLimit counts the proposals one limit of one scope refused.
type RefusedByLimit struct {
	Scope string    `json:"scope"`
	Agent string    `json:"agent,omitempty"`
	Limit string    `json:"limit"`
	Count int       `json:"count"`
	Last  time.Time `json:"last"`
}

func (s *Server) handleBudgets(w http.ResponseWriter, r *http.Request, ses session) {
	if s.cfg.Budgets == nil {
		writeError(w, http.StatusNotFound, "this console has no budget counters")
		return
	}
	tenants, ok := s.tenantsOf(w, r, ses)
	if !ok {
		return
	}
	if tenants == nil {
		var err error
		if tenants, err = s.cfg.Budgets.Tenants(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	now := s.cfg.Now()
	out := Budgets{File: s.cfg.Budgets.Config().Path, Tenants: []TenantBudget{}}
	for _, tenant := range tenants {
		u, err := s.cfg.Budgets.Usage(r.Context(), tenant, now)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		refused, err := s.refusedByLimit(r, tenant, now)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "reading the audit stream: "+err.Error())
			return
		}
		out.Tenants = append(out.Tenants, TenantBudget{TenantUsage: *u, Refused: refused})
	}
	writeJSON(w, http.StatusOK, out)
}

// refusedByLimit sums the budget.refused events of tenant recorded in the
// last engine.RefusalWindow. A refusal is recorded with the verdict it
// ends in, in one record named after its last event, so every record of
// the window is read, not the subject of budget.refused alone.
func (s *Server) refusedByLimit(r *http.Request, tenant string, now time.Time) ([]RefusedByLimit, error) {
	out := []RefusedByLimit{}
	q := audit.Query{Tenant: tenant, Since: now.Add(-engine.RefusalWindow)}
	err := audit.Read(r.Context(), s.cfg.JS, q, func(e audit.Entry) error {
		if e.Record == nil {
			return nil
		}
		for _, ev := range e.Record.Events() {
			if ev.Event != gated.EventBudgetRefused {
				continue
			}
			var b gated.BudgetRefusal
			if json.Unmarshal(ev.Data, &b) != nil || b.Limit == "" {
				continue
			}
			out = addRefusal(out, b, ev.At)
		}
		return nil
	})
	if err != nil && !errors.Is(err, audit.ErrNoStream) {
		return nil, err
	}
	slices.SortFunc(out, func(a, b RefusedByLimit) int {
		return strings.Compare(a.Scope+"\x00"+a.Agent+"\x00"+a.Limit, b.Scope+"\x00"+b.Agent+"\x00"+b.Limit)
	})
	return out, nil
}

// addRefusal counts one refusal b at at in out, by scope, agent and limit.
func addRefusal(out []RefusedByLimit, b gated.BudgetRefusal, at time.Time) []RefusedByLimit {
	for i := range out {
		if o := &out[i]; o.Scope == b.Scope && o.Agent == b.Agent && o.Limit == b.Limit {
			o.Count++
			if at.After(o.Last) {
				o.Last = at
			}
			return out
		}
	}
	return append(out, RefusedByLimit{Scope: b.Scope, Agent: b.Agent, Limit: b.Limit, Count: 1, Last: at})
}
