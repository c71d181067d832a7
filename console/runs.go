package console

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"
)

// Runs is the answer of GET /api/runs: gated's record of each run the
// session may see (its rounds, continuations and escalations).
type Runs struct {
	Runs      []*gated.RunRecord `json:"runs"`
	Truncated bool               `json:"truncated,omitempty"`
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request, ses session) {
	tenant := r.URL.Query().Get("tenant")
	if tenant != "" && !s.scoped(w, r, ses, tenant) {
		return
	}
	var keys []string
	for _, k := range keyFilters(ses, tenant) {
		keys = append(keys, strings.TrimSuffix(k, "*")+"runs.*")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	wt, err := s.cfg.Verdicts.WatchFiltered(ctx, keys, jetstream.IgnoreDeletes())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "reading the verdict bucket: "+err.Error())
		return
	}
	defer func() { _ = wt.Stop() }()
	out := Runs{Runs: []*gated.RunRecord{}}
	for n := 0; ; n++ {
		var e jetstream.KeyValueEntry
		select {
		case e = <-wt.Updates():
		case <-ctx.Done():
			writeError(w, http.StatusServiceUnavailable, "reading the verdict bucket: "+ctx.Err().Error())
			return
		}
		if e == nil {
			break
		}
		if n >= maxScan {
			out.Truncated = true
			break
		}
		tenant, runID, _ := strings.Cut(e.Key(), ".runs.")
		var rec gated.RunRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Tenant != tenant || rec.RunID != runID {
			continue
		}
		out.Runs = append(out.Runs, &rec)
	}
	slices.SortStableFunc(out.Runs, func(a, b *gated.RunRecord) int { return lastRound(b).Compare(lastRound(a)) })
	writeJSON(w, http.StatusOK, out)
}

func lastRound(r *gated.RunRecord) time.Time {
	var t time.Time
	for _, rd := range r.Rounds {
		if rd.DecidedAt.After(t) {
			t = rd.DecidedAt
		}
	}
	return t
}
