package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go/jetstream"
)

// Tail prints, as text or (asJSON) JSON lines, the records q selects:
// with no q.Since the last n (of q.Tenant, when set), then with follow
// every record stored after them until ctx ends.
func Tail(ctx context.Context, js jetstream.JetStream, w io.Writer, asJSON bool, q Query, n int, follow bool) error {
	out := newPrinter(w, asJSON)
	if q.Since.IsZero() {
		var err error
		if q.StartSeq, err = printLast(ctx, js, q.Tenant, n, out); err != nil {
			return err
		}
		if !follow {
			return nil
		}
	}
	q.Follow = follow
	return Read(ctx, js, q, out.entry)
}

// Search prints, as Tail does, the events of the records q selects that
// match f, up to limit (0: no limit). It returns how many messages on
// audit subjects were not valid records.
func Search(ctx context.Context, js jetstream.JetStream, w io.Writer, asJSON bool, q Query, f Filter, limit int) (int, error) {
	out := newPrinter(w, asJSON)
	var matched, invalid int
	err := Read(ctx, js, q, func(e Entry) error {
		if e.Record == nil {
			invalid++
			return nil
		}
		for i, ev := range e.Record.Events() {
			if !f.MatchEvent(ev) {
				continue
			}
			if err := out.event(e, i, ev); err != nil {
				return err
			}
			if matched++; limit > 0 && matched >= limit {
				return errEnough
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return invalid, err
	}
	return invalid, nil
}

// printer prints audit messages as text or JSON lines.
type printer struct {
	w    io.Writer
	json bool
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	return &printer{w: w, json: asJSON}
}

// dataKeys are the data members a text line shows, in this order.
var dataKeys = []string{"outcome", "stage", "action", "operator", "persona", "plugin", "tool", "revision", "error", "reason"}

// entry prints a message of the stream: each event of a record on a
// line of its own, with the record's sequence.
func (p *printer) entry(e Entry) error {
	if e.Record == nil {
		if p.json {
			line := line{Seq: e.Seq, Stored: e.Stored.UTC(), Subject: e.Subject, Invalid: e.Err.Error()}
			if body, ok := RecordJSON(e.Data); ok && utf8.Valid(body) {
				line.Data = string(body)
			} else {
				line.Raw = e.Data
			}
			return json.NewEncoder(p.w).Encode(line)
		}
		at := e.Stored.UTC().Format("2006-01-02T15:04:05.000Z")
		_, err := fmt.Fprintf(p.w, "%s #%d %s %s (%v)\n", at, e.Seq, orDash(e.Tenant()), e.Subject, e.Err)
		return err
	}
	for i, ev := range e.Record.Events() {
		if err := p.event(e, i, ev); err != nil {
			return err
		}
	}
	return nil
}

// line is a line of --json output: an event of the record at seq
// (the index-th, from 0), or a message that is not a record.
type line struct {
	Seq     uint64    `json:"seq"`
	Index   int       `json:"index,omitempty"`
	Stored  time.Time `json:"stored"`
	Subject string    `json:"subject"`
	// Record is the event as a record of its own holds it (version 1),
	// with the chain link of the record that holds it.
	Record  *lineEvent `json:"record,omitempty"`
	Invalid string     `json:"invalid,omitempty"`
	// Data is the body of a message that is not a record, decompressed
	// when it is a zstd frame; Raw, in base64, a body that is neither
	// such a frame nor UTF-8 text.
	Data string `json:"data,omitempty"`
	Raw  []byte `json:"raw,omitempty"`
}

type lineEvent struct {
	gated.AuditEvent
	Chain Chain `json:"chain"`
}

// event prints the index-th event of the record e holds.
func (p *printer) event(e Entry, index int, ev gated.AuditEvent) error {
	if p.json {
		line := line{Seq: e.Seq, Index: index, Stored: e.Stored.UTC(), Subject: e.Subject,
			Record: &lineEvent{AuditEvent: ev, Chain: e.Record.Chain}}
		return json.NewEncoder(p.w).Encode(line)
	}
	at := e.Stored.UTC().Format("2006-01-02T15:04:05.000Z")
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d %s %s %s n=%d", at, e.Seq, ev.Tenant, ev.Event, orDash(ev.ProposalID), e.Record.Chain.N)
	var data map[string]json.RawMessage
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &data) == nil {
		for _, k := range dataKeys {
			raw, ok := data[k]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				s = string(raw)
			}
			if len(s) > 80 {
				s = s[:77] + "..."
			}
			fmt.Fprintf(&b, " %s=%s", k, strconv.Quote(s))
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(p.w, b.String())
	return err
}

// printLast prints the last n messages (of one tenant, when tenant is
// set) and returns the sequence after them, where following goes on.
func printLast(ctx context.Context, js jetstream.JetStream, tenant string, n int, out *printer) (uint64, error) {
	q := Query{Tenant: tenant}
	if tenant == "" {
		// Every message of the stream is an audit message: the last n are
		// the last n sequences.
		stream, err := js.Stream(ctx, Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, ErrNoStream
		}
		if err != nil {
			return 0, fmt.Errorf("opening stream %s: %w", Stream, err)
		}
		st := stream.CachedInfo().State
		if st.Msgs == 0 {
			return st.LastSeq + 1, nil
		}
		q.StartSeq = max(st.FirstSeq, st.LastSeq-min(st.LastSeq, uint64(n))+1)
	}
	// One tenant's messages are spread over the stream: keep the last n.
	ring := make([]Entry, 0, n)
	err := Read(ctx, js, q, func(e Entry) error {
		if len(ring) == n {
			copy(ring, ring[1:])
			ring = ring[:n-1]
		}
		ring = append(ring, e)
		return nil
	})
	if err != nil {
		return 0, err
	}
	next := q.StartSeq
	for _, e := range ring {
		if err := out.entry(e); err != nil {
			return 0, err
		}
		next = e.Seq + 1
	}
	return next, nil
}

// errEnough ends a read once the limit is reached.
var errEnough = errors.New("limit reached")

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ParseSince reads a --since value: a duration back from now (90m, 24h, 7d) or a
// time (RFC 3339, or a date). Empty is the zero time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	bad := fmt.Errorf("--since %q: want a duration such as 90m, 24h or 7d, or a time such as 2025-01-02T15:04:05Z or 2025-01-02", s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		// Written so that NaN, for which every comparison is false, fails.
		if err != nil || !(n > 0 && n <= 36500) {
			return time.Time{}, bad
		}
		return now.Add(-time.Duration(n * float64(24*time.Hour))), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, bad
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, bad
}
