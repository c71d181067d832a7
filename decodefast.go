package gated

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/gated/gated/internal/jsonscan"
)

// decodeFast reads a proposal in one pass over data, without reflection,
// in the forms fleets write: any white space, members in any order, every
// key a field of the schema byte for byte and written without escapes,
// strings with or without escapes. It returns ok false for anything else
// (a key it does not know or meets twice, a value of the wrong type,
// criteria or a run, bytes that are not JSON), and DecodeProposal then
// reads data with encoding/json and the key check, which word the error.
// When ok is true, p is what those give (FuzzDecodeFast holds the two
// readings equal). data must be valid UTF-8, as DecodeProposal checks
// first.
func decodeFast(data []byte) (p *Proposal, ok bool) {
	r := fastReader{data: data}
	p = new(Proposal)
	if !r.object(p.member) {
		return nil, false
	}
	r.space()
	return p, r.i == len(data)
}

// member reads the value of the proposal's member key.
func (p *Proposal) member(r *fastReader, key []byte) bool {
	switch string(key) {
	case "v":
		return r.integer(&p.V)
	case "id":
		return r.stringInto(&p.ID)
	case "tenant":
		return r.stringInto(&p.Tenant)
	case "kind":
		return r.stringInto((*string)(&p.Kind))
	case "action":
		return r.stringInto(&p.Action)
	case "class":
		return r.stringInto((*string)(&p.Class))
	case "target":
		if r.null() {
			p.Target = nil
			return true
		}
		m, ok := r.anyObject()
		p.Target = m
		return ok
	case "reason":
		return r.stringInto(&p.Reason)
	case "blast_radius":
		return r.stringInto((*string)(&p.BlastRadius))
	case "operator":
		if r.null() {
			p.Operator = nil
			return true
		}
		p.Operator = new(Principal)
		return r.object(func(r *fastReader, key []byte) bool {
			switch string(key) {
			case "id":
				return r.stringInto(&p.Operator.ID)
			case "roles":
				return r.strings(&p.Operator.Roles)
			}
			return false
		})
	case "requested_by":
		if r.null() {
			p.RequestedBy = nil
			return true
		}
		p.RequestedBy = new(RequestedBy)
		return r.object(func(r *fastReader, key []byte) bool {
			switch string(key) {
			case "agent":
				return r.stringInto(&p.RequestedBy.Agent)
			case "session":
				return r.stringInto(&p.RequestedBy.Session)
			}
			return false
		})
	case "incident_id":
		return r.stringInto(&p.IncidentID)
	case "context_summary":
		return r.stringInto(&p.ContextSummary)
	case "flags":
		if r.null() {
			return true
		}
		return r.object(func(r *fastReader, key []byte) bool {
			switch string(key) {
			case "skip_review":
				return r.boolean(&p.Flags.SkipReview)
			case "force_approve":
				return r.boolean(&p.Flags.ForceApprove)
			case "force_approve_no_sop":
				return r.boolean(&p.Flags.ForceApproveNoSOP)
			case "user_confirmed":
				return r.boolean(&p.Flags.UserConfirmed)
			}
			return false
		})
	case "reviewer":
		return r.stringInto(&p.Reviewer)
	case "labels":
		return r.strings(&p.Labels)
	case "criteria":
		// Run reviews are read by encoding/json; an action names none.
		switch {
		case r.null():
			p.Criteria = nil
			return true
		case r.emptyArray():
			p.Criteria = []Criterion{}
			return true
		}
		return false
	case "run":
		if r.null() {
			p.Run = nil
			return true
		}
		return false
	case "created_at":
		if r.null() {
			p.CreatedAt = nil
			return true
		}
		// encoding/json hands a time its literal, quotes and escapes
		// included; so does this.
		r.space()
		start := r.i
		if !r.skipString() {
			return false
		}
		t := new(time.Time)
		if t.UnmarshalJSON(r.data[start:r.i]) != nil {
			return false
		}
		p.CreatedAt = t
		return true
	}
	return false
}

// fastReader reads JSON from data at i. Every method reads one value
// after any white space and reports whether it was the form it reads.
type fastReader struct {
	data  []byte
	i     int
	depth int
}

// maxFastDepth bounds the nesting decodeFast reads in free-form values;
// deeper ones are left to encoding/json.
const maxFastDepth = 32

func (r *fastReader) space() { r.i = jsonscan.Space(r.data, r.i) }

// next reads a byte c after white space.
func (r *fastReader) next(c byte) bool {
	r.space()
	if r.i < len(r.data) && r.data[r.i] == c {
		r.i++
		return true
	}
	return false
}

// word reads the literal w (null, true, false) after white space.
func (r *fastReader) word(w string) bool {
	r.space()
	end := jsonscan.Literal(r.data, r.i, w)
	if end < 0 {
		return false
	}
	r.i = end
	return true
}

func (r *fastReader) null() bool { return r.word("null") }

func (r *fastReader) emptyArray() bool {
	start := r.i
	if r.next('[') && r.next(']') {
		return true
	}
	r.i = start
	return false
}

// object reads an object, calling member with each key; a key is read
// only when written in printable ASCII without escapes, and a key met
// twice ends the read. member reads the value and returns false for a
// key it does not know.
func (r *fastReader) object(member func(r *fastReader, key []byte) bool) bool {
	if !r.next('{') {
		return false
	}
	if r.next('}') {
		return true
	}
	var seenBuf [24][]byte // a proposal has 18 members
	seen := seenBuf[:0]
	for {
		key, ok := r.key()
		if !ok {
			return false
		}
		for _, k := range seen {
			if bytes.Equal(k, key) {
				return false
			}
		}
		seen = append(seen, key)
		if !r.next(':') || !member(r, key) {
			return false
		}
		if r.next('}') {
			return true
		}
		if !r.next(',') {
			return false
		}
	}
}

// key reads a key written in printable ASCII without escapes, as every
// key of the schema is, and returns its bytes; any other key is left to
// encoding/json.
func (r *fastReader) key() ([]byte, bool) {
	r.space()
	end := jsonscan.PlainString(r.data, r.i)
	if end < 0 {
		return nil, false
	}
	key := r.data[r.i+1 : end-1]
	r.i = end
	return key, true
}

// skipString reads past a string at r.i, after white space, and reports
// whether it was a valid JSON string.
func (r *fastReader) skipString() bool {
	r.space()
	end := jsonscan.String(r.data, r.i)
	if end < 0 {
		return false
	}
	r.i = end
	return true
}

// str reads a string; one with escapes is unquoted by encoding/json.
func (r *fastReader) str() (string, bool) {
	r.space()
	start := r.i
	if !r.skipString() {
		return "", false
	}
	lit := r.data[start:r.i]
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), true
	}
	var s string
	if json.Unmarshal(lit, &s) != nil {
		return "", false
	}
	return s, true
}

// stringInto reads a string into *s; null leaves *s as it is, as
// encoding/json does.
func (r *fastReader) stringInto(s *string) bool {
	if r.null() {
		return true
	}
	v, ok := r.str()
	*s = v
	return ok
}

// boolean reads true or false into *b; null leaves *b as it is.
func (r *fastReader) boolean(b *bool) bool {
	switch {
	case r.null():
	case r.word("true"):
		*b = true
	case r.word("false"):
		*b = false
	default:
		return false
	}
	return true
}

// strings reads an array of strings into *to; null makes it nil, [] an
// empty slice, as encoding/json does. A null item is left to it.
func (r *fastReader) strings(to *[]string) bool {
	if r.null() {
		*to = nil
		return true
	}
	if !r.next('[') {
		return false
	}
	*to = []string{}
	if r.next(']') {
		return true
	}
	for {
		s, ok := r.str()
		if !ok {
			return false
		}
		*to = append(*to, s)
		if r.next(']') {
			return true
		}
		if !r.next(',') {
			return false
		}
	}
}

// integer reads an integer written without a fraction or an exponent
// into *n; null leaves *n as it is.
func (r *fastReader) integer(n *int) bool {
	if r.null() {
		return true
	}
	lit, ok := r.number()
	if !ok || bytes.ContainsAny(lit, ".eE") {
		return false
	}
	v, err := strconv.Atoi(string(lit))
	*n = v
	return err == nil
}

// number reads a number as JSON's grammar has it and returns its literal.
func (r *fastReader) number() ([]byte, bool) {
	r.space()
	start := r.i
	end := jsonscan.Number(r.data, start)
	if end < 0 {
		return nil, false
	}
	r.i = end
	return r.data[start:end], true
}

// anyValue reads any value as encoding/json reads one into an interface
// with UseNumber: map[string]any, []any, string, json.Number, bool or
// nil.
func (r *fastReader) anyValue() (any, bool) {
	r.space()
	if r.i >= len(r.data) {
		return nil, false
	}
	switch r.data[r.i] {
	case '{':
		m, ok := r.anyObject()
		return m, ok
	case '[':
		return r.anyArray()
	case '"':
		return r.str()
	case 't':
		return true, r.word("true")
	case 'f':
		return false, r.word("false")
	case 'n':
		return nil, r.null()
	}
	lit, ok := r.number()
	return json.Number(lit), ok
}

// anyObject reads an object into a map; a key with escapes or bytes
// outside printable ASCII, a key twice or nesting deeper than
// maxFastDepth ends the read.
func (r *fastReader) anyObject() (map[string]any, bool) {
	if r.depth++; r.depth > maxFastDepth {
		return nil, false
	}
	defer func() { r.depth-- }()
	if !r.next('{') {
		return nil, false
	}
	m := map[string]any{}
	if r.next('}') {
		return m, true
	}
	for {
		key, ok := r.key()
		if !ok {
			return nil, false
		}
		if _, dup := m[string(key)]; dup || !r.next(':') {
			return nil, false
		}
		v, ok := r.anyValue()
		if !ok {
			return nil, false
		}
		m[string(key)] = v
		if r.next('}') {
			return m, true
		}
		if !r.next(',') {
			return nil, false
		}
	}
}

func (r *fastReader) anyArray() ([]any, bool) {
	if r.depth++; r.depth > maxFastDepth {
		return nil, false
	}
	defer func() { r.depth-- }()
	if !r.next('[') {
		return nil, false
	}
	out := []any{}
	if r.next(']') {
		return out, true
	}
	for {
		v, ok := r.anyValue()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if r.next(']') {
			return out, true
		}
		if !r.next(',') {
			return nil, false
		}
	}
}
