package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/jsonscan"
	"github.com/gated/gated/internal/jsonw"
)

// Records of version 2 (legacy): written by gated before version 3, read
// and verified as before, never written. Their events are rebuilt from
// the stored members (expandV2), the rebuilt bytes covered by the hash
// only through what they were rebuilt from; a record of version 3 stores
// every event whole instead (whole.go). Nothing here is on the path of a
// new record.

// legacyVersion is the schema version of legacy records of version 2.
const legacyVersion = 2

// v2Start is how gated began a body of version 2.
var v2Start = []byte(`{"v":2,`)

// A version-2 body is one JSON object:
//
//	{"v":2,"tenant":T,"chain":{"n":N,"prev":H},"proposal_id":P,"instance":I,
//	 "policy_revision":R,"head":{...},"events":[{"event":E,"at":A,...,"data":{...}},...]}
//
// The envelope (v, tenant, chain first, so that reading a chain needs no
// more) is what every event of the record shares. "head" holds once the
// members every event of a proposal starts its data with (headKeys); an
// event that lacks some of them lists them in "omit", one whose values
// differ carries its own "head". A verdict.decided event leaves out what
// the record says already, writing null in its place: proposal_id,
// tenant and action (the envelope's and the head's), policy and
// proposal_sha256 (rebuilt from the record's policy event and
// proposal.received); the grant.issued event before it folds
// into its "grant" member, {gid, kid, exp}, and the grant's token is not
// kept. Expanding a record (Record.Events) gives back every event, as a
// version-1 record of its own would have held it.

// headKeys are the members that every event of a proposal starts its
// data with (the engine's proposalEventData), quoted as they are written.
var headKeys = [...]string{`"action"`, `"operator"`, `"delivery"`, `"policy_eval_us"`}

func isHeadKey(k []byte) bool {
	for _, h := range headKeys {
		if string(k) == h {
			return true
		}
	}
	return false
}

// member is one member of a JSON object: its key as written, quotes
// included, and its value as written.
type member struct{ key, val []byte }

// splitMembers returns the top-level members of obj, a valid JSON object
// without white space outside its strings (compacted). ok is false for
// anything else.
func splitMembers(obj []byte) (ms []member, ok bool) {
	ms, ok = appendSplit(nil, obj)
	if !ok {
		return nil, false
	}
	return ms, true
}

// appendSplit appends the top-level members of obj, as splitMembers
// reads them, to ms. ok is false, and ms is to be dropped, for anything
// splitMembers refuses.
func appendSplit(ms []member, obj []byte) (_ []member, ok bool) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return ms, false
	}
	i := 1
	if obj[i] == '}' {
		return ms, i == len(obj)-1
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return ms, false
		}
		end := jsonscan.String(obj, i)
		if end < 0 || end >= len(obj) || obj[end] != ':' {
			return ms, false
		}
		key := obj[i:end]
		start := end + 1
		stop := jsonscan.Value(obj, start)
		if stop < 0 || stop >= len(obj) {
			return ms, false
		}
		if ms == nil {
			// Most objects of a record have a few members: allocate once.
			ms = make([]member, 0, 8)
		}
		ms = append(ms, member{key: key, val: obj[start:stop]})
		switch obj[stop] {
		case ',':
			i = stop + 1
		case '}':
			return ms, stop == len(obj)-1
		default:
			return ms, false
		}
	}
}

// appendMembers appends the members as one JSON object.
func appendMembers(dst []byte, ms ...[]member) []byte {
	dst = append(dst, '{')
	first := true
	for _, part := range ms {
		for _, m := range part {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, m.key...)
			dst = append(dst, ':')
			dst = append(dst, m.val...)
		}
	}
	return append(dst, '}')
}

func findMember(ms []member, key string) (int, bool) {
	for i, m := range ms {
		if string(m.key) == key {
			return i, true
		}
	}
	return -1, false
}

func quoted(s string) []byte { return jsonw.AppendString(nil, s) }

// isKey reports whether key, a member's key as written, is s as quoted
// writes it.
func isKey(key []byte, s string) bool {
	if !jsonw.Plain(s) {
		return string(key) == string(quoted(s))
	}
	return len(key) == len(s)+2 && key[0] == '"' && key[len(key)-1] == '"' && string(key[1:len(key)-1]) == s
}

// grantKeys are the members of a grant.issued event's data besides the
// head, in the order written.
var grantKeys = [...]string{`"exp"`, `"gid"`, `"kid"`, `"proposal_id"`, `"tenant"`}

// rebuiltKeys are the members of a verdict that its record may hold as
// null, meaning "the record's": a verdict never holds null in them.
var rebuiltKeys = [...]string{`"proposal_id"`, `"tenant"`, `"action"`, `"policy"`, `"proposal_sha256"`}

func isRebuilt(key string) bool {
	for _, k := range rebuiltKeys {
		if key == k {
			return true
		}
	}
	return false
}

// verdictFrom is what a verdict.decided event's left-out members are
// rebuilt from: the record's envelope and head, its last
// proposal.received before the verdict, and its last policy event.
type verdictFrom struct {
	env      gated.AuditEvent
	action   []byte
	received []member
	policy   []member
}

// member returns the rebuilt value of a verdict member.
func (f verdictFrom) member(key string) ([]byte, bool) {
	switch key {
	case `"proposal_id"`:
		return quoted(f.env.ProposalID), f.env.ProposalID != ""
	case `"tenant"`:
		return quoted(f.env.Tenant), true
	case `"action"`:
		return f.action, f.action != nil
	case `"proposal_sha256"`:
		if j, ok := findMember(f.received, `"sha256"`); ok {
			return f.received[j].val, true
		}
	case `"policy"`:
		return f.policyRef()
	}
	return nil, false
}

// policyRef is the verdict's policy section as the engine writes it from
// the record's policy event.
func (f verdictFrom) policyRef() ([]byte, bool) {
	if f.policy == nil {
		return nil, false
	}
	return f.policyRefJSON()
}

// policyRefJSON is policyRef through encoding/json, for any form of the
// policy event's members.
func (f verdictFrom) policyRefJSON() ([]byte, bool) {
	var pd struct {
		Denies []gated.Deny `json:"denies"`
		EvalUS int64        `json:"eval_us"`
		Review struct {
			Rule string `json:"rule"`
		} `json:"review"`
	}
	j, ok := findMember(f.policy, `"denies"`)
	if !ok || json.Unmarshal(f.policy[j].val, &pd.Denies) != nil || pd.Denies == nil {
		return nil, false
	}
	if j, ok := findMember(f.policy, `"eval_us"`); !ok || json.Unmarshal(f.policy[j].val, &pd.EvalUS) != nil {
		return nil, false
	}
	if j, ok := findMember(f.policy, `"review"`); ok && json.Unmarshal(f.policy[j].val, &pd.Review) != nil {
		return nil, false
	}
	doc, err := json.Marshal(gated.NewPolicyRef(pd.Denies, pd.Review.Rule, f.env.PolicyRevision, pd.EvalUS))
	if err != nil {
		return nil, false
	}
	return doc, true
}

// recordV2 is the wire form of a version-2 body, for the strict decoder.
type recordV2 struct {
	V              int             `json:"v"`
	Tenant         string          `json:"tenant"`
	Chain          *Chain          `json:"chain"`
	ProposalID     string          `json:"proposal_id,omitempty"`
	Instance       string          `json:"instance,omitempty"`
	PolicyRevision string          `json:"policy_revision,omitempty"`
	Head           json.RawMessage `json:"head,omitempty"`
	Events         []eventV2       `json:"events"`
}

// eventV2 is one event of a version-2 body.
type eventV2 struct {
	Event string          `json:"event"`
	At    time.Time       `json:"at"`
	Omit  []string        `json:"omit,omitempty"`
	Head  json.RawMessage `json:"head,omitempty"`
	Grant json.RawMessage `json:"grant,omitempty"`
	// Verbatim keeps a verdict's data as written, nulls included.
	Verbatim bool            `json:"verbatim,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// expandV2 checks a decoded version-2 body and returns its events as
// version-1 records of their own would hold them. Its errors say what is
// wrong; DecodeRecord wraps them. The events' data is written into
// *scratch when it has room and scratch is not nil, and *scratch is left
// holding the largest block written: the events are then the caller's
// until it hands *scratch to the next expansion.
func expandV2(b *recordV2, scratch *[]byte) ([]gated.AuditEvent, error) {
	if len(b.Events) == 0 {
		return nil, fmt.Errorf("the record holds no event")
	}
	x := newExpansion(b, scratch)
	defer x.done()
	var head []member
	if b.Head != nil {
		var ok bool
		if head, ok = x.split(b.Head); !ok {
			return nil, fmt.Errorf("head is not a JSON object")
		}
		for _, m := range head {
			if !isHeadKey(m.key) {
				return nil, fmt.Errorf("head member %s is not a head member", m.key)
			}
		}
	}
	env := gated.AuditEvent{V: gated.SchemaVersion, Tenant: b.Tenant, ProposalID: b.ProposalID, Instance: b.Instance, PolicyRevision: b.PolicyRevision}
	out := make([]gated.AuditEvent, 0, len(b.Events)+1)
	from := verdictFrom{env: env}
	if j, ok := findMember(head, `"action"`); ok {
		from.action = head[j].val
	}
	for i, e := range b.Events {
		if !validEventName(e.Event) {
			return nil, fmt.Errorf("event %d: %q is not an event name", i+1, e.Event)
		}
		own, err := x.eventHead(head, e)
		if err != nil {
			return nil, fmt.Errorf("event %d (%s): %w", i+1, e.Event, err)
		}
		var rest []member
		if e.Data != nil {
			var ok bool
			if rest, ok = x.split(e.Data); !ok {
				return nil, fmt.Errorf("event %d (%s): data is not a JSON object", i+1, e.Event)
			}
		}
		ev := env
		ev.Event, ev.At = e.Event, e.At
		switch e.Event {
		case gated.EventReceived:
			from.received = rest
		case gated.EventPolicyDecided, gated.EventPolicyRechecked:
			from.policy = rest
		case gated.EventVerdict:
			if e.Grant != nil {
				g, err := x.unfoldGrant(head, e, env)
				if err != nil {
					return nil, fmt.Errorf("event %d (%s): %w", i+1, e.Event, err)
				}
				out = append(out, g)
			}
			if e.Data != nil && !e.Verbatim {
				if rest, err = rebuildVerdict(rest, from); err != nil {
					return nil, fmt.Errorf("event %d (%s): %w", i+1, e.Event, err)
				}
			}
		}
		if (e.Grant != nil || e.Verbatim) && e.Event != gated.EventVerdict {
			return nil, fmt.Errorf("event %d (%s): only a %s folds a grant or is verbatim", i+1, e.Event, gated.EventVerdict)
		}
		if len(own) > 0 || e.Data != nil {
			ev.Data = x.data(own, rest)
		}
		out = append(out, ev)
	}
	return out, nil
}

// expansion holds what expanding one record makes: the members its
// objects split into and the events' data, in a few blocks rather than an
// allocation per object. A part handed out is capped, so appending to it
// cannot write into the next; a block that is full is left to the parts
// it holds and a new one started, so nothing is copied. The members are
// needed only while the record expands, so their block goes back to a
// pool for the next record; the data stays with the events.
type expansion struct {
	ms []member
	// first is the members' block the expansion started with, pooled
	// where it goes back to.
	first  []member
	pooled *[]member
	buf    []byte
	// scratch is the caller's block the data is written into, when it
	// gave one (expandV2).
	scratch *[]byte
}

// memberBlocks holds the members' blocks of the expansions done.
var memberBlocks = sync.Pool{New: func() any { return new([]member) }}

// newExpansion readies the blocks for b: an event's data is about its
// own bytes and the head's, and most objects have a few members. The
// data goes into *scratch when it has room.
func newExpansion(b *recordV2, scratch *[]byte) *expansion {
	size := 0
	for _, e := range b.Events {
		size += len(e.Data) + len(e.Head) + len(b.Head) + 2
		if e.Grant != nil {
			size += len(e.Grant) + len(b.Head) + len(b.Tenant) + len(b.ProposalID) + 64
		}
	}
	p := memberBlocks.Get().(*[]member)
	ms := (*p)[:0]
	if n := 6*len(b.Events) + 8; cap(ms) < n {
		ms = make([]member, 0, n)
	}
	x := &expansion{ms: ms, first: ms, pooled: p, scratch: scratch}
	if size += size / 4; scratch != nil && cap(*scratch) >= size {
		x.buf = (*scratch)[:0]
	} else {
		x.buf = make([]byte, 0, size)
	}
	return x
}

// done gives the larger of the members' blocks back, cleared, so that
// the pool holds no record's bytes.
func (x *expansion) done() {
	ms := x.first
	if cap(x.ms) > cap(ms) {
		ms = x.ms
	}
	ms = ms[:cap(ms)]
	clear(ms)
	*x.pooled, x.ms, x.first = ms[:0], nil, nil
	memberBlocks.Put(x.pooled)
	if x.scratch != nil && cap(x.buf) > cap(*x.scratch) {
		*x.scratch = x.buf[:0]
	}
}

// split splits a JSON object that may hold white space, as a forged
// record's may.
func (x *expansion) split(raw json.RawMessage) ([]member, bool) {
	if cap(x.ms)-len(x.ms) < 16 {
		// Room for an object of a few members: a new block, twice the
		// size, which done keeps for the next record.
		x.ms = make([]member, 0, 2*cap(x.ms)+16)
	}
	ms, ok := appendSplit(x.ms[len(x.ms):], raw)
	if !ok {
		var buf bytes.Buffer
		if json.Compact(&buf, raw) != nil {
			return nil, false
		}
		if ms, ok = appendSplit(x.ms[len(x.ms):], buf.Bytes()); !ok {
			return nil, false
		}
	}
	x.took(ms)
	return ms[:len(ms):len(ms)], true
}

// took notes that ms, appended to the free end of the members' block,
// is in use: in that block, or in the new one append moved it to.
func (x *expansion) took(ms []member) {
	if len(ms) == 0 {
		return
	}
	if n := len(x.ms); n < cap(x.ms) && &ms[0] == &x.ms[:n+1][n] {
		x.ms = x.ms[:n+len(ms)]
		return
	}
	x.ms = ms
}

// data is the members as one JSON object.
func (x *expansion) data(ms ...[]member) []byte {
	need := 2
	for _, part := range ms {
		for _, m := range part {
			need += len(m.key) + len(m.val) + 2
		}
	}
	x.room(need)
	n := len(x.buf)
	x.buf = appendMembers(x.buf, ms...)
	return x.buf[n:len(x.buf):len(x.buf)]
}

// room makes room for n more bytes of data.
func (x *expansion) room(n int) {
	if cap(x.buf)-len(x.buf) < n {
		x.buf = make([]byte, 0, max(n, cap(x.buf)))
	}
}

// eventHead is the head an event's data starts with: the record's,
// less the members it omits, or its own.
func (x *expansion) eventHead(head []member, e eventV2) ([]member, error) {
	if e.Head != nil {
		if e.Omit != nil {
			return nil, fmt.Errorf("both head and omit")
		}
		own, ok := x.split(e.Head)
		if !ok {
			return nil, fmt.Errorf("head is not a JSON object")
		}
		for _, m := range own {
			if !isHeadKey(m.key) {
				return nil, fmt.Errorf("head member %s is not a head member", m.key)
			}
		}
		return own, nil
	}
	if len(e.Omit) == 0 {
		return head, nil
	}
	own := x.ms[len(x.ms):]
	left := 0
	for _, m := range head {
		drop := false
		for _, k := range e.Omit {
			if isKey(m.key, k) {
				drop = true
			}
		}
		if drop {
			left++
			continue
		}
		own = append(own, m)
	}
	if left != len(e.Omit) {
		return nil, fmt.Errorf("omit names members the record's head does not have")
	}
	x.took(own)
	return own[:len(own):len(own)], nil
}

// unfoldGrant is the grant.issued event a verdict event folded.
func (x *expansion) unfoldGrant(head []member, e eventV2, env gated.AuditEvent) (gated.AuditEvent, error) {
	var g foldedGrant
	if err := json.Unmarshal(e.Grant, &g); err != nil {
		g = foldedGrant{}
	}
	if g.GID == "" || g.KID == "" || g.Exp == nil {
		return gated.AuditEvent{}, fmt.Errorf("grant is not {gid, kid, exp}")
	}
	size := len(g.GID) + len(g.KID) + len(env.ProposalID) + len(env.Tenant) + 96
	for _, m := range head {
		size += len(m.key) + len(m.val) + 2
	}
	x.room(size)
	n := len(x.buf)
	data := appendMembers(x.buf, head)
	data = data[:len(data)-1]
	if len(head) > 0 {
		data = append(data, ',')
	}
	data = append(data, `"exp":`...)
	data = strconv.AppendInt(data, *g.Exp, 10)
	data = append(data, `,"gid":`...)
	data = jsonw.AppendString(data, g.GID)
	data = append(data, `,"kid":`...)
	data = jsonw.AppendString(data, g.KID)
	data = append(data, `,"proposal_id":`...)
	data = jsonw.AppendString(data, env.ProposalID)
	data = append(data, `,"tenant":`...)
	data = jsonw.AppendString(data, env.Tenant)
	data = append(data, '}')
	x.buf = data
	ev := env
	ev.Event, ev.At, ev.Data = gated.EventGrantIssued, e.At, data[n:len(data):len(data)]
	return ev, nil
}

// foldedGrant is a verdict event's grant member.
type foldedGrant struct {
	GID string `json:"gid"`
	KID string `json:"kid"`
	Exp *int64 `json:"exp"`
}

// rebuildVerdict puts back the members trimVerdict left out of a
// verdict's data, in rest itself: a part of the expansion's members that
// nothing else holds.
func rebuildVerdict(rest []member, from verdictFrom) ([]member, error) {
	for i, m := range rest {
		if string(m.val) != "null" || !isRebuilt(string(m.key)) {
			continue
		}
		want, ok := from.member(string(m.key))
		if !ok {
			return nil, fmt.Errorf("the verdict's %s is the record's, and the record has none", m.key)
		}
		rest[i].val = want
	}
	return rest, nil
}
