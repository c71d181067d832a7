package audit

import (
	"bytes"
	"encoding/json"

	"github.com/gated/gated"

	"github.com/gated/gated/internal/jsonscan"
)

// decodeCanonical reads a record body written exactly as gated's writer
// writes one (appendEvent, then the chain member): the members in that
// order, no white space, strings of printable ASCII that need no escape,
// numbers without sign, fraction or leading zero, and the data one JSON
// object. It reads the body in one pass over the data, where the strict
// decoder reads it three times and copies it.
//
// ok is false for any other body, which DecodeRecord then gives to the
// strict decoder: a body this accepts decodes to the same auditBody
// under both, which FuzzDecodeCanonical checks. The decoded Data is a
// sub-slice of body, capped so that appending to it cannot write into
// the body.
func decodeCanonical(body []byte) (b auditBody, ok bool) {
	const chainKey = `,"chain":{"n":`
	// The chain member ends the body: `,"chain":{"n":N,"prev":"HEX"}}`.
	// Its digits and hex hold no `,"chain":{"n":`, so the last one is it.
	at := bytes.LastIndex(body, []byte(chainKey))
	if at < 0 {
		return b, false
	}
	var c Chain
	s := scanner{buf: body[at+len(chainKey):]}
	if c.N, ok = s.uint(19); !ok || !s.lit(`,"prev":`) {
		return b, false
	}
	prev, ok := s.str()
	if !ok || !s.lit(`}}`) || len(s.buf) != 0 {
		return b, false
	}
	c.Prev = string(prev)
	if b.AuditEvent, ok = readCanonicalEvent(body[:at]); !ok {
		return b, false
	}
	b.Chain = &c
	return b, true
}

// canonicalEvent reads an event of a version-3 body written exactly as
// gated's writer writes one (appendEvent), as decodeCanonical reads a
// version-1 body: ok is false for any other, which the strict decoder
// then reads to the same event (FuzzDecodeCanonical).
func canonicalEvent(raw []byte) (ev gated.AuditEvent, ok bool) {
	if len(raw) < 2 || raw[len(raw)-1] != '}' {
		return ev, false
	}
	return readCanonicalEvent(raw[:len(raw)-1])
}

// readCanonicalEvent reads an event in the canonical form from body, its
// closing brace (or, in a version-1 body, its chain member) cut off.
func readCanonicalEvent(body []byte) (ev gated.AuditEvent, ok bool) {
	s := scanner{buf: body}
	var v uint64
	if !s.lit(`{"v":`) {
		return ev, false
	}
	if v, ok = s.uint(9); !ok {
		return ev, false
	}
	ev.V = int(v)
	fields := []struct {
		key      string
		to       *string
		optional bool
	}{{`,"event":`, &ev.Event, false}, {`,"tenant":`, &ev.Tenant, false}, {`,"proposal_id":`, &ev.ProposalID, true}}
	for _, f := range fields {
		if !s.member(f.key, f.to, f.optional) {
			return ev, false
		}
	}
	if !s.lit(`,"at":`) {
		return ev, false
	}
	stamp, ok := s.str()
	// The strict decoder hands time.Time the quoted literal; so does this.
	if !ok || ev.At.UnmarshalJSON(s.last(len(stamp)+2)) != nil {
		return ev, false
	}
	if !s.member(`,"instance":`, &ev.Instance, true) || !s.member(`,"policy_revision":`, &ev.PolicyRevision, true) {
		return ev, false
	}
	if s.lit(`,"data":`) {
		data := s.buf
		// Valid allows white space around the value; the strict decoder
		// leaves it out of the raw data, so the canonical reading refuses it.
		if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' || !jsonscan.Valid(data) {
			return ev, false
		}
		ev.Data = json.RawMessage(data[:len(data):len(data)])
		s.buf = nil
	}
	return ev, len(s.buf) == 0
}

// scanner reads the canonical form of a record from the front of buf.
type scanner struct {
	buf []byte
	// read is the part of the body already read, for last.
	read []byte
}

// advance moves n bytes from buf to read.
func (s *scanner) advance(n int) {
	if s.read == nil {
		s.read = s.buf[:0]
	}
	s.read = s.read[:len(s.read)+n]
	s.buf = s.buf[n:]
}

// last returns the last n bytes read.
func (s *scanner) last(n int) []byte { return s.read[len(s.read)-n:] }

// lit reads the literal l, if buf starts with it.
func (s *scanner) lit(l string) bool {
	if !bytes.HasPrefix(s.buf, []byte(l)) {
		return false
	}
	s.advance(len(l))
	return true
}

// uint reads a number of at most max digits, without a leading zero.
func (s *scanner) uint(max int) (uint64, bool) {
	n, i := uint64(0), 0
	for i < len(s.buf) && i < max+1 && s.buf[i] >= '0' && s.buf[i] <= '9' {
		n = n*10 + uint64(s.buf[i]-'0')
		i++
	}
	if i == 0 || i > max || (i > 1 && s.buf[0] == '0') {
		return 0, false
	}
	s.advance(i)
	return n, true
}

// str reads a string of printable ASCII without quote or backslash, and
// returns what is between the quotes.
func (s *scanner) str() ([]byte, bool) {
	end := jsonscan.PlainString(s.buf, 0)
	if end < 0 {
		return nil, false
	}
	v := s.buf[1 : end-1]
	s.advance(end)
	return v, true
}

// member reads the member key (spelt with its comma and colon) and its
// string value into to; an optional member may be missing.
func (s *scanner) member(key string, to *string, optional bool) bool {
	if !s.lit(key) {
		return optional
	}
	v, ok := s.str()
	*to = string(v)
	return ok
}
