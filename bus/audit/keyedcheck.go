package audit

import (
	"bytes"
	"crypto/sha256"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// quickKeyed lets a checker with keys take the quick check; tests turn it
// off to hold the quick check to the full decode.
var quickKeyed = true

// checkKeyed checks e, a record of version 3, the quick way when its MAC
// verifies under one of the keys: only the writer, who holds the key,
// could have written its body, and the writer writes every record in the
// form encodeRecord gives it. The body is then read for what the chains
// need, its tenant and chain, for its last event's name, which the
// subject must name, and, for the verdict check, for its verdict.decided
// and grant.issued events; its other events are stepped over, not
// decoded and checked one by one again. ok is false for any other
// message, which check decodes in full: a record without a MAC, with an
// unknown key or a MAC that does not verify, of another version, or not
// in that form. The outcome of an accepted record is what the full
// decode gives a record of the writer's. sum is the SHA-256 of e's body.
func (c *recordChecker) checkKeyed(e Entry, sum [sha256.Size]byte, rc recordCheck) (_ recordCheck, ok bool) {
	if e.Header == nil || e.Header.Get(wire.AuditHashHeader) != "" {
		return rc, false
	}
	m, known := c.macs[e.Header.Get(wire.AuditKeyHeader)]
	if !known || !macMatches(m, sum, e.Header.Get(wire.AuditMACHeader)) {
		return rc, false
	}
	js, err := recordJSON(e.Data, &c.scratch.json)
	if err != nil {
		return rc, false
	}
	s := scanner{buf: js}
	if !s.lit(`{"v":3,"tenant":`) {
		return rc, false
	}
	tenant, ok := s.str()
	if !ok || !s.lit(`,"chain":{"n":`) {
		return rc, false
	}
	var chain Chain
	if chain.N, ok = s.uint(19); !ok || !s.lit(`,"prev":`) {
		return rc, false
	}
	prev, ok := s.str()
	if !ok || !s.lit(`},"events":[`) {
		return rc, false
	}
	chain.Prev = string(prev)
	// The events, stepped over to the last one: valid JSON, as the MAC
	// says the writer wrote it.
	// The verdict check needs the record's last verdict.decided and
	// grant.issued events, as Record.Find finds them.
	events, last := s.buf, -1
	var verdict, grant []byte
	for i := 0; ; {
		if i >= len(events) || events[i] != '{' {
			return rc, false
		}
		end := skipObject(events, i)
		if end < 0 || end >= len(events) {
			return rc, false
		}
		last = i
		if c.prints {
			switch item := events[i:end]; {
			case bytes.HasPrefix(item, verdictStart):
				verdict = item
			case bytes.HasPrefix(item, grantStart):
				grant = item
			}
		}
		if events[end] == ',' {
			i = end + 1
			continue
		}
		if string(events[end:]) != "]}" {
			return rc, false
		}
		break
	}
	lastEvent := scanner{buf: events[last:]}
	if !lastEvent.lit(`{"v":1,"event":`) {
		return rc, false
	}
	name, ok := lastEvent.str()
	if !ok || !validAuditTenant(string(tenant)) || !validEventName(string(name)) || checkChain(&chain) != nil ||
		e.Subject != wire.AuditSubject(string(tenant), string(name)) {
		return rc, false
	}
	rc.tenant, rc.chain = string(tenant), chain
	if verdict == nil || rc.tenant == gated.UnknownTenant {
		return rc, true
	}
	ev, ok := canonicalEvent(verdict)
	if !ok || ev.ProposalID == "" {
		return rc, false
	}
	var g gated.AuditEvent
	if grant != nil {
		if g, ok = canonicalEvent(grant); !ok {
			return rc, false
		}
	}
	rc.verdict = true
	rc.printEvent(rc.tenant, ev.ProposalID, ev, g, grant != nil)
	// A folded grant without a gid: the verdict is printed from the
	// whole record.
	return rc, grant == nil || rc.printable
}

// The beginnings of the events the verdict check reads, as the writer
// writes them.
var (
	verdictStart = []byte(`{"v":1,"event":"` + gated.EventVerdict + `"`)
	grantStart   = []byte(`{"v":1,"event":"` + gated.EventGrantIssued + `"`)
)

// skipObject returns where the JSON object that starts at data[i] ends,
// past its closing brace, or -1 when data ends first. data must be valid
// JSON, as a body whose MAC verifies is: it looks for the end of each
// string with bytes.IndexByte, the bulk of a record being strings.
func skipObject(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch data[i] {
		case '"':
			end := stringEnd(data, i+1)
			if end < 0 {
				return -1
			}
			i = end
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// stringEnd returns the index of the quote that closes the JSON string
// whose content starts at data[i], or -1 when there is none.
func stringEnd(data []byte, i int) int {
	for {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		// The quote is escaped when an odd number of backslashes
		// precede it.
		n := 0
		for j := q - 1; j >= i && data[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
}
