package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// handleDecision forwards an operator decision signed in the browser to
// gated.operator.<tenant>.<proposal_id>, body and signature unchanged, so
// that gated verifies it exactly as a decision sent by `gated operator
// decide`. The console refuses first (403, audited) a decision for a
// tenant the signed-in operator may not decide for, or signed with a key
// other than the operator's own; gated's refusals come back with gated's
// code in the answer's code and the HTTP status it maps to.
func (s *Server) handleDecision(w http.ResponseWriter, r *http.Request, ses session) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxDecisionBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the request: "+err.Error())
		return
	}
	d, err := DecodeDecision(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	m := d.Message
	if !s.scoped(w, r, ses, m.Tenant) {
		return
	}
	if d.Key != ses.op.Key {
		s.refuse(w, r, m.Tenant, ses.op.ID, fmt.Sprintf("the decision is signed with key %s, not with signed-in operator %s's key", d.Key, ses.op.ID))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DecisionWait)
	defer cancel()
	hdr := nats.Header{}
	hdr.Set(wire.OperatorKeyHeader, d.Key)
	hdr.Set(wire.OperatorSigHeader, d.Sig)
	subject := wire.OperatorSubject(m.Tenant, m.ProposalID)
	reply, err := s.cfg.NC.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: d.Body, Header: hdr})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		writeError(w, http.StatusServiceUnavailable, "nothing answers "+subject+": is gated running with --operators?")
		return
	case err != nil:
		s.log.Warn("forwarding an operator decision", zap.String("subject", subject), zap.Error(err))
		writeError(w, http.StatusGatewayTimeout, "forwarding the decision: "+err.Error()+"; look at the proposal before sending it again")
		return
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		var c int
		if _, err := fmt.Sscanf(code, "%d", &c); err != nil || c < 400 || c > 599 {
			c = http.StatusBadGateway
		}
		writeJSON(w, c, apiError{Error: "gated refused the decision: " + reply.Header.Get(micro.ErrorHeader), Code: c})
		return
	}
	var v gated.Verdict
	if err := json.Unmarshal(reply.Data, &v); err != nil || v.Tenant != m.Tenant || v.ProposalID != m.ProposalID {
		writeError(w, http.StatusBadGateway, "gated's answer on "+subject+" is not the proposal's verdict")
		return
	}
	s.log.Info("operator decision forwarded", zap.String("operator", ses.op.ID), zap.String("key", m.Tenant+"."+m.ProposalID), zap.String("outcome", string(v.Outcome)))
	writeJSON(w, http.StatusOK, &v)
}
