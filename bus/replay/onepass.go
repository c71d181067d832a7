package replay

import (
	"bytes"
	"encoding/json"

	"github.com/gated/gated"
	"github.com/gated/gated/internal/jsonscan"
)

// A replay reads every policy.decided record of its range, and the
// proposal inside it is most of the record's bytes. encoding/json reads a
// record three times over (it checks the whole document, then decodes it,
// then copies the proposal as raw JSON) although the record decoder has
// checked the data already. decodeRecordedPolicyValid reads such data in
// one pass: it cuts the object into its members, leaves the proposal
// where it is, and hands only the small members to encoding/json.

// decodeRecordedPolicyValid reads a policy.decided record's data into
// its declared types as decodeRecordedPolicy does, when data is valid JSON (the data of a record
// audit.DecodeRecord returns always is). Data in a form it does not take
// (not an object, a key with an escape or outside ASCII, a key given
// twice, a key encoding/json would match to a field by case folding, a
// member that does not decode) goes to decodeRecordedPolicy, so the result
// is the same either way; FuzzDecodeRecordedPolicy holds the two equal.
func decodeRecordedPolicyValid(data []byte) *recordedPolicy {
	if p, ok := decodeRecordedPolicyFast(data); ok {
		return p
	}
	return decodeRecordedPolicy(data)
}

// recordedPolicyKeys are the members of policy.decided's data, the
// head's and gated.PolicyDecidedData's, and replayInputKeys those of its
// input.
var (
	recordedPolicyKeys = []string{"action", "operator", "delivery", "policy_eval_us",
		"denied_tools", "denies", "eval_us", "holds", "review", "reviewer_tools", "run", "shadow_revision", "sop", "input", "error"}
	replayInputKeys = []string{"proposal", "persona", "now", "history", "run_record", "budget", "session"}
)

// decodeRecordedPolicyFast is decodeRecordedPolicyValid's one pass; ok
// is false for data it leaves to encoding/json.
func decodeRecordedPolicyFast(data []byte) (*recordedPolicy, bool) {
	var p recordedPolicy
	ok := knownMembers(data, recordedPolicyKeys, func(key []byte, val []byte) bool {
		switch string(key) {
		case "action":
			return decodeString(val, &p.Action)
		case "operator":
			return decodeString(val, &p.Operator)
		case "delivery":
			return decodeInt(val, &p.Delivery)
		case "policy_eval_us":
			return decodeInt(val, &p.PolicyEvalUS)
		case "eval_us":
			return decodeInt(val, &p.EvalUS)
		case "error":
			return decodeString(val, &p.Error)
		case "sop":
			return decodeString(val, &p.SOP)
		case "shadow_revision":
			return decodeString(val, &p.ShadowRevision)
		case "denies":
			return decodeList(val, &p.Denies)
		case "holds":
			return json.Unmarshal(val, &p.Holds) == nil
		case "review":
			return decodeRoute(val, &p.Review)
		case "run":
			return string(val) == "null" || json.Unmarshal(val, &p.Run) == nil
		case "denied_tools":
			return decodeList(val, &p.DeniedTools)
		case "reviewer_tools":
			return decodeList(val, &p.ReviewerTools)
		default: // input
			return decodeReplayInput(val, &p.Input)
		}
	})
	return &p, ok
}

// decodeReplayInput reads policy.decided's input member val into *to,
// leaving the recorded proposal in place: a sub-slice of val, capped so
// that appending to it cannot write into the record.
func decodeReplayInput(val []byte, to **gated.ReplayInput) bool {
	if len(val) == 0 || val[0] != '{' {
		return json.Unmarshal(val, to) == nil // null, or an error
	}
	in := &gated.ReplayInput{}
	ok := knownMembers(val, replayInputKeys, func(key []byte, v []byte) bool {
		switch string(key) {
		case "proposal":
			in.Proposal = json.RawMessage(v[:len(v):len(v)])
			return true
		case "persona":
			return decodeString(v, &in.Persona)
		case "now":
			// encoding/json hands time.Time the literal as it is, null too.
			return in.Now.UnmarshalJSON(v) == nil
		case "history":
			return json.Unmarshal(v, &in.History) == nil
		case "budget":
			return json.Unmarshal(v, &in.Budget) == nil
		case "session":
			return json.Unmarshal(v, &in.Session) == nil
		default: // run_record
			return json.Unmarshal(v, &in.RunRecord) == nil
		}
	})
	*to = in
	return ok
}

// knownMembers calls fn on the members of the JSON object data whose key
// is one of keys, skipping the others; a key given twice, or one that
// matches only with its case folded, ends the pass with false, for
// encoding/json to read the data as it would.
func knownMembers(data []byte, keys []string, fn func(key []byte, val []byte) bool) bool {
	var seen uint
	return jsonscan.Members(data, func(key []byte, val []byte) bool {
		i, fresh := knownKey(keys, key, &seen)
		switch {
		case !fresh:
			return false
		case i < 0:
			return true
		}
		return fn(key, val)
	})
}

// knownKey finds key among keys, byte for byte, and marks it seen. i is
// -1 for a key that is not one of them; fresh is false for a key seen
// before, or one encoding/json would match to one of them by folding case.
func knownKey(keys []string, key []byte, seen *uint) (i int, fresh bool) {
	for i, k := range keys {
		if k == string(key) {
			if *seen&(1<<i) != 0 {
				return i, false
			}
			*seen |= 1 << i
			return i, true
		}
	}
	for i, k := range keys {
		if bytes.EqualFold([]byte(k), key) {
			return i, false
		}
	}
	return -1, true
}

// decodeList reads the JSON value val into the nil slice *to as
// encoding/json does, sparing it the commonest forms: null leaves the
// slice nil, [] makes it empty.
func decodeList[T any](val []byte, to *[]T) bool {
	switch string(val) {
	case "null":
		return true
	case "[]":
		*to = []T{}
		return true
	}
	var fast bool
	switch to := any(to).(type) {
	case *[]string:
		fast = jsonscan.Items(val, func(item []byte) bool {
			var s string
			ok := decodeString(item, &s)
			*to = append(*to, s)
			return ok
		})
	case *[]gated.Deny:
		fast = jsonscan.Items(val, func(item []byte) bool {
			var d gated.Deny
			ok := knownMembers(item, denyKeys, func(key []byte, val []byte) bool {
				if string(key) == "rule" {
					return decodeString(val, &d.Rule)
				}
				return decodeString(val, &d.Message)
			})
			*to = append(*to, d)
			return ok
		})
	}
	if fast {
		return true
	}
	*to = nil
	return json.Unmarshal(val, to) == nil
}

// denyKeys are the members of a deny, and routeKeys those of a review
// route.
var (
	denyKeys  = []string{"rule", "message"}
	routeKeys = []string{"required", "persona", "quorum", "why", "rule", "personas", "also", "blocked"}
)

// decodeRoute reads policy.decided's review member val into *r as
// encoding/json does, in one pass when it can.
func decodeRoute(val []byte, r *gated.Route) bool {
	var got gated.Route
	ok := knownMembers(val, routeKeys, func(key []byte, val []byte) bool {
		switch string(key) {
		case "required":
			return decodeBool(val, &got.Required)
		case "persona":
			return decodeString(val, &got.Persona)
		case "quorum":
			return decodeInt(val, &got.Quorum)
		case "why":
			return decodeString(val, &got.Why)
		case "rule":
			return decodeString(val, &got.Rule)
		case "personas":
			return decodeList(val, &got.Personas)
		case "also":
			return decodeList(val, &got.Also)
		default: // blocked
			return decodeString(val, &got.Blocked)
		}
	})
	if ok {
		*r = got
		return true
	}
	return json.Unmarshal(val, r) == nil
}

// decodeBool reads true or false directly, anything else through
// encoding/json.
func decodeBool(val []byte, to *bool) bool {
	switch string(val) {
	case "true":
		*to = true
		return true
	case "false":
		*to = false
		return true
	}
	return json.Unmarshal(val, to) == nil
}

// decodeInt reads a small integer written in digits alone directly,
// anything else through encoding/json.
func decodeInt[T int | int64](val []byte, to *T) bool {
	if n := len(val); n > 0 && n < 10 && (val[0] != '0' || n == 1) {
		var v T
		for _, c := range val {
			if c < '0' || c > '9' {
				return json.Unmarshal(val, to) == nil
			}
			v = v*10 + T(c-'0')
		}
		*to = v
		return true
	}
	return json.Unmarshal(val, to) == nil
}

// decodeString reads the JSON value val into *to as encoding/json does:
// a string of printable ASCII without escapes directly, anything else
// (escapes, other bytes, null, another type) through encoding/json.
func decodeString(val []byte, to *string) bool {
	if n := len(val); n >= 2 && val[0] == '"' && val[n-1] == '"' {
		plain := true
		for _, c := range val[1 : n-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			*to = string(val[1 : n-1])
			return true
		}
	}
	return json.Unmarshal(val, to) == nil
}
