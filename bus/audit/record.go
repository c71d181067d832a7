package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/strictjson"
)

// An audit record carries three headers of package wire: AuditHashHeader,
// AuditMACHeader and AuditKeyHeader. The hash covers the body exactly as
// stored; the MAC, when gated has a key, covers the hash, so a record can
// only be written by someone who holds the key.

// Stream is the name of the JetStream stream that holds the audit records,
// on the subjects gated.audit.<tenant>.<event>.
const Stream = "GATED_AUDIT"

// MinKeyLen is the shortest audit key gated accepts, in bytes.
const MinKeyLen = 32

// Chain links a record to the record of the same tenant before it.
// It is the "chain" member of every record's body.
type Chain struct {
	// N numbers the tenant's records from 1, over every gated instance.
	N uint64 `json:"n"`
	// Prev is the hex SHA-256 of the body of the tenant's record N-1, and
	// empty for record 1. A chain restarts at 1 after a message that is not
	// a valid record; its record 1 then links to that message.
	Prev string `json:"prev"`
}

// Record is one record of the audit stream, decoded.
type Record struct {
	// Seq is the stream sequence, Stored the stream's timestamp; both are
	// zero for a record that was not read from the stream.
	Seq    uint64
	Stored time.Time
	// Subject is gated.audit.<tenant>.<event>.
	Subject string
	Event   engine.AuditEvent
	Chain   Chain
	// Body is the record exactly as stored: Event's members and "chain".
	Body []byte
	// Hash is the Gated-Audit-Hash header as written, which Verify checks
	// against the body.
	Hash string
	// MAC and KeyID are the Gated-Audit-Mac and Gated-Audit-Key headers;
	// empty for a record written without a key.
	MAC   string
	KeyID string
}

// auditBody is the wire form of a record's body.
type auditBody struct {
	engine.AuditEvent
	Chain *Chain `json:"chain"`
}

// DecodeRecord decodes a message of the audit stream. It checks the
// form of a record — a JSON object of the event schema and a chain link,
// the subject that names the body's tenant and event, a hash header — but
// not whether the hash matches, nor the MAC, nor the chain: those are
// Verify's, which needs the other records and the keys. Every error wraps
// ErrInvalidRecord.
func DecodeRecord(subject string, hdr nats.Header, body []byte) (*Record, error) {
	bad := func(format string, args ...any) (*Record, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRecord, fmt.Sprintf(format, args...))
	}
	b, ok := decodeCanonical(body)
	if !ok {
		b = auditBody{}
		if err := strictjson.Decode(body, &b); errors.Is(err, strictjson.ErrTrailingData) {
			return bad("body: data after the JSON object")
		} else if err != nil {
			return bad("body: %v", err)
		}
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return bad("body is not a JSON object")
	}
	ev := b.AuditEvent
	switch {
	case ev.V != engine.SchemaVersion:
		return bad("schema version %d, want %d", ev.V, engine.SchemaVersion)
	case !validAuditTenant(ev.Tenant):
		return bad("tenant %q is not a tenant token", ev.Tenant)
	case !validEventName(ev.Event):
		return bad("event %q is not an event name", ev.Event)
	case subject != wire.AuditSubject(ev.Tenant, ev.Event):
		return bad("subject %s does not name the body's tenant %q and event %q", subject, ev.Tenant, ev.Event)
	case len(ev.Data) > 0 && !isJSONObject(ev.Data):
		return bad("data is not a JSON object")
	case b.Chain == nil:
		return bad("no chain member")
	case b.Chain.N == 0:
		return bad("chain n is 0; records are numbered from 1")
	case b.Chain.N > 1 && b.Chain.Prev == "":
		return bad("record %d of a chain links to no record", b.Chain.N)
	case b.Chain.Prev != "" && !digest.ValidSHA256(b.Chain.Prev):
		return bad("chain prev %q is not a hex SHA-256", b.Chain.Prev)
	}
	r := &Record{Subject: subject, Event: ev, Chain: *b.Chain, Body: body}
	if hdr != nil {
		r.Hash, r.MAC, r.KeyID = hdr.Get(wire.AuditHashHeader), hdr.Get(wire.AuditMACHeader), hdr.Get(wire.AuditKeyHeader)
	}
	switch {
	case r.Hash == "":
		return bad("no %s header", wire.AuditHashHeader)
	case !digest.ValidSHA256(r.Hash):
		return bad("%s %q is not a hex SHA-256", wire.AuditHashHeader, r.Hash)
	case (r.MAC == "") != (r.KeyID == ""):
		return bad("%s and %s go together", wire.AuditMACHeader, wire.AuditKeyHeader)
	}
	return r, nil
}

// KeyID names a key in the Gated-Audit-Key header without revealing
// it: the hex of the first 8 bytes of its SHA-256.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// ParseKey reads an audit key file's content: at least
// MinKeyLen bytes, written raw or in hex (surrounding white space is
// ignored for hex).
func ParseKey(data []byte) ([]byte, error) {
	if t := bytes.TrimSpace(data); len(t)%2 == 0 && len(t) >= 2*MinKeyLen {
		if key, err := hex.DecodeString(string(t)); err == nil {
			return key, nil
		}
	}
	if len(data) < MinKeyLen {
		return nil, fmt.Errorf("an audit key needs at least %d random bytes (or %d hex digits), this one has %d bytes", MinKeyLen, 2*MinKeyLen, len(data))
	}
	return data, nil
}

// auditMAC is the MAC of a record whose hash header spells digest.
func auditMAC(key []byte, digest [sha256.Size]byte) string {
	return macDigest(hmac.New(sha256.New, key), digest)
}

// macDigest MACs digest with m, an HMAC-SHA-256 that is reset first.
func macDigest(m hash.Hash, digest [sha256.Size]byte) string {
	m.Reset()
	m.Write(digest[:])
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0]))
}

// auditSigner writes the hash and MAC headers of records.
type auditSigner struct {
	key   []byte
	keyID string
	// macs holds HMACs under key for reuse: keying one costs two SHA-256
	// states and a pass over each pad, for every record.
	macs *sync.Pool
}

func newAuditSigner(key []byte) auditSigner {
	if len(key) == 0 {
		return auditSigner{}
	}
	return auditSigner{key: key, keyID: KeyID(key),
		macs: &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

func (s auditSigner) sign(hdr nats.Header, digest [sha256.Size]byte) {
	hdr.Set(wire.AuditHashHeader, hex.EncodeToString(digest[:]))
	if s.key != nil {
		m := s.macs.Get().(hash.Hash)
		hdr.Set(wire.AuditMACHeader, macDigest(m, digest))
		s.macs.Put(m)
		hdr.Set(wire.AuditKeyHeader, s.keyID)
	}
}

// encodedEvent is an event marshalled once; chaining it only splices the
// chain member in, so a record can be re-chained cheaply after another
// gated instance wrote to its tenant.
type encodedEvent struct {
	tenant  string
	subject string
	json    []byte // the event without the chain member
}

func encodeEvent(ev engine.AuditEvent) (encodedEvent, error) {
	if !validAuditTenant(ev.Tenant) {
		return encodedEvent{}, fmt.Errorf("audit event %s: tenant %q is not a tenant token", ev.Event, ev.Tenant)
	}
	if !validEventName(ev.Event) {
		return encodedEvent{}, fmt.Errorf("audit event name %q is not an event name", ev.Event)
	}
	switch t := bytes.TrimSpace(ev.Data); {
	case len(t) == 0, string(t) == "null":
		ev.Data = nil
	case t[0] != '{':
		// Every record's data is an object; anything else is kept whole.
		wrapped, err := json.Marshal(map[string]json.RawMessage{"detail": t})
		if err != nil {
			return encodedEvent{}, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
		}
		ev.Data = wrapped
	}
	data, err := appendEvent(make([]byte, 0, len(ev.Data)+256), ev)
	if err != nil {
		return encodedEvent{}, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
	}
	return encodedEvent{tenant: ev.Tenant, subject: wire.AuditSubject(ev.Tenant, ev.Event), json: data}, nil
}

// appendEvent appends ev as encoding/json writes an engine.AuditEvent,
// without its reflection: members in the struct's order, empty optional
// ones left out, the data compacted. The data must be valid JSON.
func appendEvent(dst []byte, ev engine.AuditEvent) ([]byte, error) {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(ev.V), 10)
	dst = append(dst, `,"event":`...)
	dst = appendJSONString(dst, ev.Event)
	dst = append(dst, `,"tenant":`...)
	dst = appendJSONString(dst, ev.Tenant)
	if ev.ProposalID != "" {
		dst = append(dst, `,"proposal_id":`...)
		dst = appendJSONString(dst, ev.ProposalID)
	}
	at, err := ev.At.MarshalJSON()
	if err != nil {
		return nil, err
	}
	dst = append(dst, `,"at":`...)
	dst = append(dst, at...)
	if ev.Instance != "" {
		dst = append(dst, `,"instance":`...)
		dst = appendJSONString(dst, ev.Instance)
	}
	if ev.PolicyRevision != "" {
		dst = append(dst, `,"policy_revision":`...)
		dst = appendJSONString(dst, ev.PolicyRevision)
	}
	if len(ev.Data) > 0 {
		dst = append(dst, `,"data":`...)
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, ev.Data); err != nil {
			return nil, fmt.Errorf("data is not JSON: %w", err)
		}
		dst = buf.Bytes()
	}
	return append(dst, '}'), nil
}

// appendJSONString appends s as a JSON string. Strings of printable ASCII
// that need no escape, such as tokens and ids, are copied; any other goes
// through encoding/json, so that escapes stay exactly its own.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// body returns the record's body for chain link c.
func (e encodedEvent) body(c Chain) []byte {
	out := make([]byte, 0, len(e.json)+96)
	out = append(out, e.json[:len(e.json)-1]...)
	out = append(out, `,"chain":{"n":`...)
	out = strconv.AppendUint(out, c.N, 10)
	out = append(out, `,"prev":"`...)
	out = append(out, c.Prev...)
	return append(out, `"}}`...)
}

// msg builds the record's message for chain link c and returns it with
// the digest of its body.
func (e encodedEvent) msg(c Chain, s auditSigner) (*nats.Msg, [sha256.Size]byte) {
	m := nats.NewMsg(e.subject)
	m.Data = e.body(c)
	digest := sha256.Sum256(m.Data)
	s.sign(m.Header, digest)
	return m, digest
}

// NewMsg builds the stream message of a record: ev with chain link c,
// hashed, and MACed under key when key is not empty. gated's Writer
// writes records this way; it is exported for tools and tests that write
// or check records themselves.
func NewMsg(ev engine.AuditEvent, c Chain, key []byte) (*nats.Msg, error) {
	e, err := encodeEvent(ev)
	if err != nil {
		return nil, err
	}
	m, _ := e.msg(c, newAuditSigner(key))
	return m, nil
}

// tenantSubject is the subject filter of one tenant's records.
func tenantSubject(tenant string) string {
	return wire.AuditSubjectPrefix + tenant + ".>"
}

// validAuditTenant accepts the tenant tokens of the wire contract and
// engine.UnknownTenant.
func validAuditTenant(t string) bool {
	if t == engine.UnknownTenant {
		return true
	}
	if len(t) == 0 || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validEventName accepts dotted lower-case names such as verdict.decided:
// each part is a subject token.
func validEventName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for part := range strings.SplitSeq(name, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

func isJSONObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}
