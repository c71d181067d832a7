package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/engine/wire"
)

// Held says why a verdict waits for an operator. Kinds: "run", a run
// review's manual criteria (Criteria), decided with `gated operator
// decide`; "action", an action the policy routed to a human (Reason,
// Rule, Deadline from its operator.awaited record).
type Held struct {
	Kind     string     `json:"kind"`
	Criteria []string   `json:"criteria,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Rule     string     `json:"rule,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// held tells whether v waits for an operator. A run verdict names the
// awaited criteria in run.awaiting_operator; a held action its deadline,
// reason and rule in awaiting_operator.
func held(v *gated.Verdict) *Held {
	if v.Outcome != gated.OutcomeBlocked {
		return nil
	}
	if v.Run != nil && len(v.Run.AwaitingOperator) > 0 {
		return &Held{Kind: "run", Criteria: v.Run.AwaitingOperator}
	}
	if a := v.AwaitingOperator; a != nil {
		h := &Held{Kind: "action", Reason: a.Reason, Rule: a.Rule}
		if !a.Deadline.IsZero() {
			d := a.Deadline
			h.Deadline = &d
		}
		return h
	}
	return nil
}

// fromAwaited fills in the deadline, reason and rule of an
// operator.awaited record's data.
func (h *Held) fromAwaited(data []byte) {
	var d gated.OperatorAwaitedData
	if json.Unmarshal(data, &d) != nil {
		return
	}
	if !d.Deadline.IsZero() {
		h.Deadline = &d.Deadline
	}
	if d.Reason != "" {
		h.Reason = d.Reason
	}
	h.Rule = d.Rule
}

// QueueItem is one verdict held for an operator.
type QueueItem struct {
	Verdict *gated.Verdict `json:"verdict"`
	Held    *Held          `json:"held"`
}

// Queue is the answer of GET /api/queue: the held verdicts the session
// may decide, oldest first.
type Queue struct {
	Items     []QueueItem `json:"items"`
	Truncated bool        `json:"truncated,omitempty"`
}

func (s *Server) handleQueue(w http.ResponseWriter, r *http.Request, ses session) {
	out := Queue{Items: []QueueItem{}}
	truncated, err := s.scanVerdicts(r.Context(), keyFilters(ses, ""), func(v *gated.Verdict, raw json.RawMessage) {
		if h := held(v); h != nil {
			out.Items = append(out.Items, QueueItem{Verdict: v, Held: h})
		}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if err := s.deadlines(r.Context(), out.Items); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	slices.SortStableFunc(out.Items, func(a, b QueueItem) int { return a.Verdict.DecidedAt.Compare(b.Verdict.DecidedAt) })
	out.Truncated = truncated
	writeJSON(w, http.StatusOK, out)
}

// deadlines fills in the deadlines of held actions from their
// operator.awaited records, which only held actions have.
func (s *Server) deadlines(ctx context.Context, items []QueueItem) error {
	want := map[string]*Held{}
	for _, it := range items {
		if it.Held.Kind == "action" {
			want[it.Verdict.Tenant+"."+it.Verdict.ProposalID] = it.Held
		}
	}
	if len(want) == 0 {
		return nil
	}
	stream, err := s.cfg.JS.Stream(ctx, audit.Stream)
	if err != nil {
		return fmt.Errorf("opening the audit stream: %w", err)
	}
	// An operator.awaited event is a record of its own (version 1), or
	// shares the record of the held verdict (version 2).
	var subjects []string
	for _, event := range []string{gated.EventOperatorAwaited, gated.EventVerdict} {
		subject := wire.AuditSubjectPrefix + "*." + event
		if _, err := stream.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading the audit stream: %w", err)
		}
		subjects = append(subjects, subject)
	}
	if len(subjects) == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: subjects})
	if err != nil {
		return fmt.Errorf("reading the audit stream: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("reading the audit stream: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("reading the audit stream: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("reading the audit stream: %w", err)
		}
		if rec, err := audit.DecodeRecord(m.Subject(), m.Headers(), m.Data()); err == nil {
			if h := want[rec.Tenant+"."+rec.ProposalID]; h != nil {
				if ev, ok := rec.Find(gated.EventOperatorAwaited); ok {
					h.fromAwaited(ev.Data)
				}
			}
		}
		if md.NumPending == 0 {
			return nil
		}
	}
}
