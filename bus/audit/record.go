package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/jsonw"
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

// Record is one record of the audit stream, decoded. A record of
// version 1 holds one event; a record of version 3 (RecordVersion), or of
// the legacy version 2, the events of one proposal that gated recorded
// together. Events gives them alike.
type Record struct {
	// Seq is the stream sequence, Stored the stream's timestamp; both are
	// zero for a record that was not read from the stream.
	Seq    uint64
	Stored time.Time
	// Subject is gated.audit.<tenant>.<event>, the event being the
	// record's last.
	Subject string
	// V is the record's schema version: 1, 2 or RecordVersion.
	V int
	// Tenant and ProposalID are the envelope every event of the record
	// shares.
	Tenant     string
	ProposalID string
	Chain      Chain
	// Body is the record exactly as stored.
	Body []byte
	// Hash is the Gated-Audit-Hash header of a version-1 record as
	// written, which Verify checks against the body; a later record has
	// none (its hash is the body's SHA-256, computed).
	Hash string
	// MAC and KeyID are the Gated-Audit-Mac and Gated-Audit-Key headers;
	// empty for a record written without a key. A version-1 MAC is in hex,
	// a later one in unpadded base64url.
	MAC   string
	KeyID string

	events []gated.AuditEvent
}

// Events returns the record's events in the order recorded, each whole:
// as a record of version 3 stores it, and as a legacy record of version 2
// rebuilds it (legacy.go). Every reader of the stream reads records
// through it. The slice is the record's: do not modify it.
func (r *Record) Events() []gated.AuditEvent { return r.events }

// Last returns the record's last event, the one its subject names.
func (r *Record) Last() gated.AuditEvent { return r.events[len(r.events)-1] }

// Find returns the record's last event named name.
func (r *Record) Find(name string) (gated.AuditEvent, bool) {
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Event == name {
			return r.events[i], true
		}
	}
	return gated.AuditEvent{}, false
}

// NewRecord returns a record of the events evs, for tests and tools that
// fold records without reading them from a stream; it has no chain, body
// or headers.
func NewRecord(seq uint64, evs ...gated.AuditEvent) *Record {
	r := &Record{Seq: seq, V: RecordVersion, events: evs}
	if len(evs) > 0 {
		r.Tenant, r.ProposalID = evs[0].Tenant, evs[0].ProposalID
		r.Subject = wire.AuditSubject(evs[0].Tenant, evs[len(evs)-1].Event)
	}
	return r
}

// auditBody is the wire form of a version-1 record's body.
type auditBody struct {
	gated.AuditEvent
	Chain *Chain `json:"chain"`
}

// DecodeRecord decodes a message of the audit stream. It checks the
// form of a record — a JSON object of a known version, or a version-2
// or 3 object compressed as one zstd frame, its chain link,
// events of the event schema, the subject that names the tenant and the
// last event, a hash header on a version-1 record — but not whether the
// hash matches, nor the MAC, nor the chain: those are Verify's, which
// needs the other records and the keys. Every error wraps
// ErrInvalidRecord.
func DecodeRecord(subject string, hdr nats.Header, body []byte) (*Record, error) {
	return decodeRecord(subject, hdr, body, nil)
}

// decodeRecord is DecodeRecord writing a version-2 record's JSON, when
// compressed, and its expanded events (expandV2) into *scratch: the record
// is then only the caller's to read until it hands scratch to the next
// decoding.
func decodeRecord(subject string, hdr nats.Header, body []byte, scratch *decodeScratch) (*Record, error) {
	bad := func(format string, args ...any) (*Record, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRecord, fmt.Sprintf(format, args...))
	}
	var jsonBlock, events *[]byte
	if scratch != nil {
		jsonBlock, events = &scratch.json, &scratch.events
	}
	if isCompressed(body) {
		js, err := recordJSON(body, jsonBlock)
		if err != nil {
			return bad("%v", err)
		}
		return decodeGrouped(subject, hdr, body, js, events)
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return bad("body is neither a JSON object nor a zstd frame")
	}
	if v := bodyVersion(body); v == RecordVersion || v == legacyVersion {
		return decodeGrouped(subject, hdr, body, body, events)
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
	ev := b.AuditEvent
	switch {
	case ev.V != gated.SchemaVersion:
		return bad("schema version %d, want %d, %d or %d", ev.V, RecordVersion, legacyVersion, gated.SchemaVersion)
	case !validAuditTenant(ev.Tenant):
		return bad("tenant %q is not a tenant token", ev.Tenant)
	case !validEventName(ev.Event):
		return bad("event %q is not an event name", ev.Event)
	case subject != wire.AuditSubject(ev.Tenant, ev.Event):
		return bad("subject %s does not name the body's tenant %q and event %q", subject, ev.Tenant, ev.Event)
	case len(ev.Data) > 0 && !isJSONObject(ev.Data):
		return bad("data is not a JSON object")
	}
	if err := membersOnce(ev.Data); err != nil {
		return bad("%v", err)
	}
	if err := checkChain(b.Chain); err != nil {
		return bad("%v", err)
	}
	r := &Record{Subject: subject, V: 1, Tenant: ev.Tenant, ProposalID: ev.ProposalID, Chain: *b.Chain, Body: body, events: []gated.AuditEvent{ev}}
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

// bodyVersion reads the version of a body that starts as gated writes
// one, {"v":N, and otherwise the "v" member of the object, leniently; 0
// when there is none.
func bodyVersion(body []byte) int {
	if len(body) > 7 && string(body[:5]) == `{"v":` && body[6] == ',' && body[5] >= '0' && body[5] <= '9' {
		return int(body[5] - '0')
	}
	var v struct {
		V int `json:"v"`
	}
	_ = json.Unmarshal(body, &v)
	return v.V
}

// checkChain checks a record's chain link on its own.
func checkChain(c *Chain) error {
	switch {
	case c == nil:
		return errors.New("no chain member")
	case c.N == 0:
		return errors.New("chain n is 0; records are numbered from 1")
	case c.N > 1 && c.Prev == "":
		return fmt.Errorf("record %d of a chain links to no record", c.N)
	case c.Prev != "" && !digest.ValidSHA256(c.Prev):
		return fmt.Errorf("chain prev %q is not a hex SHA-256", c.Prev)
	}
	return nil
}

// decodeScratch holds the blocks a reader of one record at a time lends
// decodeRecord: json for a compressed body's JSON, events for the
// expanded events (expandV2).
type decodeScratch struct {
	json, events []byte
}

// decodeGrouped decodes a record of version 2 or later: body as stored,
// js its JSON (body itself, or body decompressed), scratch where a
// version-2 record's expanded events may go.
func decodeGrouped(subject string, hdr nats.Header, body, js []byte, scratch *[]byte) (*Record, error) {
	if bodyVersion(js) == legacyVersion {
		return decodeV2(subject, hdr, body, js, scratch)
	}
	return decodeV3(subject, hdr, body, js)
}

// decodeV2 decodes a version-2 record: body as stored, js its JSON (body
// itself, or body decompressed).
func decodeV2(subject string, hdr nats.Header, body, js []byte, scratch *[]byte) (*Record, error) {
	bad := func(format string, args ...any) (*Record, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRecord, fmt.Sprintf(format, args...))
	}
	var b recordV2
	if err := strictjson.Decode(js, &b); errors.Is(err, strictjson.ErrTrailingData) {
		return bad("body: data after the JSON object")
	} else if err != nil {
		return bad("body: %v", err)
	}
	switch {
	case b.V != legacyVersion:
		return bad("schema version %d, want %d", b.V, legacyVersion)
	case !validAuditTenant(b.Tenant):
		return bad("tenant %q is not a tenant token", b.Tenant)
	}
	if err := checkChain(b.Chain); err != nil {
		return bad("%v", err)
	}
	evs, err := expandV2(&b, scratch)
	if err != nil {
		return bad("%v", err)
	}
	for i, ev := range evs {
		if err := membersOnce(ev.Data); err != nil {
			return bad("event %d: %v", i+1, err)
		}
	}
	last := b.Events[len(b.Events)-1].Event
	if subject != wire.AuditSubject(b.Tenant, last) {
		return bad("subject %s does not name the body's tenant %q and last event %q", subject, b.Tenant, last)
	}
	r := &Record{Subject: subject, V: legacyVersion, Tenant: b.Tenant, ProposalID: b.ProposalID, Chain: *b.Chain, Body: body, events: evs}
	if err := groupedHeaders(r, hdr); err != nil {
		return nil, err
	}
	return r, nil
}

// groupedHeaders reads the headers of a record of version 2 or later into
// r: a MAC and its key id, together, and no hash header (the hash is the
// body's SHA-256, computed). The error wraps ErrInvalidRecord.
func groupedHeaders(r *Record, hdr nats.Header) error {
	if hdr != nil {
		r.MAC, r.KeyID = hdr.Get(wire.AuditMACHeader), hdr.Get(wire.AuditKeyHeader)
		if h := hdr.Get(wire.AuditHashHeader); h != "" {
			return fmt.Errorf("%w: a version-%d record has no %s header", ErrInvalidRecord, r.V, wire.AuditHashHeader)
		}
	}
	if (r.MAC == "") != (r.KeyID == "") {
		return fmt.Errorf("%w: %s and %s go together", ErrInvalidRecord, wire.AuditMACHeader, wire.AuditKeyHeader)
	}
	return nil
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

// auditMAC is the MAC of a record of version v whose body's SHA-256 is
// digest (for version 1: whose hash header spells digest).
func auditMAC(key []byte, digest [sha256.Size]byte, v int) string {
	return macDigest(hmac.New(sha256.New, key), digest, v)
}

// macDigest MACs digest with m, an HMAC-SHA-256 that is reset first, and
// spells the MAC as a record of version v carries it: in hex for
// version 1, in unpadded base64url after.
func macDigest(m hash.Hash, digest [sha256.Size]byte, v int) string {
	m.Reset()
	m.Write(digest[:])
	var sum [sha256.Size]byte
	mac := m.Sum(sum[:0])
	if v == 1 {
		return hex.EncodeToString(mac)
	}
	return base64.RawURLEncoding.EncodeToString(mac)
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

// sign writes the headers of a record of version v whose body's SHA-256
// is digest: the hash itself only on version 1, where it is part of the
// format.
func (s auditSigner) sign(hdr nats.Header, digest [sha256.Size]byte, v int) {
	if v == 1 {
		hdr.Set(wire.AuditHashHeader, hex.EncodeToString(digest[:]))
	}
	if s.key != nil {
		m := s.macs.Get().(hash.Hash)
		hdr.Set(wire.AuditMACHeader, macDigest(m, digest, v))
		s.macs.Put(m)
		hdr.Set(wire.AuditKeyHeader, s.keyID)
	}
}

// encodedEvent is a record marshalled once, but for its chain link:
// chaining it only splices the chain member in, so a record can be
// re-chained cheaply after another gated instance wrote to its tenant.
// The body is pre, the chain member, then post.
type encodedEvent struct {
	v       int
	tenant  string
	subject string
	// compress stores the body as a zstd frame of its JSON (versions 2
	// and 3 only).
	compress bool
	pre      []byte
	post     []byte
}

// size is the body's length without its chain member.
func (e encodedEvent) size() int { return len(e.pre) + len(e.post) }

// encodeEvent encodes ev alone as a version-1 record.
func encodeEvent(ev gated.AuditEvent) (encodedEvent, error) {
	if !validAuditTenant(ev.Tenant) {
		return encodedEvent{}, fmt.Errorf("audit event %s: tenant %q is not a tenant token", ev.Event, ev.Tenant)
	}
	if !validEventName(ev.Event) {
		return encodedEvent{}, fmt.Errorf("audit event name %q is not an event name", ev.Event)
	}
	data, err := normalizeData(ev, false)
	if err != nil {
		return encodedEvent{}, err
	}
	ev.Data = data
	data, err = appendEvent(make([]byte, 0, len(ev.Data)+256), ev)
	if err != nil {
		return encodedEvent{}, fmt.Errorf("encoding audit event %s: %w", ev.Event, err)
	}
	return encodedEvent{v: 1, tenant: ev.Tenant, subject: wire.AuditSubject(ev.Tenant, ev.Event), pre: data[:len(data)-1], post: []byte("}")}, nil
}

// appendEvent appends ev as encoding/json writes an gated.AuditEvent,
// without its reflection: members in the struct's order, empty optional
// ones left out. The data must be as normalizeData makes it.
func appendEvent(dst []byte, ev gated.AuditEvent) ([]byte, error) {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(ev.V), 10)
	dst = append(dst, `,"event":`...)
	dst = jsonw.AppendString(dst, ev.Event)
	dst = append(dst, `,"tenant":`...)
	dst = jsonw.AppendString(dst, ev.Tenant)
	if ev.ProposalID != "" {
		dst = append(dst, `,"proposal_id":`...)
		dst = jsonw.AppendString(dst, ev.ProposalID)
	}
	at, err := ev.At.MarshalJSON()
	if err != nil {
		return nil, err
	}
	dst = append(dst, `,"at":`...)
	dst = append(dst, at...)
	if ev.Instance != "" {
		dst = append(dst, `,"instance":`...)
		dst = jsonw.AppendString(dst, ev.Instance)
	}
	if ev.PolicyRevision != "" {
		dst = append(dst, `,"policy_revision":`...)
		dst = jsonw.AppendString(dst, ev.PolicyRevision)
	}
	if len(ev.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, ev.Data...)
	}
	return append(dst, '}'), nil
}

// body returns the record's JSON body for chain link c.
func (e encodedEvent) body(c Chain) []byte {
	return e.appendBody(make([]byte, 0, e.size()+96), c)
}

// appendBody appends the record's JSON body for chain link c to out.
func (e encodedEvent) appendBody(out []byte, c Chain) []byte {
	out = append(out, e.pre...)
	out = append(out, `,"chain":{"n":`...)
	out = strconv.AppendUint(out, c.N, 10)
	out = append(out, `,"prev":"`...)
	out = append(out, c.Prev...)
	out = append(out, `"}`...)
	return append(out, e.post...)
}

// msg builds the record's message for chain link c and returns it with
// the digest of its body.
func (e encodedEvent) msg(c Chain, s auditSigner) (*nats.Msg, [sha256.Size]byte) {
	m := nats.NewMsg(e.subject)
	if e.compress && e.v > 1 {
		p := blocks.Get().(*[]byte)
		js := e.appendBody((*p)[:0], c)
		if len(js) <= MaxRecordJSON {
			m.Data = compressBody(make([]byte, 0, len(js)/2+64), js)
		} else {
			m.Data = bytes.Clone(js) // readers would refuse it compressed
		}
		if cap(js) <= maxKeptScratch {
			*p = js[:0]
			blocks.Put(p)
		}
	} else {
		m.Data = e.body(c)
	}
	digest := sha256.Sum256(m.Data)
	s.sign(m.Header, digest, e.v)
	return m, digest
}

// NewMsg builds the stream message of a version-1 record: ev with chain
// link c, hashed, and MACed under key when key is not empty. It is
// exported for tools and tests that write or check records of the first
// version; gated's Writer writes version-3 records (NewRecordMsg).
func NewMsg(ev gated.AuditEvent, c Chain, key []byte) (*nats.Msg, error) {
	e, err := encodeEvent(ev)
	if err != nil {
		return nil, err
	}
	m, _ := e.msg(c, newAuditSigner(key))
	return m, nil
}

// NewRecordMsg builds the stream message of a version-3 record of evs,
// events of one tenant and proposal in the order recorded, with chain
// link c, MACed under key when key is not empty, its body stored as its
// JSON, as a Writer configured Uncompressed writes it.
func NewRecordMsg(evs []gated.AuditEvent, c Chain, key []byte) (*nats.Msg, error) {
	return newRecordMsg(evs, c, key, false)
}

// NewCompressedRecordMsg is NewRecordMsg with the body stored as a zstd
// frame of its JSON, as gated's Writer writes it by default.
func NewCompressedRecordMsg(evs []gated.AuditEvent, c Chain, key []byte) (*nats.Msg, error) {
	return newRecordMsg(evs, c, key, true)
}

func newRecordMsg(evs []gated.AuditEvent, c Chain, key []byte, compress bool) (*nats.Msg, error) {
	e, err := encodeRecord(evs, false)
	if err != nil {
		return nil, err
	}
	e.compress = compress
	m, _ := e.msg(c, newAuditSigner(key))
	return m, nil
}

// tenantSubject is the subject filter of one tenant's records.
func tenantSubject(tenant string) string {
	return wire.AuditSubjectPrefix + tenant + ".>"
}

// validAuditTenant accepts the tenant tokens of the wire contract and
// gated.UnknownTenant.
func validAuditTenant(t string) bool {
	if t == gated.UnknownTenant {
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
