package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/jsonscan"
	"github.com/gated/gated/internal/jsonw"
	"github.com/gated/gated/internal/strictjson"
)

// RecordVersion is the schema version of the records gated writes: one
// record holds, whole, the events of a proposal that were recorded
// together (docs/AUDIT.md). Records of versions 1 and 2 are still read
// (legacy.go).
const RecordVersion = 3

// A version-3 body is one JSON object:
//
//	{"v":3,"tenant":T,"chain":{"n":N,"prev":H},"events":[E,...]}
//
// each E an event whole, exactly as a record of version 1 holds it but
// for the chain member (appendEvent): {"v":1,"event","tenant",
// "proposal_id","at","instance","policy_revision","data"}. The envelope
// (v, tenant, chain first, so that reading a chain needs no more) is what
// the chain needs. Readers decode the events as stored, so what the hash
// and the MAC cover is what every reader shows; nothing is rebuilt.
//
// One member is not stored: a verdict.decided event right after the
// grant.issued event of its grant leaves out the grant's signed token
// ("grant"), which the stored verdict and the fleet's answer carry. The
// audit stream names the grant by the grant.issued event's gid.

// v3Start is how the writer begins a body of version 3.
var v3Start = []byte(`{"v":3,`)

// sameEnvelope reports whether a and b may share a record.
func sameEnvelope(a, b gated.AuditEvent) bool {
	return a.Tenant == b.Tenant && a.ProposalID == b.ProposalID && a.Instance == b.Instance && a.PolicyRevision == b.PolicyRevision
}

// encodeRecord encodes evs, events of one envelope in the order recorded,
// as one version-3 record; checked says each event's data was checked to
// be JSON already (checkEvent).
func encodeRecord(evs []gated.AuditEvent, checked bool) (encodedEvent, error) {
	if len(evs) == 0 {
		return encodedEvent{}, errors.New("encoding an audit record: no event")
	}
	env := evs[0]
	if !validAuditTenant(env.Tenant) {
		return encodedEvent{}, fmt.Errorf("audit event %s: tenant %q is not a tenant token", env.Event, env.Tenant)
	}
	pre := make([]byte, 0, 24+len(env.Tenant))
	pre = append(pre, v3Start...)
	pre = append(pre, `"tenant":`...)
	pre = jsonw.AppendString(pre, env.Tenant)
	post := make([]byte, 0, 64+sizeOf(evs))
	post = append(post, `,"events":[`...)
	for i, ev := range evs {
		if !validEventName(ev.Event) {
			return encodedEvent{}, fmt.Errorf("audit event name %q is not an event name", ev.Event)
		}
		if !sameEnvelope(env, ev) {
			return encodedEvent{}, fmt.Errorf("audit event %s belongs to another record than %s", ev.Event, env.Event)
		}
		data, err := normalizeData(ev, checked)
		if err != nil {
			return encodedEvent{}, err
		}
		if ev.Event == gated.EventVerdict && i > 0 && evs[i-1].Event == gated.EventGrantIssued {
			data = withoutMember(data, "grant")
		}
		ev.Data = data
		if i > 0 {
			post = append(post, ',')
		}
		if post, err = appendEvent(post, ev); err != nil {
			return encodedEvent{}, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
		}
	}
	post = append(post, "]}"...)
	last := evs[len(evs)-1].Event
	return encodedEvent{v: RecordVersion, tenant: env.Tenant, subject: wire.AuditSubject(env.Tenant, last), pre: pre, post: post}, nil
}

func sizeOf(evs []gated.AuditEvent) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.Data) + 160
	}
	return n
}

// withoutMember returns the JSON object obj without its member key, or
// obj itself when it has none (or a key that is not plain ASCII).
func withoutMember(obj []byte, key string) []byte {
	out := make([]byte, 1, len(obj))
	out[0] = '{'
	found := false
	ok := jsonscan.Members(obj, func(k, v []byte) bool {
		if string(k) == key {
			found = true
			return true
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, k...)
		out = append(out, `":`...)
		out = append(out, v...)
		return true
	})
	if !ok || !found {
		return obj
	}
	return append(out, '}')
}

// recordV3 is the wire form of a version-3 body.
type recordV3 struct {
	V      int               `json:"v"`
	Tenant string            `json:"tenant"`
	Chain  *Chain            `json:"chain"`
	Events []json.RawMessage `json:"events"`
}

// decodeV3 decodes a version-3 record: body as stored, js its JSON (body
// itself, or body decompressed).
func decodeV3(subject string, hdr nats.Header, body, js []byte) (*Record, error) {
	bad := func(format string, args ...any) (*Record, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRecord, fmt.Sprintf(format, args...))
	}
	b, ok := scanV3(js)
	if !ok {
		b = recordV3{}
		if err := strictjson.Decode(js, &b); errors.Is(err, strictjson.ErrTrailingData) {
			return bad("body: data after the JSON object")
		} else if err != nil {
			return bad("body: %v", err)
		}
	}
	switch {
	case b.V != RecordVersion:
		return bad("schema version %d, want %d", b.V, RecordVersion)
	case !validAuditTenant(b.Tenant):
		return bad("tenant %q is not a tenant token", b.Tenant)
	case len(b.Events) == 0:
		return bad("the record holds no event")
	}
	if err := checkChain(b.Chain); err != nil {
		return bad("%v", err)
	}
	evs := make([]gated.AuditEvent, len(b.Events))
	for i, raw := range b.Events {
		ev, err := decodeEvent(raw)
		if err != nil {
			return bad("event %d: %v", i+1, err)
		}
		if ev.Tenant != b.Tenant {
			return bad("event %d is of tenant %q, the record of %q", i+1, ev.Tenant, b.Tenant)
		}
		if i > 0 && !sameEnvelope(evs[0], ev) {
			return bad("event %d belongs to another proposal, instance or policy than event 1", i+1)
		}
		evs[i] = ev
	}
	last := evs[len(evs)-1].Event
	if subject != wire.AuditSubject(b.Tenant, last) {
		return bad("subject %s does not name the body's tenant %q and last event %q", subject, b.Tenant, last)
	}
	r := &Record{Subject: subject, V: RecordVersion, Tenant: b.Tenant, ProposalID: evs[0].ProposalID, Chain: *b.Chain, Body: body, events: evs}
	return r, groupedHeaders(r, hdr)
}

// decodeEvent decodes one event of a version-3 body and checks it on its
// own.
func decodeEvent(raw []byte) (gated.AuditEvent, error) {
	ev, ok := canonicalEvent(raw)
	if !ok {
		ev = gated.AuditEvent{}
		if err := strictjson.Decode(raw, &ev); err != nil {
			return ev, err
		}
	}
	switch {
	case ev.V != gated.SchemaVersion:
		return ev, fmt.Errorf("schema version %d, want %d", ev.V, gated.SchemaVersion)
	case !validEventName(ev.Event):
		return ev, fmt.Errorf("event %q is not an event name", ev.Event)
	case len(ev.Data) > 0 && !isJSONObject(ev.Data):
		return ev, errors.New("data is not a JSON object")
	}
	return ev, membersOnce(ev.Data)
}

// membersOnce returns an error when data, valid JSON, names a member of
// an object twice: two JSON readers could read two different values from
// one record, so neither the writer nor the decoder takes it.
func membersOnce(data []byte) error {
	if key, dup := duplicateMember(data); dup {
		return fmt.Errorf("data names the member %q twice", key)
	}
	return nil
}

// duplicateMember reports the first key an object in data, valid JSON,
// names twice, at any depth, in one pass that compares keys as bytes. A
// key with an escape, or an object of more than maxPlainMembers members,
// sends the value to strictjson.ReadValue, which compares the strings
// keys stand for.
func duplicateMember(data []byte) (key string, dup bool) {
	var (
		frameBuf [16]int // per open object or array: where its keys start in keys, -1 for an array
		keyBuf   [64][2]int
		frames   = frameBuf[:0]
		keys     = keyBuf[:0]
		expect   bool // the next string is a key
		strict   bool // a key the pass cannot compare as bytes
	)
	for i := 0; i < len(data); {
		switch data[i] {
		case '{':
			frames = append(frames, len(keys))
			expect = true
		case '[':
			frames = append(frames, -1)
			expect = false
		case '}', ']':
			if n := len(frames); n > 0 {
				if f := frames[n-1]; f >= 0 {
					keys = keys[:f]
				}
				frames = frames[:n-1]
			}
			expect = false
		case ',':
			expect = len(frames) > 0 && frames[len(frames)-1] >= 0
		case '"':
			end := jsonscan.SkipString(data, i)
			if end < 0 {
				return "", false
			}
			if expect {
				k := data[i+1 : end-1]
				own := keys[frames[len(frames)-1]:]
				if bytes.IndexByte(k, '\\') >= 0 || len(own) >= maxPlainMembers {
					strict = true
				}
				for _, o := range own {
					if bytes.Equal(data[o[0]:o[1]], k) {
						return string(k), true
					}
				}
				keys = append(keys, [2]int{i + 1, end - 1})
				expect = false
			}
			i = end
			continue
		}
		i++
	}
	if !strict {
		return "", false
	}
	var ve *strictjson.ValueError
	if _, err := strictjson.ReadValue(data, strictjson.ValueOptions{}); errors.As(err, &ve) && errors.Is(err, strictjson.ErrDuplicateKey) {
		return ve.Key, true
	}
	return "", false
}

// maxPlainMembers is how many members of one object duplicateMember
// compares itself.
const maxPlainMembers = 64

// scanV3 reads a version-3 body in the exact form encodeRecord writes
// ({"v":3,"tenant":T,"chain":{"n":N,"prev":H},"events":[...]}, no white
// space, plain strings), checking each event to be one JSON value; ok is
// false for any other body, which the strict decoder then reads. What it
// accepts, the strict decoder decodes to the same recordV3 (FuzzScanV3).
func scanV3(js []byte) (b recordV3, ok bool) {
	s := scanner{buf: js}
	if !s.lit(`{"v":3,"tenant":`) {
		return b, false
	}
	b.V = RecordVersion
	tenant, ok := s.str()
	if !ok || !s.lit(`,"chain":{"n":`) {
		return b, false
	}
	var c Chain
	if c.N, ok = s.uint(19); !ok || !s.lit(`,"prev":`) {
		return b, false
	}
	prev, ok := s.str()
	if !ok || !s.lit(`},"events":[`) {
		return b, false
	}
	b.Tenant, c.Prev, b.Chain = string(tenant), string(prev), &c
	buf := s.buf
	for i := 0; ; {
		end := jsonscan.Value(buf, i)
		if end < 0 || end >= len(buf) {
			return b, false
		}
		b.Events = append(b.Events, json.RawMessage(buf[i:end:end]))
		switch buf[end] {
		case ',':
			i = end + 1
		case ']':
			return b, string(buf[end:]) == "]}"
		default:
			return b, false
		}
	}
}

// normalizeData makes an event's data what a record holds: absent when
// empty or null, an object (anything else is kept whole under "detail"),
// compacted. valid says the data was checked to be JSON already, as the
// Writer checks every event it is given (checkEvent).
func normalizeData(ev gated.AuditEvent, valid bool) (json.RawMessage, error) {
	t := bytes.TrimSpace(ev.Data)
	switch {
	case len(t) == 0, string(t) == "null":
		return nil, nil
	case t[0] != '{':
		wrapped, err := json.Marshal(map[string]json.RawMessage{"detail": t})
		if err != nil {
			return nil, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
		}
		t = wrapped
	}
	if compactJSON(t) && (valid || jsonscan.Valid(t)) {
		// What gated's engine records (encoding/json's output) is
		// compact already: kept as it is, not copied through Compact.
		if err := membersOnce(t); err != nil {
			return nil, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
		}
		return t, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(t))
	if err := json.Compact(&buf, t); err != nil {
		return nil, fmt.Errorf("encoding audit event %s: data is not JSON: %w", ev.Event, err)
	}
	if err := membersOnce(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
	}
	return buf.Bytes(), nil
}

// compactJSON reports whether data has no JSON white space outside its
// strings: a valid document for which it is true is its own compaction.
func compactJSON(data []byte) bool {
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			return false
		case '"':
			// Skip the string; an escaped quote does not end it.
			end := jsonscan.SkipString(data, i)
			if end < 0 {
				return true
			}
			i = end - 1
		}
	}
	return true
}
