package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/strictjson"
)

// Limits of an operator message.
const (
	// messageVersion is the version an operator message's v must have.
	messageVersion = 1
	// MaxMessageBytes bounds an operator message's body.
	MaxMessageBytes = 64 << 10
	// MaxReasonBytes bounds the message's reason and each criterion's
	// reason.
	MaxReasonBytes = gated.DefaultRunMaxItemBytes
	// clockSkew is how far signed_at may be from gated's clock, either
	// way. It bounds how long a captured message can be replayed.
	clockSkew = 5 * time.Minute
)

// Message is the signed body of an operator decision. Every field
// is required except the reasons, and exactly one of criteria (a held
// run) and decision (a held action); the JSON must hold no other field.
type Message struct {
	// V is the message's version, 1; Sign sets it when it is zero.
	V int `json:"v"`
	// Tenant and ProposalID name the held verdict; they must be the
	// subject's.
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	// ProposalSHA256 is the digest of the proposal the operator judged,
	// as the held verdict names it.
	ProposalSHA256 string `json:"proposal_sha256"`
	// Operator is the operator's id in gated's operator list; the key that
	// signs must be that operator's.
	Operator string `json:"operator"`
	// Criteria judge exactly the manual criteria a held run's verdict
	// awaits; Decision, approve or reject, decides an action held for an
	// operator. A message has one of the two, never both.
	Criteria []engine.OperatorFinding `json:"criteria,omitempty"`
	Decision string                   `json:"decision,omitempty"`
	// Reason says why, optionally; its first line is appended to the
	// verdict's reason.
	Reason string `json:"reason"`
	// SignedAt is when the message was signed; gated refuses it more than
	// five minutes from its own clock.
	SignedAt time.Time `json:"signed_at"`
}

// decision is the engine's view of the message, signed by key.
func (m *Message) decision(key string) engine.OperatorDecision {
	return engine.OperatorDecision{
		Tenant: m.Tenant, ProposalID: m.ProposalID, ProposalSHA256: m.ProposalSHA256,
		Operator: m.Operator, Key: key, Criteria: m.Criteria, Decision: m.Decision, Reason: m.Reason,
	}
}

// Required fields of an operator message and of one of its criteria;
// reason is optional in both.
var (
	messageRequired = []string{"v", "tenant", "proposal_id", "proposal_sha256", "operator", "signed_at"}
	findingRequired = []string{"id", "pass"}
)

// DecodeMessage decodes and checks an operator message strictly:
// one JSON object, no unknown or repeated field, every required field
// present with the right type and a valid token. Its errors are
// *Refusal with code 400 naming the field.
func DecodeMessage(data []byte) (*Message, error) {
	if len(data) > MaxMessageBytes {
		return nil, refusal(400, "", "message is %d bytes, more than %d", len(data), MaxMessageBytes)
	}
	if !utf8.Valid(data) {
		return nil, refusal(400, "", "message is not valid UTF-8")
	}
	var m Message
	seen := map[string]bool{}
	err := walkObject("", data, func(key string, raw json.RawMessage) error {
		seen[key] = true
		var err error
		switch key {
		case "v":
			m.V, err = decodeVersion(key, raw)
		case "tenant":
			if m.Tenant, err = decodeString(key, raw); err == nil && (!gated.ValidTenant(m.Tenant) || m.Tenant == gated.UnknownTenant) {
				err = refusal(400, key, "%q must match [a-z0-9_-]{1,64}", clipToken(m.Tenant))
			}
		case "proposal_id":
			if m.ProposalID, err = decodeString(key, raw); err == nil && !gated.ValidID(m.ProposalID) {
				err = refusal(400, key, "%q must match [A-Za-z0-9_-]{1,128}", clipToken(m.ProposalID))
			}
		case "proposal_sha256":
			if m.ProposalSHA256, err = decodeString(key, raw); err == nil && !digest.ValidSHA256(m.ProposalSHA256) {
				err = refusal(400, key, "%q must be 64 lower-case hex digits: the proposal_sha256 of the held verdict", clipToken(m.ProposalSHA256))
			}
		case "operator":
			if m.Operator, err = decodeString(key, raw); err == nil && !ValidID(m.Operator) {
				err = refusal(400, key, "%q must match [A-Za-z0-9._@-]{1,64}", clipToken(m.Operator))
			}
		case "criteria":
			m.Criteria, err = decodeFindings(key, raw)
		case "decision":
			if m.Decision, err = decodeString(key, raw); err == nil && m.Decision != engine.OperatorApprove && m.Decision != engine.OperatorReject {
				err = refusal(400, key, "%q must be %s or %s", clipToken(m.Decision), engine.OperatorApprove, engine.OperatorReject)
			}
		case "reason":
			m.Reason, err = decodeReason(key, raw)
		case "signed_at":
			m.SignedAt, err = decodeSignedAt(key, raw)
		default:
			err = refusal(400, fieldName(key), "unknown field; an operator message has v, tenant, proposal_id, proposal_sha256, operator, criteria or decision, reason and signed_at")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, key := range messageRequired {
		if !seen[key] {
			return nil, refusal(400, key, "is required")
		}
	}
	switch {
	case seen["criteria"] && seen["decision"]:
		return nil, refusal(400, "decision", "a message has criteria (a held run) or decision (a held action), not both")
	case !seen["criteria"] && !seen["decision"]:
		return nil, refusal(400, "criteria", "is required: judge a held run's manual criteria, or give decision approve or reject for a held action")
	}
	return &m, nil
}

// walkObject calls fn with each member of the JSON object raw, in order,
// refusing anything but one object and a member that appears twice. at
// is the object's JSON path in the message, "" for the message itself.
func walkObject(at string, raw []byte, fn func(key string, raw json.RawMessage) error) error {
	err := strictjson.Object(raw, fn)
	var member *strictjson.MemberError
	switch {
	case err == nil:
		return nil
	case errors.As(err, new(*Refusal)):
		return err // fn's own
	case errors.As(err, &member):
		field := fieldName(member.Key)
		if at != "" {
			field = at + "." + field
		}
		if errors.Is(member.Err, strictjson.ErrDuplicateMember) {
			return refusal(400, field, "appears twice")
		}
		return refusal(400, field, "is not JSON: %v", member.Err)
	case errors.Is(err, strictjson.ErrNotObject):
		return refusal(400, at, "must be a JSON object")
	case errors.Is(err, strictjson.ErrTrailingData):
		return refusal(400, "", "has data after the JSON object")
	}
	return refusal(400, at, "is not JSON: %v", err)
}

func decodeString(field string, raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", refusal(400, field, "must be a string")
	}
	return s, nil
}

func decodeVersion(field string, raw json.RawMessage) (int, error) {
	if string(raw) != "1" {
		return 0, refusal(400, field, "must be %d", messageVersion)
	}
	return messageVersion, nil
}

func decodeFindings(field string, raw json.RawMessage) ([]engine.OperatorFinding, error) {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, refusal(400, field, "must be a list of {id, pass, reason}")
	}
	switch {
	case len(items) == 0:
		return nil, refusal(400, field, "is empty: judge every manual criterion the verdict awaits")
	case len(items) > gated.MaxCriteria:
		return nil, refusal(400, field, "has %d items, more than %d", len(items), gated.MaxCriteria)
	}
	out := make([]engine.OperatorFinding, len(items))
	ids := map[string]int{}
	for i, item := range items {
		at := fmt.Sprintf("%s[%d]", field, i)
		f := &out[i]
		seen := map[string]bool{}
		err := walkObject(at, item, func(key string, raw json.RawMessage) error {
			seen[key] = true
			var err error
			switch key {
			case "id":
				if f.ID, err = decodeString(at+".id", raw); err == nil && !gated.ValidID(f.ID) {
					err = refusal(400, at+".id", "%q must match [A-Za-z0-9_-]{1,128}", clipToken(f.ID))
				}
			case "pass":
				switch string(raw) {
				case "true":
					f.Pass = true
				case "false":
				default:
					err = refusal(400, at+".pass", "must be true or false")
				}
			case "reason":
				if f.Reason, err = decodeString(at+".reason", raw); err == nil && len(f.Reason) > MaxReasonBytes {
					err = refusal(400, at+".reason", "is %d bytes, more than %d", len(f.Reason), MaxReasonBytes)
				}
			default:
				err = refusal(400, at+"."+fieldName(key), "unknown field; a criterion has id, pass and reason")
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, key := range findingRequired {
			if !seen[key] {
				return nil, refusal(400, at+"."+key, "is required")
			}
		}
		if j, dup := ids[f.ID]; dup {
			return nil, refusal(400, at+".id", "%q is judged already by %s[%d]", f.ID, field, j)
		}
		ids[f.ID] = i
	}
	return out, nil
}

// ValidID reports whether s is an operator id: [A-Za-z0-9._@-]{1,64},
// so an e-mail address will do.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '@') {
			return false
		}
	}
	return true
}

// fieldName is a JSON member name as a refusal names it: as it is when
// it is short printable ASCII, else quoted and clipped.
func fieldName(key string) string {
	plain := len(key) > 0 && len(key) <= 64
	for i := 0; plain && i < len(key); i++ {
		plain = key[i] > ' ' && key[i] < 0x7f && key[i] != '"'
	}
	if plain {
		return key
	}
	return strconv.Quote(clipToken(key))
}

// clipToken keeps a refused token short in a message.
func clipToken(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// subjectTokens reads gated.operator.<tenant>.<proposal_id>.
func subjectTokens(subject string) (tenant, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, wire.OperatorSubjectPrefix)
	if !found {
		return "", "", false
	}
	tenant, id, found = strings.Cut(rest, ".")
	if !found || !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant || !gated.ValidID(id) {
		return "", "", false
	}
	return tenant, id, true
}

// decodeReason reads a message's reason: a string of at most
// MaxReasonBytes.
func decodeReason(key string, raw []byte) (string, error) {
	r, err := decodeString(key, raw)
	if err == nil && len(r) > MaxReasonBytes {
		err = refusal(400, key, "is %d bytes, more than %d", len(r), MaxReasonBytes)
	}
	return r, err
}

// decodeSignedAt reads a message's signed_at: an RFC 3339 time.
func decodeSignedAt(key string, raw []byte) (time.Time, error) {
	s, err := decodeString(key, raw)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, refusal(400, key, "%q is not an RFC 3339 time such as 2025-01-02T15:04:05Z", clipToken(s))
	}
	return t, nil
}
