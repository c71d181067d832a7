package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"reflect"
	"strings"

	"github.com/gated/gated/engine"
)

// quickPrint is a digest of a verdict's bytes that the verdict check
// compares before it decodes anything: the tenant and proposal id it
// belongs to, then each top-level member of the verdict's JSON, key and
// value as written, in order, but those the side leaves out (recordDropped,
// storedDropped). Two verdicts with the same quick print decode to the
// same engine.Verdict, audit_seq aside: the same members in the same order
// decode the same, and a member left out sets no field of a verdict, or
// sets audit_seq only. So equal quick prints are a match. Different ones
// are not a mismatch: the check then compares the decoded verdicts
// (printVerdict), as it always did.
type quickPrint [16]byte

// recordDropped are the members a verdict.decided record's data holds
// besides the verdict (every event of a proposal carries them; see
// engine's proposal event data), and audit_seq; storedDropped is
// audit_seq, which the stored verdict has and the record's verdict has as
// 0. A member is left out only when no field of engine.Verdict takes it
// (encoding/json matches keys to fields without regard to case), so
// leaving it out changes nothing the verdict decodes to.
var (
	recordDropped = droppable("operator", "delivery", "policy_eval_us")
	storedDropped = droppable()
)

// droppable is the set of keys, quoted as JSON writes them, that a quick
// print leaves out: audit_seq and those of names that are no field of
// engine.Verdict.
func droppable(names ...string) map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeFor[engine.Verdict]()
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
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(tenant)))
	h.Write(n[:])
	h.Write(tenant)
	binary.BigEndian.PutUint64(n[:], uint64(len(id)))
	h.Write(n[:])
	h.Write(id)
	i := skipWhite(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return p, false
	}
	i = skipWhite(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		if skipWhite(doc, i+1) != len(doc) {
			return p, false
		}
		copy(p[:], h.Sum(nil))
		return p, true
	}
	for {
		if i >= len(doc) || doc[i] != '"' {
			return p, false
		}
		end := validString(doc, i)
		if end < 0 {
			return p, false
		}
		key := doc[i:end]
		i = skipWhite(doc, end)
		if i >= len(doc) || doc[i] != ':' {
			return p, false
		}
		i = skipWhite(doc, i+1)
		start := i
		if i, ok = skipValue(doc, i); !ok {
			return p, false
		}
		switch {
		case !drop[string(key)]:
			h.Write(key)
			h.Write(doc[start:i])
			h.Write([]byte{','})
		case string(key) == `"audit_seq"`:
			if _, end, ok := plainUint(doc, start); !ok || end != i {
				return p, false
			}
		}
		i = skipWhite(doc, i)
		if i >= len(doc) {
			return p, false
		}
		switch doc[i] {
		case ',':
			i = skipWhite(doc, i+1)
		case '}':
			if skipWhite(doc, i+1) != len(doc) {
				return p, false
			}
			copy(p[:], h.Sum(nil))
			return p, true
		default:
			return p, false
		}
	}
}
