package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/jsonscan"
	"github.com/gated/gated/internal/jsonw"
)

// RecordVersion is the schema version of the records gated writes: one
// record holds the events of a proposal that were recorded together
// (docs/AUDIT.md). Records of version 1, one event each, are still read.
const RecordVersion = 2

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

// compactEvent is one event of a record being encoded.
type compactEvent struct {
	ev   engine.AuditEvent
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

// normalizeData makes an event's data what a record holds: absent when
// empty or null, an object (anything else is kept whole under "detail"),
// compacted. valid says the data was checked to be JSON already, as the
// Writer checks every event it is given (checkEvent).
func normalizeData(ev engine.AuditEvent, valid bool) (json.RawMessage, error) {
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
		return t, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(t))
	if err := json.Compact(&buf, t); err != nil {
		return nil, fmt.Errorf("encoding audit event %s: data is not JSON: %w", ev.Event, err)
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

// sameEnvelope reports whether a and b may share a record.
func sameEnvelope(a, b engine.AuditEvent) bool {
	return a.Tenant == b.Tenant && a.ProposalID == b.ProposalID && a.Instance == b.Instance && a.PolicyRevision == b.PolicyRevision
}

// encodeRecord encodes evs, events of one envelope in the order recorded,
// as one version-2 record; checked says each event's data was checked to
// be JSON already (checkEvent).
func encodeRecord(evs []engine.AuditEvent, checked bool) (encodedEvent, error) {
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
		if ces[i].ev.Event == engine.EventVerdict {
			trimVerdict(ces, i, head, env)
		}
	}

	dst := make([]byte, 0, 512)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, RecordVersion, 10)
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
	return encodedEvent{v: RecordVersion, tenant: env.Tenant, subject: wire.AuditSubject(env.Tenant, last), pre: pre, post: post}, nil
}

func sizeOf(evs []engine.AuditEvent) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.Data) + 64
	}
	return n
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

// grantKeys are the members of a grant.issued event's data besides the
// head, in the order written.
var grantKeys = [...]string{`"exp"`, `"gid"`, `"kid"`, `"proposal_id"`, `"tenant"`}

// foldGrant folds event i, when it is a grant.issued event that the
// verdict.decided event after it can carry whole: its data is the
// record's head and the grant's gid, kid and exp, with the envelope's
// tenant and proposal.
func foldGrant(ces []compactEvent, i int, head []member, env engine.AuditEvent) {
	if i+1 >= len(ces) || ces[i].ev.Event != engine.EventGrantIssued || ces[i+1].ev.Event != engine.EventVerdict {
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
func trimVerdict(ces []compactEvent, i int, head []member, env engine.AuditEvent) {
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
	env      engine.AuditEvent
	action   []byte
	received []member
	policy   []member
}

func verdictSources(before []compactEvent, head []member, env engine.AuditEvent) verdictFrom {
	f := verdictFrom{env: env}
	if j, ok := findMember(head, `"action"`); ok {
		f.action = head[j].val
	}
	for _, ce := range before {
		switch ce.ev.Event {
		case engine.EventReceived:
			f.received = ce.rest
		case engine.EventPolicyDecided, engine.EventPolicyRechecked:
			f.policy = ce.rest
		}
	}
	return f
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
	if doc, ok := f.policyRefFast(); ok {
		return doc, true
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

// policyRefFast is policyRef without reflection, for a policy event in
// the form the engine writes: denies a compact list of {"rule","message"}
// whose strings encoding/json writes as they are, eval_us an integer,
// review's rule such a string. ok is false for any other form, which
// policyRefJSON reads; FuzzPolicyRef holds the two equal. Every write
// and every read of a trimmed verdict rebuilds its policy section, so
// this is on the path of each proposal.
func (f verdictFrom) policyRefFast() ([]byte, bool) {
	j, ok := findMember(f.policy, `"denies"`)
	if !ok {
		return nil, false
	}
	denies := f.policy[j].val
	// distinct are the distinct rules of the denies, in order.
	var distinctBuf [2 * gated.MaxPolicyRules][]byte
	distinct := distinctBuf[:0]
	if string(denies) != "[]" {
		if len(denies) < 2 || denies[0] != '[' || denies[len(denies)-1] != ']' {
			return nil, false
		}
		for rest := denies[1 : len(denies)-1]; ; {
			rule, after, ok := cutDeny(rest)
			if !ok {
				return nil, false
			}
			dup := false
			for _, r := range distinct {
				if bytes.Equal(r, rule) {
					dup = true
					break
				}
			}
			if !dup {
				distinct = append(distinct, rule)
			}
			if len(after) == 0 {
				break
			}
			if after[0] != ',' {
				return nil, false
			}
			rest = after[1:]
		}
	}
	j, ok = findMember(f.policy, `"eval_us"`)
	if !ok {
		return nil, false
	}
	evalUS, err := strconv.ParseInt(string(f.policy[j].val), 10, 64)
	if err != nil {
		return nil, false
	}
	var route []byte
	if j, ok := findMember(f.policy, `"review"`); ok && string(f.policy[j].val) != "null" {
		ms, ok := splitMembers(f.policy[j].val)
		if !ok && string(f.policy[j].val) != "{}" {
			return nil, false
		}
		found := false
		for _, m := range ms {
			switch {
			case string(m.key) == `"rule"` && !found:
				if route, ok = verbatimString(m.val); !ok {
					return nil, false
				}
				found = true
			case bytes.EqualFold(m.key, []byte(`"rule"`)) || bytes.IndexByte(m.key, '\\') >= 0:
				// encoding/json would read it as the rule too.
				return nil, false
			}
		}
	}
	rules := distinct[:min(len(distinct), gated.MaxPolicyRules)]
	out := make([]byte, 0, len(denies)+len(f.env.PolicyRevision)+96)
	out = append(out, `{"denies":`...)
	out = append(out, denies...)
	if len(rules) > 0 {
		out = append(out, `,"rules":[`...)
		for i, r := range rules {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, '"')
			out = append(out, r[:min(len(r), gated.MaxPolicyRuleLen)]...)
			out = append(out, '"')
		}
		out = append(out, ']')
	}
	if more := len(distinct) - len(rules); more > 0 {
		out = append(out, `,"rules_more":`...)
		out = strconv.AppendInt(out, int64(more), 10)
	}
	if len(route) > 0 {
		out = append(out, `,"route":"`...)
		out = append(out, route[:min(len(route), gated.MaxPolicyRuleLen)]...)
		out = append(out, '"')
	}
	out = append(out, `,"revision":`...)
	out = jsonw.AppendString(out, f.env.PolicyRevision)
	out = append(out, `,"eval_us":`...)
	out = strconv.AppendInt(out, evalUS, 10)
	return append(out, '}'), true
}

// cutDeny reads a deny written {"rule":R,"message":M}, both strings that
// verbatimString takes, at the start of data, and returns R's bytes and what
// follows the deny.
func cutDeny(data []byte) (rule, after []byte, ok bool) {
	const ruleKey, messageKey = `{"rule":`, `,"message":`
	if !bytes.HasPrefix(data, []byte(ruleKey)) {
		return nil, nil, false
	}
	data = data[len(ruleKey):]
	end := jsonscan.String(data, 0)
	if end < 0 {
		return nil, nil, false
	}
	if rule, ok = verbatimString(data[:end]); !ok || !bytes.HasPrefix(data[end:], []byte(messageKey)) {
		return nil, nil, false
	}
	data = data[end+len(messageKey):]
	if end = jsonscan.String(data, 0); end < 0 || end >= len(data) || data[end] != '}' {
		return nil, nil, false
	}
	if !canonicalString(data[:end]) {
		return nil, nil, false
	}
	return rule, data[end+1:], true
}

// canonicalString reports whether encoding/json writes the string the
// JSON string s decodes to back as s: printable ASCII with a quote, a
// backslash, a line break or a tab escaped the short way and <, > and &
// as \u003c, \u003e and \u0026. A policy's messages quote what they
// refuse, so they are read this way; any other form (a character
// outside ASCII, another escape) is left to encoding/json.
func canonicalString(s []byte) bool {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return false
	}
	s = s[1 : len(s)-1]
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			rest := s[i+1:]
			switch {
			case len(rest) > 0 && (rest[0] == '"' || rest[0] == '\\' || rest[0] == 'n' || rest[0] == 'r' || rest[0] == 't'):
				i++
			case bytes.HasPrefix(rest, []byte("u003c")) || bytes.HasPrefix(rest, []byte("u003e")) || bytes.HasPrefix(rest, []byte("u0026")):
				i += 5
			default:
				return false
			}
		case c < 0x20 || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '&':
			return false
		}
	}
	return true
}

// verbatimString returns the bytes of the JSON string s when encoding/json
// writes them back as they are: printable ASCII without a quote, a
// backslash, or the <, > and & it escapes.
func verbatimString(s []byte) ([]byte, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return nil, false
	}
	s = s[1 : len(s)-1]
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return nil, false
		}
	}
	return s, true
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
func expandV2(b *recordV2, scratch *[]byte) ([]engine.AuditEvent, error) {
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
	env := engine.AuditEvent{V: gated.SchemaVersion, Tenant: b.Tenant, ProposalID: b.ProposalID, Instance: b.Instance, PolicyRevision: b.PolicyRevision}
	out := make([]engine.AuditEvent, 0, len(b.Events)+1)
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
		case engine.EventReceived:
			from.received = rest
		case engine.EventPolicyDecided, engine.EventPolicyRechecked:
			from.policy = rest
		case engine.EventVerdict:
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
		if (e.Grant != nil || e.Verbatim) && e.Event != engine.EventVerdict {
			return nil, fmt.Errorf("event %d (%s): only a %s folds a grant or is verbatim", i+1, e.Event, engine.EventVerdict)
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
func (x *expansion) unfoldGrant(head []member, e eventV2, env engine.AuditEvent) (engine.AuditEvent, error) {
	g, ok := scanGrant(e.Grant)
	if !ok {
		g = foldedGrant{}
		if err := json.Unmarshal(e.Grant, &g); err != nil {
			g = foldedGrant{}
		}
	}
	if g.GID == "" || g.KID == "" || g.Exp == nil {
		return engine.AuditEvent{}, fmt.Errorf("grant is not {gid, kid, exp}")
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
	ev.Event, ev.At, ev.Data = engine.EventGrantIssued, e.At, data[n:len(data):len(data)]
	return ev, nil
}

// foldedGrant is a verdict event's grant member.
type foldedGrant struct {
	GID string `json:"gid"`
	KID string `json:"kid"`
	Exp *int64 `json:"exp"`
}

// scanGrant reads a grant member in the form encodeRecord writes,
// {"gid":G,"kid":K,"exp":N} with G and K of printable ASCII without
// escapes and N a plain integer, as encoding/json reads it into a
// foldedGrant; ok is false for any other form, which the caller gives to
// encoding/json (FuzzScanGrant holds the two equal).
func scanGrant(raw []byte) (g foldedGrant, ok bool) {
	s := v2scanner{buf: raw}
	if !s.lit(`{"gid":`) {
		return g, false
	}
	if g.GID, ok = s.str(); !ok || !s.lit(`,"kid":`) {
		return g, false
	}
	if g.KID, ok = s.str(); !ok || !s.lit(`,"exp":`) {
		return g, false
	}
	num := s.i
	s.lit("-")
	if _, ok = s.uint(); !ok || s.i != len(raw)-1 || raw[s.i] != '}' {
		return g, false
	}
	n, err := strconv.ParseInt(string(raw[num:s.i]), 10, 64)
	if err != nil {
		return g, false
	}
	g.Exp = &n
	return g, true
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
