package audit

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/jsonscan"
)

// envelope is what scanEnvelope reads of a record body: the members a
// check of the record needs, as sub-slices of the body, nothing copied.
type envelope struct {
	v                            uint64
	event, tenant, proposalID    []byte
	at, instance, policyRevision []byte
	// data is the data member's value, an object; nil when absent.
	data []byte
	// n and prev are the chain member's; chain is false without one.
	chain bool
	n     uint64
	prev  []byte
	// seen has a bit per member read (the envelopeMember constants), and
	// unknown is set when the body has a member not among them: tolerated
	// by the scan, left to the caller to judge.
	seen    uint16
	unknown bool
}

// The members scanEnvelope knows, as bits of envelope.seen.
const (
	memberV uint16 = 1 << iota
	memberEvent
	memberTenant
	memberProposalID
	memberAt
	memberInstance
	memberPolicyRevision
	memberData
	memberChain
)

var envelopeMembers = map[string]uint16{
	"v": memberV, "event": memberEvent, "tenant": memberTenant, "proposal_id": memberProposalID,
	"at": memberAt, "instance": memberInstance, "policy_revision": memberPolicyRevision,
	"data": memberData, "chain": memberChain,
}

// scanEnvelope reads a record body in one pass, members in any order,
// and returns its envelope. It reads only what it can read the way
// encoding/json would: ok is false, and the caller must decode the body in
// full, for a body that is not one valid JSON object, for a key written
// with an escape or appearing twice, for a known member whose value is not
// in its plain form (a string with an escape or outside printable ASCII,
// a number with a sign, fraction or exponent, null), and for a chain
// member with other members than n and prev. A member it does not know is
// skipped (its value still checked as JSON) and flagged as unknown, so
// that a body of a later format still yields its chain.
func scanEnvelope(body []byte) (env envelope, ok bool) {
	i := jsonscan.Space(body, 0)
	if i >= len(body) || body[i] != '{' {
		return env, false
	}
	i = jsonscan.Space(body, i+1)
	if i < len(body) && body[i] == '}' {
		return env, jsonscan.Space(body, i+1) == len(body)
	}
	for {
		key, next, ok := plainKey(body, i)
		if !ok {
			return env, false
		}
		bit, known := envelopeMembers[string(key)]
		if known && env.seen&bit != 0 {
			return env, false // twice: encoding/json keeps the last, others the first
		}
		env.seen |= bit
		i = next
		switch bit {
		case memberV:
			env.v, i, ok = plainUint(body, i)
		case memberEvent:
			env.event, i, ok = plainString(body, i)
		case memberTenant:
			env.tenant, i, ok = plainString(body, i)
		case memberProposalID:
			env.proposalID, i, ok = plainString(body, i)
		case memberAt:
			env.at, i, ok = plainString(body, i)
		case memberInstance:
			env.instance, i, ok = plainString(body, i)
		case memberPolicyRevision:
			env.policyRevision, i, ok = plainString(body, i)
		case memberData:
			start := i
			if i = jsonscan.Value(body, i); i >= 0 && body[start] == '{' {
				env.data = body[start:i:i]
			} else {
				ok = false
			}
		case memberChain:
			env.chain = true
			env.n, env.prev, i, ok = plainChain(body, i)
		default:
			env.unknown = true
			i = jsonscan.Value(body, i)
			ok = i >= 0
		}
		if !ok {
			return env, false
		}
		i = jsonscan.Space(body, i)
		if i >= len(body) {
			return env, false
		}
		switch body[i] {
		case ',':
			i = jsonscan.Space(body, i+1)
		case '}':
			return env, jsonscan.Space(body, i+1) == len(body)
		default:
			return env, false
		}
	}
}

// plainKey reads the member key at body[i:] and its colon, and returns
// the key's bytes (between the quotes) and where the value starts. A key
// with an escape or a byte outside printable ASCII is refused.
func plainKey(body []byte, i int) ([]byte, int, bool) {
	key, i, ok := plainString(body, i)
	if !ok {
		return nil, 0, false
	}
	i = jsonscan.Space(body, i)
	if i >= len(body) || body[i] != ':' {
		return nil, 0, false
	}
	return key, jsonscan.Space(body, i+1), true
}

// plainString reads a string of printable ASCII without escapes at
// body[i:] and returns what is between its quotes and where it ends.
func plainString(body []byte, i int) ([]byte, int, bool) {
	end := jsonscan.PlainString(body, i)
	if end < 0 {
		return nil, 0, false
	}
	return body[i+1 : end-1 : end-1], end, true
}

// plainUint reads an unsigned integer without sign, fraction, exponent
// or leading zero that fits in a uint64.
func plainUint(body []byte, i int) (uint64, int, bool) {
	j := jsonscan.Digits(body, i)
	if j == i || j-i > 20 || (j-i > 1 && body[i] == '0') {
		return 0, 0, false
	}
	if j < len(body) && (body[j] == '.' || body[j] == 'e' || body[j] == 'E') {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(string(body[i:j]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return n, j, true
}

// plainChain reads a chain member's object: n and prev once each, and
// nothing else.
func plainChain(body []byte, i int) (n uint64, prev []byte, end int, ok bool) {
	if i >= len(body) || body[i] != '{' {
		return 0, nil, 0, false
	}
	var seenN, seenPrev bool
	i = jsonscan.Space(body, i+1)
	for {
		key, next, ok := plainKey(body, i)
		if !ok {
			return 0, nil, 0, false
		}
		switch {
		case string(key) == "n" && !seenN:
			seenN = true
			n, i, ok = plainUint(body, next)
		case string(key) == "prev" && !seenPrev:
			seenPrev = true
			prev, i, ok = plainString(body, next)
		default:
			return 0, nil, 0, false
		}
		if !ok {
			return 0, nil, 0, false
		}
		i = jsonscan.Space(body, i)
		if i >= len(body) {
			return 0, nil, 0, false
		}
		switch body[i] {
		case ',':
			i = jsonscan.Space(body, i+1)
		case '}':
			return n, prev, i + 1, true
		default:
			return 0, nil, 0, false
		}
	}
}

// recordView is a valid record as Verify checks it: its envelope and
// headers, sub-slices of the message, nothing copied.
type recordView struct {
	event, tenant, proposalID []byte
	chain                     Chain
	data                      []byte
	hash, mac, keyID          string
}

// viewRecord reads a message of the audit stream the fast way: the body's
// envelope (scanEnvelope), checked as DecodeRecord checks a record. ok is
// false when the fast reading cannot say the message is a valid record;
// the caller then decodes it with DecodeRecord, which says why not or
// reads it in full. What it accepts, DecodeRecord accepts and reads the
// same (FuzzViewRecord).
func viewRecord(subject string, hdr nats.Header, body []byte) (rv recordView, ok bool) {
	env, ok := scanEnvelope(body)
	const required = memberV | memberEvent | memberTenant | memberChain
	if !ok || env.unknown || env.seen&required != required || env.v != gated.SchemaVersion {
		return rv, false
	}
	if !validAuditTenant(string(env.tenant)) || !validEventName(string(env.event)) ||
		!isAuditSubject(subject, env.tenant, env.event) {
		return rv, false
	}
	if env.n == 0 || (env.n > 1 && len(env.prev) == 0) || (len(env.prev) > 0 && !digest.ValidSHA256(string(env.prev))) {
		return rv, false
	}
	if env.seen&memberAt != 0 && !validStamp(env.at) {
		return rv, false
	}
	if hdr != nil {
		rv.hash, rv.mac, rv.keyID = hdr.Get(wire.AuditHashHeader), hdr.Get(wire.AuditMACHeader), hdr.Get(wire.AuditKeyHeader)
	}
	if !digest.ValidSHA256(rv.hash) || (rv.mac == "") != (rv.keyID == "") {
		return rv, false
	}
	rv.event, rv.tenant, rv.proposalID, rv.data = env.event, env.tenant, env.proposalID, env.data
	rv.chain = Chain{N: env.n, Prev: string(env.prev)}
	return rv, true
}

// validStamp reports whether time.Time's JSON decoding takes the string
// s (unquoted) as DecodeRecord's decoder hands it over.
func validStamp(s []byte) bool {
	var buf [64]byte
	if len(s)+2 > len(buf) {
		return false
	}
	q := append(append(append(buf[:0], '"'), s...), '"')
	var t time.Time
	return t.UnmarshalJSON(q) == nil
}

// isAuditSubject reports whether subject is wire.AuditSubject(tenant,
// event), without building it.
func isAuditSubject(subject string, tenant, event []byte) bool {
	p := wire.AuditSubjectPrefix
	return len(subject) == len(p)+len(tenant)+1+len(event) &&
		subject[:len(p)] == p && subject[len(p):len(p)+len(tenant)] == string(tenant) &&
		subject[len(p)+len(tenant)] == '.' && subject[len(p)+len(tenant)+1:] == string(event)
}
