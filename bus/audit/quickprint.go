package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"reflect"
	"strconv"
	"strings"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/jsonscan"
)

// quickPrint is a digest of a verdict's bytes that the verdict check
// compares before it decodes anything: the tenant and proposal id it
// belongs to, then each top-level member of the verdict's JSON, key and
// value as written, in order, but those the side leaves out (recordDropped,
// storedDropped). Two verdicts with the same quick print decode to the
// same gated.Verdict, audit_seq aside: the same members in the same order
// decode the same, and a member left out sets no field of a verdict, or
// sets audit_seq only. So equal quick prints are a match. Different ones
// are not a mismatch: the check then compares the decoded verdicts
// (printVerdict), as it always did.
type quickPrint [16]byte

// recordDropped are the members a verdict.decided record's data holds
// besides the verdict (every event of a proposal carries them; see
// gated.AuditHead), and audit_seq; storedDropped is
// audit_seq, which the stored verdict has and the record's verdict has as
// 0. A member is left out only when no field of gated.Verdict takes it
// (encoding/json matches keys to fields without regard to case), so
// leaving it out changes nothing the verdict decodes to.
var (
	recordDropped = droppable("operator", "delivery", "policy_eval_us")
	storedDropped = droppable()
)

// droppable is the set of keys, quoted as JSON writes them, that a quick
// print leaves out: audit_seq and those of names that are no field of
// gated.Verdict.
func droppable(names ...string) map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeFor[gated.Verdict]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" {
			name = t.Field(i).Name
		}
		fields[strings.ToLower(name)] = true
	}
	out := map[string]bool{`"audit_seq"`: true}
	for _, n := range names {
		if !fields[strings.ToLower(n)] {
			out[`"`+n+`"`] = true
		}
	}
	return out
}

// quickPrintOf returns the quick print of doc, a verdict's JSON object,
// as the verdict of tenant's proposal id, leaving out the members in drop.
// ok is false when doc is not a JSON object, or when an audit_seq member
// left out is not a plain unsigned integer (decoding it would fail, and
// the verdict with it).
func quickPrintOf(tenant, id, doc []byte, drop map[string]bool) (p quickPrint, ok bool) {
	return printMembers(tenant, id, doc, drop, false, "")
}

// gidPrintOf is the quick print of a verdict whose grant compares by its
// id, as the verdict check compares a stored verdict, which holds the
// grant's token, with a record that folded the grant and kept its id
// (comparable). The grant member is left out of the members, and the
// grant's id hashed after them: gid, the id of the grant the record
// folded, on the record's side, where doc must have no grant member; on
// the stored side (gid ""), the gid claim of the token doc holds. ok is
// false besides when there is no id to take (a token that is not a grant,
// no grant), or when a member may be read as the grant without being
// spelt "grant". Equal gid prints so decode to equal comparable verdicts.
func gidPrintOf(tenant, id, doc []byte, drop map[string]bool, gid string) (p quickPrint, ok bool) {
	return printMembers(tenant, id, doc, drop, true, gid)
}

// printMembers is quickPrintOf, and gidPrintOf when byGID is set.
func printMembers(tenant, id, doc []byte, drop map[string]bool, byGID bool, gid string) (p quickPrint, ok bool) {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(tenant)))
	h.Write(n[:])
	h.Write(tenant)
	binary.BigEndian.PutUint64(n[:], uint64(len(id)))
	h.Write(n[:])
	h.Write(id)
	i := jsonscan.Space(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return p, false
	}
	i = jsonscan.Space(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		if jsonscan.Space(doc, i+1) != len(doc) {
			return p, false
		}
		return sumPrint(h, byGID, gid)
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return p, false
		}
		end := jsonscan.String(doc, i)
		if end < 0 {
			return p, false
		}
		key := doc[i:end]
		i = jsonscan.Space(doc, end)
		if i >= len(doc) || doc[i] != ':' {
			return p, false
		}
		i = jsonscan.Space(doc, i+1)
		start := i
		if i = jsonscan.Value(doc, i); i < 0 {
			return p, false
		}
		switch {
		case byGID && mayBeGrant(key):
			// The record's side has no grant; the stored side's is the
			// token, as written, once.
			if string(key) != `"grant"` || gid != "" {
				return p, false
			}
			tok, ok := verbatimString(doc[start:i])
			if !ok {
				return p, false
			}
			if gid = grantGID(string(tok)); gid == string(tok) {
				return p, false
			}
		case !drop[string(key)]:
			h.Write(key)
			h.Write(doc[start:i])
			h.Write([]byte{','})
		case string(key) == `"audit_seq"`:
			if _, end, ok := plainUint(doc, start); !ok || end != i {
				return p, false
			}
		}
		i = jsonscan.Space(doc, i)
		if i >= len(doc) {
			return p, false
		}
		switch doc[i] {
		case ',':
			i = jsonscan.Space(doc, i+1)
		case '}':
			if jsonscan.Space(doc, i+1) != len(doc) {
				return p, false
			}
			return sumPrint(h, byGID, gid)
		default:
			return p, false
		}
	}
}

// sumPrint ends a print: with the grant's id when byGID, after a byte no
// member's hash holds (0 in place of a key's quote).
func sumPrint(h hash.Hash, byGID bool, gid string) (p quickPrint, ok bool) {
	if byGID {
		if gid == "" {
			return p, false
		}
		h.Write([]byte{0})
		h.Write([]byte(gidMark + gid))
	}
	copy(p[:], h.Sum(nil))
	return p, true
}

// mayBeGrant reports whether encoding/json may read the member key, as
// written, into a verdict's Grant: its keys match fields in any case, and
// a key with an escape is read unescaped.
func mayBeGrant(key []byte) bool {
	return bytes.EqualFold(key, []byte(`"grant"`)) || bytes.IndexByte(key, '\\') >= 0
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
