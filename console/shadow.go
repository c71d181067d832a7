package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gated/gated/bus/audit"
)

// maxShadowHours bounds the range GET /api/shadow sums up.
const maxShadowHours = 7 * 24

// Shadow is the answer of GET /api/shadow: how the shadow policy
// (serve --shadow-policies) agreed with the live one over the last Hours,
// on the tenants the session may see, from the audit stream.
type Shadow struct {
	Hours   int                  `json:"hours"`
	Summary *audit.ShadowSummary `json:"summary"`
}

func (s *Server) handleShadow(w http.ResponseWriter, r *http.Request, ses session) {
	hours := 1
	if h := r.URL.Query().Get("hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > maxShadowHours {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("hours %q: want a number from 1 to %d", clip(h), maxShadowHours))
			return
		}
		hours = n
	}
	since := s.cfg.Now().Add(-time.Duration(hours) * time.Hour)
	sum := audit.NewShadowSummary(20)
	tenants := ses.op.Tenants
	if len(tenants) == 0 {
		tenants = []string{""} // every tenant
	}
	for _, tenant := range tenants {
		err := audit.Read(r.Context(), s.cfg.JS, audit.Query{Tenant: tenant, Since: since}, func(e audit.Entry) error {
			sum.Add(e)
			return nil
		})
		if err != nil && !errors.Is(err, audit.ErrNoStream) {
			writeError(w, http.StatusServiceUnavailable, "reading the audit stream: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, Shadow{Hours: hours, Summary: sum})
}
