package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gated/gated"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/engine/wire"
)

// Query selects messages of the audit stream for Read.
type Query struct {
	// Tenant keeps one tenant's messages; empty keeps all.
	Tenant string
	// Event keeps the records whose subject names event, that is whose
	// last event it is; empty keeps all. A record of version 2 or 3 holds the
	// events recorded together, so an event that is not a record's last
	// (a budget refusal, a review's end beside its verdict) is found by
	// reading every record and looking through its Events.
	Event string
	// Since keeps messages stored at or after it; zero keeps all.
	Since time.Time
	// StartSeq keeps messages at or after this stream sequence; 0 keeps
	// all. Since wins when both are set.
	StartSeq uint64
	// Follow keeps reading new messages until ctx ends, instead of
	// stopping at the last message stored when Read began.
	Follow bool
	// Undecoded leaves Entry.Record and Entry.Err unset: the caller
	// decodes each entry with Entry.Decode, e.g. on other goroutines so
	// that the read does not wait for the decode.
	Undecoded bool
}

// Entry is one message of the audit stream.
type Entry struct {
	Seq     uint64
	Stored  time.Time
	Subject string
	Header  nats.Header
	Data    []byte
	// Record is the decoded record, nil when the message is not one.
	Record *Record
	// Err says why the message is not a valid record (it wraps
	// ErrInvalidRecord); nil when Record is set.
	Err error
}

// Tenant is the tenant the entry belongs to: the record's, or for a
// message that is not a valid record, its subject's tenant token.
func (e Entry) Tenant() string {
	if e.Record != nil {
		return e.Record.Tenant
	}
	return subjectTenant(e.Subject)
}

// Decode fills e.Record and e.Err from the message, as Read does unless
// its query says Undecoded.
func (e *Entry) Decode() {
	e.Record, e.Err = DecodeRecord(e.Subject, e.Header, e.Data)
	if e.Record != nil {
		e.Record.Seq, e.Record.Stored = e.Seq, e.Stored
	}
}

// errStopReading ends Read early without an error.
var errStopReading = errors.New("stop reading")

// Read calls fn with every message of the audit stream that q
// selects, in stream order. It stops at the last message stored when it
// began unless q.Follow is set, when fn returns an error (which it
// returns), or when ctx ends. Errors: ErrNoStream, NATS errors.
func Read(ctx context.Context, js jetstream.JetStream, q Query, fn func(Entry) error) error {
	stream, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoStream
	}
	if err != nil {
		return fmt.Errorf("opening stream %s: %w", Stream, err)
	}
	return readStream(ctx, stream, q, fn)
}

func readStream(ctx context.Context, stream jetstream.Stream, q Query, fn func(Entry) error) error {
	filter := wire.AuditSubjectPrefix + ">"
	if q.Tenant != "" {
		filter = tenantSubject(q.Tenant)
	}
	if q.Event != "" {
		filter = wire.AuditSubject(cmp.Or(q.Tenant, "*"), q.Event)
	}
	// The stop point: the last message of the filter now. Without it the
	// consumer would wait forever for a message that does not come.
	var stop uint64
	if !q.Follow {
		last, err := stream.GetLastMsgForSubject(ctx, filter)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("reading the last audit record: %w", err)
		case !q.Since.IsZero() && last.Time.Before(q.Since), last.Sequence < q.StartSeq:
			return nil
		}
		stop = last.Sequence
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !wholeStream(stream, filter) {
		cfg.FilterSubjects = []string{filter}
	}
	switch {
	case !q.Since.IsZero():
		since := q.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	case q.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.StartSeq
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", Stream, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				if q.Follow {
					return nil
				}
				return ctx.Err()
			}
			return fmt.Errorf("reading stream %s: %w", Stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", Stream, err)
		}
		e := Entry{Seq: md.Sequence.Stream, Stored: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if !q.Undecoded {
			e.Decode()
		}
		if err := fn(e); err != nil {
			if errors.Is(err, errStopReading) {
				return nil
			}
			return err
		}
		if !q.Follow && (e.Seq >= stop || md.NumPending == 0) {
			return nil
		}
	}
}

// wholeStream reports whether filter selects every subject of stream:
// a consumer without a filter is then given the same messages, and the
// server reads them without matching each message's subject.
func wholeStream(stream jetstream.Stream, filter string) bool {
	info := stream.CachedInfo()
	return info != nil && len(info.Config.Subjects) == 1 && info.Config.Subjects[0] == filter
}

// Filter selects records by what their data says. Empty fields
// select everything.
type Filter struct {
	// Outcome keeps verdict.decided records of this outcome.
	Outcome string
	// Action keeps records whose data names this action.
	Action string
	// Operator keeps records whose data names this operator id.
	Operator string
}

// Match reports whether an event of r passes the filter.
func (f Filter) Match(r *Record) bool {
	if r == nil {
		return false
	}
	for _, ev := range r.Events() {
		if f.MatchEvent(ev) {
			return true
		}
	}
	return false
}

// MatchEvent reports whether ev passes the filter.
func (f Filter) MatchEvent(ev gated.AuditEvent) bool {
	if f == (Filter{}) {
		return true
	}
	var d struct {
		Action   string `json:"action"`
		Operator string `json:"operator"`
		Outcome  string `json:"outcome"`
	}
	if len(ev.Data) > 0 {
		_ = json.Unmarshal(ev.Data, &d)
	}
	switch {
	case f.Outcome != "" && (ev.Event != gated.EventVerdict || d.Outcome != f.Outcome):
		return false
	case f.Action != "" && d.Action != f.Action:
		return false
	case f.Operator != "" && d.Operator != f.Operator:
		return false
	}
	return true
}

// subjectTenant is the tenant token of an audit subject, or "" when the
// subject has none.
func subjectTenant(subject string) string {
	rest, ok := strings.CutPrefix(subject, wire.AuditSubjectPrefix)
	if !ok {
		return ""
	}
	tenant, _, _ := strings.Cut(rest, ".")
	return tenant
}
