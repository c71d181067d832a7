package audit

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/gated/gated"

	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/jsonw"
)

// The writer of legacy records of version 2, as gated wrote them before
// version 3: the tests write such records to hold the legacy reader to
// them.

// compactEvent is one event of a record being encoded.
type compactEvent struct {
	ev   gated.AuditEvent
	head []member // the leading members of ev.Data that are head members
	rest []member // the rest of ev.Data
	// grant, on a verdict.decided event, is the folded grant.issued
	// event's {gid, kid, exp}.
	grant []member
	// folded is true for a grant.issued event folded into the verdict
	// after it.
	folded bool
	// verbatim is set on a verdict.decided event whose data holds null
	// where a record writes null for "the record's": it is kept as it is.
	verbatim bool
}

// encodeV2 encodes evs, events of one envelope in the order recorded,
// as one version-2 record; checked says each event's data was checked to
// be JSON already (checkEvent).
func encodeV2(evs []gated.AuditEvent, checked bool) (encodedEvent, error) {
	if len(evs) == 0 {
		return encodedEvent{}, fmt.Errorf("encoding an audit record: no event")
	}
	env := evs[0]
	if !validAuditTenant(env.Tenant) {
		return encodedEvent{}, fmt.Errorf("audit event %s: tenant %q is not a tenant token", env.Event, env.Tenant)
	}
	ces := make([]compactEvent, len(evs))
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
		ev.Data = data
		ce := compactEvent{ev: ev}
		if data != nil {
			ms, ok := splitMembers(data)
			if !ok {
				return encodedEvent{}, fmt.Errorf("encoding audit event %s: data is not a JSON object", ev.Event)
			}
			n := 0
			for n < len(ms) && isHeadKey(ms[n].key) {
				n++
			}
			ce.head, ce.rest = ms[:n:n], ms[n:]
		}
		ces[i] = ce
	}
	// The record's head: every head member in the order first met, with
	// its first value.
	var head []member
	for _, ce := range ces {
		for _, m := range ce.head {
			if _, ok := findMember(head, string(m.key)); !ok {
				head = append(head, m)
			}
		}
	}
	for i := range ces {
		foldGrant(ces, i, head, env)
	}
	for i := range ces {
		if ces[i].ev.Event == gated.EventVerdict {
			trimVerdict(ces, i, head, env)
		}
	}

	dst := make([]byte, 0, 512)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, legacyVersion, 10)
	dst = append(dst, `,"tenant":`...)
	dst = jsonw.AppendString(dst, env.Tenant)
	pre := dst
	post := make([]byte, 0, 256+sizeOf(evs))
	if env.ProposalID != "" {
		post = append(post, `,"proposal_id":`...)
		post = jsonw.AppendString(post, env.ProposalID)
	}
	if env.Instance != "" {
		post = append(post, `,"instance":`...)
		post = jsonw.AppendString(post, env.Instance)
	}
	if env.PolicyRevision != "" {
		post = append(post, `,"policy_revision":`...)
		post = jsonw.AppendString(post, env.PolicyRevision)
	}
	if len(head) > 0 {
		post = append(post, `,"head":`...)
		post = appendMembers(post, head)
	}
	post = append(post, `,"events":[`...)
	first := true
	for _, ce := range ces {
		if ce.folded {
			continue
		}
		if !first {
			post = append(post, ',')
		}
		first = false
		post = append(post, `{"event":`...)
		post = jsonw.AppendString(post, ce.ev.Event)
		at, err := ce.ev.At.MarshalJSON()
		if err != nil {
			return encodedEvent{}, fmt.Errorf("encoding audit event %s: %w", ce.ev.Event, err)
		}
		post = append(post, `,"at":`...)
		post = append(post, at...)
		if omit, ok := omitted(head, ce.head); ok {
			if len(omit) > 0 {
				post = append(post, `,"omit":[`...)
				for j, k := range omit {
					if j > 0 {
						post = append(post, ',')
					}
					post = append(post, k...)
				}
				post = append(post, ']')
			}
		} else {
			post = append(post, `,"head":`...)
			post = appendMembers(post, ce.head)
		}
		if ce.grant != nil {
			post = append(post, `,"grant":`...)
			post = appendMembers(post, ce.grant)
		}
		if ce.verbatim {
			post = append(post, `,"verbatim":true`...)
		}
		if ce.ev.Data != nil {
			post = append(post, `,"data":`...)
			post = appendMembers(post, ce.rest)
		}
		post = append(post, '}')
	}
	post = append(post, "]}"...)
	last := evs[len(evs)-1].Event
	return encodedEvent{v: legacyVersion, tenant: env.Tenant, subject: wire.AuditSubject(env.Tenant, last), pre: pre, post: post}, nil
}

// omitted returns the keys of head that own leaves out, when own is head
// with those members left out (same values, same order); ok is false
// when own is not.
func omitted(head, own []member) (omit [][]byte, ok bool) {
	j := 0
	for _, h := range head {
		if j < len(own) && bytes.Equal(own[j].key, h.key) {
			if !bytes.Equal(own[j].val, h.val) {
				return nil, false
			}
			j++
			continue
		}
		omit = append(omit, h.key)
	}
	return omit, j == len(own)
}

// foldGrant folds event i, when it is a grant.issued event that the
// verdict.decided event after it can carry whole: its data is the
// record's head and the grant's gid, kid and exp, with the envelope's
// tenant and proposal.
func foldGrant(ces []compactEvent, i int, head []member, env gated.AuditEvent) {
	if i+1 >= len(ces) || ces[i].ev.Event != gated.EventGrantIssued || ces[i+1].ev.Event != gated.EventVerdict {
		return
	}
	g := ces[i]
	if omit, ok := omitted(head, g.head); !ok || len(omit) > 0 || len(g.rest) != len(grantKeys) {
		return
	}
	for j, k := range grantKeys {
		if string(g.rest[j].key) != k {
			return
		}
	}
	if !bytes.Equal(g.rest[3].val, quoted(env.ProposalID)) || !bytes.Equal(g.rest[4].val, quoted(env.Tenant)) {
		return
	}
	ces[i].folded = true
	ces[i+1].grant = []member{{key: []byte(`"gid"`), val: g.rest[1].val}, {key: []byte(`"kid"`), val: g.rest[2].val}, {key: []byte(`"exp"`), val: g.rest[0].val}}
}

// trimVerdict leaves out of verdict event i what rebuildVerdict gives
// back from the rest of the record: each member is left out only when
// the rebuilt one is the same, byte for byte.
func trimVerdict(ces []compactEvent, i int, head []member, env gated.AuditEvent) {
	ce := &ces[i]
	if ce.ev.Data == nil {
		return
	}
	for _, key := range rebuiltKeys {
		if j, ok := findMember(ce.rest, key); ok && string(ce.rest[j].val) == "null" {
			// null is the record's mark for "rebuilt": keep the data as
			// it is, and say so.
			ce.verbatim = true
			return
		}
	}
	from := verdictSources(ces[:i], head, env)
	rest := make([]member, 0, len(ce.rest))
	for _, m := range ce.rest {
		switch key := string(m.key); {
		case key == `"grant"` && ce.grant != nil:
			continue // the token: the stored verdict keeps it
		case isRebuilt(key):
			if want, ok := from.member(key); ok && bytes.Equal(want, m.val) {
				rest = append(rest, member{key: m.key, val: []byte("null")})
				continue
			}
		}
		rest = append(rest, m)
	}
	ce.rest = rest
}

func verdictSources(before []compactEvent, head []member, env gated.AuditEvent) verdictFrom {
	f := verdictFrom{env: env}
	if j, ok := findMember(head, `"action"`); ok {
		f.action = head[j].val
	}
	for _, ce := range before {
		switch ce.ev.Event {
		case gated.EventReceived:
			f.received = ce.rest
		case gated.EventPolicyDecided, gated.EventPolicyRechecked:
			f.policy = ce.rest
		}
	}
	return f
}
