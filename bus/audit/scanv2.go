package audit

import (
	"bytes"
	"encoding/json"

	"github.com/gated/gated/engine"
	"github.com/gated/gated/internal/jsonscan"
)

// Every reader of the stream reads version-2 records, and a replay or a
// verify reads all of them. encoding/json's strict decoder reads a body
// by reflection, checks it and copies its raw members, and was most of
// the CPU a replay spent on reading. scanV2 reads a body in the exact
// form encodeRecord writes in one pass, without reflection, into the
// same recordV2 the strict decoder fills; expandV2 then checks and
// expands it for both, so the two readings can differ only in what
// scanV2 fills, which FuzzScanV2 holds equal to the strict decoder's.

// scanV2 reads body, a version-2 record in the exact form encodeRecord
// writes:
//
//	{"v":2,"tenant":T,"chain":{"n":N,"prev":H}[,"proposal_id":P][,"instance":I]
//	 [,"policy_revision":R][,"head":{...}],"events":[E,...]}
//
// each event {"event":E,"at":A[,"omit":[K,...]][,"head":{...}][,"grant":{...}]
// [,"verbatim":B][,"data":{...}]}: these members in this order, each at
// most once, no white space outside the objects, the strings of the
// envelope, the events' names, stamps and omit lists of printable ASCII
// without escapes, the chain's n a plain unsigned integer, head, grant
// and data valid JSON objects. ok is false for any other body, which the
// caller then gives to the strict decoder: a key written with an escape
// or in another case, a member twice or out of order, a member the
// format does not have, null where an object goes, anything after the
// object. What it accepts, the strict decoder decodes to the same
// recordV2 (FuzzScanV2). The raw members are sub-slices of body, capped
// so that appending to them cannot write into it.
func scanV2(body []byte) (b recordV2, ok bool) {
	s := v2scanner{buf: body}
	if !s.lit(`{"v":2,"tenant":`) {
		return b, false
	}
	b.V = RecordVersion
	if b.Tenant, ok = s.str(); !ok || !s.lit(`,"chain":{"n":`) {
		return b, false
	}
	var c Chain
	if c.N, ok = s.uint(); !ok || !s.lit(`,"prev":`) {
		return b, false
	}
	if c.Prev, ok = s.str(); !ok || !s.lit(`}`) {
		return b, false
	}
	b.Chain = &c
	for _, m := range []struct {
		key string
		to  *string
	}{{`,"proposal_id":`, &b.ProposalID}, {`,"instance":`, &b.Instance}, {`,"policy_revision":`, &b.PolicyRevision}} {
		if s.lit(m.key) {
			if *m.to, ok = s.str(); !ok {
				return b, false
			}
		}
	}
	if s.lit(`,"head":`) {
		if b.Head, ok = s.object(); !ok {
			return b, false
		}
	}
	if !s.lit(`,"events":[`) {
		return b, false
	}
	if s.lit(`]`) {
		b.Events = []eventV2{}
	} else {
		// Count the events roughly (an object of some event's data may hold
		// the same key) so that the slice is allocated once.
		b.Events = make([]eventV2, 0, bytes.Count(body[s.i:], eventKey))
		for {
			e, ok := s.event()
			if !ok {
				return b, false
			}
			b.Events = append(b.Events, e)
			if s.lit(`]`) {
				break
			}
			if !s.lit(`,`) {
				return b, false
			}
		}
	}
	if !s.lit(`}`) || s.i != len(s.buf) {
		return b, false
	}
	return b, true
}

// v2scanner reads the canonical form of a version-2 body from buf[i:].
type v2scanner struct {
	buf []byte
	i   int
}

// lit reads the literal l, if it comes next.
func (s *v2scanner) lit(l string) bool {
	if len(s.buf)-s.i < len(l) || string(s.buf[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// raw reads a string of printable ASCII without escapes and returns it
// with its quotes.
func (s *v2scanner) raw() ([]byte, bool) {
	end := jsonscan.PlainString(s.buf, s.i)
	if end < 0 {
		return nil, false
	}
	q := s.buf[s.i:end:end]
	s.i = end
	return q, true
}

// str reads a string of printable ASCII without escapes.
func (s *v2scanner) str() (string, bool) {
	q, ok := s.raw()
	if !ok {
		return "", false
	}
	return string(q[1 : len(q)-1]), true
}

// name reads an event's name or a head member's as str does, sharing
// the string of a name gated writes.
func (s *v2scanner) name() (string, bool) {
	q, ok := s.raw()
	if !ok {
		return "", false
	}
	if n, ok := names[string(q[1:len(q)-1])]; ok {
		return n, true
	}
	return string(q[1 : len(q)-1]), true
}

// eventKey starts every event of a body.
var eventKey = []byte(`{"event":`)

// names are the names of the events a proposal's record holds, and of
// the head's members.
var names = func() map[string]string {
	m := map[string]string{}
	for _, k := range headKeys {
		m[k[1:len(k)-1]] = k[1 : len(k)-1]
	}
	for _, n := range []string{
		engine.EventReceived, engine.EventInvalid, engine.EventDeduplicated, engine.EventPolicyDecided,
		engine.EventPolicyRechecked, engine.EventPolicyShadowDiffers, engine.EventReviewSkipped,
		engine.EventReviewStarted, engine.EventReviewDone, engine.EventReviewAwaited, engine.EventVerdict,
		engine.EventReplayed, engine.EventGrantIssued, engine.EventOperatorAwaited, engine.EventOperatorDecided,
		engine.EventBudgetRefused,
	} {
		m[n] = n
	}
	return m
}()

// uint reads an unsigned integer without sign, fraction, exponent or
// leading zero that fits in a uint64.
func (s *v2scanner) uint() (uint64, bool) {
	n, end, ok := plainUint(s.buf, s.i)
	if ok {
		s.i = end
	}
	return n, ok
}

// object reads a valid JSON object and returns it as written.
func (s *v2scanner) object() (json.RawMessage, bool) {
	if s.i >= len(s.buf) || s.buf[s.i] != '{' {
		return nil, false
	}
	end := jsonscan.Value(s.buf, s.i)
	if end < 0 {
		return nil, false
	}
	obj := json.RawMessage(s.buf[s.i:end:end])
	s.i = end
	return obj, true
}

// event reads one event of the events array.
func (s *v2scanner) event() (e eventV2, ok bool) {
	if !s.lit(`{"event":`) {
		return e, false
	}
	if e.Event, ok = s.name(); !ok || !s.lit(`,"at":`) {
		return e, false
	}
	stamp, ok := s.raw()
	// The strict decoder hands time.Time the quoted literal; so does this.
	if !ok || e.At.UnmarshalJSON(stamp) != nil {
		return e, false
	}
	if s.lit(`,"omit":[`) {
		e.Omit = []string{}
		if !s.lit(`]`) {
			for {
				k, ok := s.name()
				if !ok {
					return e, false
				}
				e.Omit = append(e.Omit, k)
				if s.lit(`]`) {
					break
				}
				if !s.lit(`,`) {
					return e, false
				}
			}
		}
	}
	for _, m := range []struct {
		key string
		to  *json.RawMessage
	}{{`,"head":`, &e.Head}, {`,"grant":`, &e.Grant}} {
		if s.lit(m.key) {
			if *m.to, ok = s.object(); !ok {
				return e, false
			}
		}
	}
	if s.lit(`,"verbatim":`) {
		switch {
		case s.lit(`true`):
			e.Verbatim = true
		case s.lit(`false`):
		default:
			return e, false
		}
	}
	if s.lit(`,"data":`) {
		if e.Data, ok = s.object(); !ok {
			return e, false
		}
	}
	return e, s.lit(`}`)
}
