package bus

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/digest"
	"github.com/gated/gated/internal/yamlpos"
)

// Operator decisions: an operator judges the manual criteria a run
// verdict is held for, signs the judgement with an nkey, and sends it to
// gated.operator.<tenant>.<proposal_id>. gated checks the signature
// against its operator list before the engine sees the decision.
const (
	// OperatorEndpointName is the endpoint's name in $SRV.INFO and
	// $SRV.STATS.
	OperatorEndpointName = "operator"
	// OperatorMessageVersion is the version an operator message's v must
	// have.
	OperatorMessageVersion = 1
	// MaxOperatorMessageBytes bounds an operator message's body.
	MaxOperatorMessageBytes = 64 << 10
	// MaxOperatorReasonBytes bounds the message's reason and each
	// criterion's reason.
	MaxOperatorReasonBytes = engine.DefaultRunMaxItemBytes
	// OperatorClockSkew is how far signed_at may be from gated's clock,
	// either way. It bounds how long a captured message can be replayed.
	OperatorClockSkew = 5 * time.Minute
	// DefaultOperatorWait bounds how long one decision may take to be
	// applied, stored and audited.
	DefaultOperatorWait = 30 * time.Second
)

// Errors of operator decisions. An *OperatorRefusal matches the one of
// its code, and every 4xx refusal matches ErrOperatorRefused.
var (
	// ErrOperatorRefused is matched by every refusal of an operator
	// decision (codes 400 to 409): nothing was decided.
	ErrOperatorRefused = errors.New("operator decision refused")
	// ErrOperatorMessageInvalid (400) means the message is malformed: the
	// refusal names the field.
	ErrOperatorMessageInvalid = errors.New("operator message malformed")
	// ErrOperatorUnauthenticated (401) means the signature was missing,
	// bad, made with a key gated does not know, for another operator id,
	// or too old (signed_at): sign the message again with a listed key.
	ErrOperatorUnauthenticated = errors.New("operator message not authenticated")
	// ErrOperatorForbidden (403) means the operator may not decide for
	// the tenant: the operators file lists its tenants.
	ErrOperatorForbidden = errors.New("operator may not decide for this tenant")
	// ErrOperatorConflict (409) means the verdict is not held for an
	// operator (never held, or decided already), or the decision does not
	// fit it: another proposal digest, or not exactly the awaited
	// criteria.
	ErrOperatorConflict = errors.New("operator decision conflicts with the stored verdict")
	// ErrInvalidOperators is wrapped by every error of an operators file.
	ErrInvalidOperators = errors.New("invalid operators file")
)

// OperatorRefusal is why gated refused an operator decision, with the
// micro error code it replies with: 400 malformed, 401 not
// authenticated, 403 tenant not allowed, 404 no verdict, 409 not
// awaiting or not matching, 503 store or audit failure. The client gets
// it back from SendOperatorDecision.
type OperatorRefusal struct {
	Code int
	// Field is the JSON path of the field at fault in a 400 refusal
	// ("criteria[1].pass", "subject"), or empty.
	Field string
	// Reason says what is wrong in words an operator can act on. It never
	// holds a seed or a signature.
	Reason string
}

func (e *OperatorRefusal) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("operator decision refused (%d): field %s: %s", e.Code, e.Field, e.Reason)
	}
	return fmt.Sprintf("operator decision refused (%d): %s", e.Code, e.Reason)
}

// description is the refusal as the micro error header carries it.
func (e *OperatorRefusal) description() string {
	if e.Field != "" {
		return "field " + e.Field + ": " + e.Reason
	}
	return e.Reason
}

// Is maps the code to the sentinel errors.
func (e *OperatorRefusal) Is(target error) bool {
	if target == ErrOperatorRefused {
		return e.Code >= 400 && e.Code < 500
	}
	switch e.Code {
	case 400:
		return target == ErrOperatorMessageInvalid
	case 401:
		return target == ErrOperatorUnauthenticated
	case 403:
		return target == ErrOperatorForbidden
	case 404:
		return target == engine.ErrNotFound
	case 409:
		return target == ErrOperatorConflict
	case 503:
		return target == fleet.ErrServiceUnavailable
	}
	return false
}

func refusal(code int, field, format string, args ...any) *OperatorRefusal {
	return &OperatorRefusal{Code: code, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// OperatorSubject is the subject an operator decision on a tenant's
// proposal is sent to.
func OperatorSubject(tenant, proposalID string) string {
	return wire.OperatorSubjectPrefix + tenant + "." + proposalID
}

// OperatorMessage is the signed body of an operator decision. Every field
// is required except the reasons; the JSON must hold no other field.
type OperatorMessage struct {
	// V is OperatorMessageVersion.
	V          int    `json:"v"`
	Tenant     string `json:"tenant"`
	ProposalID string `json:"proposal_id"`
	// ProposalSHA256 is the digest of the proposal the operator judged,
	// as the held verdict names it.
	ProposalSHA256 string `json:"proposal_sha256"`
	// Operator is the operator's id in gated's operator list; the key that
	// signs must be that operator's.
	Operator string `json:"operator"`
	// Criteria judge exactly the manual criteria the verdict awaits.
	Criteria []engine.OperatorFinding `json:"criteria"`
	Reason   string                   `json:"reason"`
	// SignedAt is when the message was signed; gated refuses it more than
	// OperatorClockSkew from its own clock.
	SignedAt time.Time `json:"signed_at"`
}

// Decision is the engine's view of the message, signed by key.
func (m *OperatorMessage) Decision(key string) engine.OperatorDecision {
	return engine.OperatorDecision{
		Tenant: m.Tenant, ProposalID: m.ProposalID, ProposalSHA256: m.ProposalSHA256,
		Operator: m.Operator, Key: key, Criteria: m.Criteria, Reason: m.Reason,
	}
}

// Required fields of an operator message and of one of its criteria;
// reason is optional in both.
var (
	operatorRequired = []string{"v", "tenant", "proposal_id", "proposal_sha256", "operator", "criteria", "signed_at"}
	findingRequired  = []string{"id", "pass"}
)

// DecodeOperatorMessage decodes and checks an operator message strictly:
// one JSON object, no unknown or repeated field, every required field
// present with the right type and a valid token. Its errors are
// *OperatorRefusal with code 400 naming the field.
func DecodeOperatorMessage(data []byte) (*OperatorMessage, error) {
	if len(data) > MaxOperatorMessageBytes {
		return nil, refusal(400, "", "message is %d bytes, more than %d", len(data), MaxOperatorMessageBytes)
	}
	if !utf8.Valid(data) {
		return nil, refusal(400, "", "message is not valid UTF-8")
	}
	var m OperatorMessage
	seen := map[string]bool{}
	err := walkObject("", data, true, func(key string, raw json.RawMessage) error {
		seen[key] = true
		var err error
		switch key {
		case "v":
			m.V, err = decodeVersion(key, raw)
		case "tenant":
			if m.Tenant, err = decodeString(key, raw); err == nil && (!engine.ValidTenant(m.Tenant) || m.Tenant == engine.UnknownTenant) {
				err = refusal(400, key, "%q must match [a-z0-9_-]{1,64}", clipToken(m.Tenant))
			}
		case "proposal_id":
			if m.ProposalID, err = decodeString(key, raw); err == nil && !engine.ValidID(m.ProposalID) {
				err = refusal(400, key, "%q must match [A-Za-z0-9_-]{1,128}", clipToken(m.ProposalID))
			}
		case "proposal_sha256":
			if m.ProposalSHA256, err = decodeString(key, raw); err == nil && !digest.ValidSHA256(m.ProposalSHA256) {
				err = refusal(400, key, "%q must be 64 lower-case hex digits: the proposal_sha256 of the held verdict", clipToken(m.ProposalSHA256))
			}
		case "operator":
			if m.Operator, err = decodeString(key, raw); err == nil && !ValidOperatorID(m.Operator) {
				err = refusal(400, key, "%q must match [A-Za-z0-9._@-]{1,64}", clipToken(m.Operator))
			}
		case "criteria":
			m.Criteria, err = decodeFindings(key, raw)
		case "reason":
			if m.Reason, err = decodeString(key, raw); err == nil && len(m.Reason) > MaxOperatorReasonBytes {
				err = refusal(400, key, "is %d bytes, more than %d", len(m.Reason), MaxOperatorReasonBytes)
			}
		case "signed_at":
			var s string
			if s, err = decodeString(key, raw); err == nil {
				if m.SignedAt, err = time.Parse(time.RFC3339Nano, s); err != nil {
					err = refusal(400, key, "%q is not an RFC 3339 time such as 2025-01-02T15:04:05Z", clipToken(s))
				}
			}
		default:
			err = refusal(400, fieldName(key), "unknown field; an operator message has v, tenant, proposal_id, proposal_sha256, operator, criteria, reason and signed_at")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, key := range operatorRequired {
		if !seen[key] {
			return nil, refusal(400, key, "is required")
		}
	}
	return &m, nil
}

// walkObject calls fn with each member of the JSON object raw, in order,
// refusing anything but one object and a member that appears twice. top
// says raw is the whole message, which must end after the object.
func walkObject(at string, raw []byte, top bool, fn func(key string, raw json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return refusal(400, at, "is not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return refusal(400, at, "must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return refusal(400, at, "is not JSON: %v", err)
		}
		key, _ := tok.(string)
		field := fieldName(key)
		if at != "" {
			field = at + "." + field
		}
		if seen[key] {
			return refusal(400, field, "appears twice")
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return refusal(400, field, "is not JSON: %v", err)
		}
		if err := fn(key, val); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return refusal(400, at, "is not JSON: %v", err)
	}
	if top {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return refusal(400, "", "has data after the JSON object")
		}
	}
	return nil
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
		return 0, refusal(400, field, "must be %d", OperatorMessageVersion)
	}
	return OperatorMessageVersion, nil
}

func decodeFindings(field string, raw json.RawMessage) ([]engine.OperatorFinding, error) {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, refusal(400, field, "must be a list of {id, pass, reason}")
	}
	switch {
	case len(items) == 0:
		return nil, refusal(400, field, "is empty: judge every manual criterion the verdict awaits")
	case len(items) > engine.MaxCriteria:
		return nil, refusal(400, field, "has %d items, more than %d", len(items), engine.MaxCriteria)
	}
	out := make([]engine.OperatorFinding, len(items))
	ids := map[string]int{}
	for i, item := range items {
		at := fmt.Sprintf("%s[%d]", field, i)
		f := &out[i]
		seen := map[string]bool{}
		err := walkObject(at, item, false, func(key string, raw json.RawMessage) error {
			seen[key] = true
			var err error
			switch key {
			case "id":
				if f.ID, err = decodeString(at+".id", raw); err == nil && !engine.ValidID(f.ID) {
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
				if f.Reason, err = decodeString(at+".reason", raw); err == nil && len(f.Reason) > MaxOperatorReasonBytes {
					err = refusal(400, at+".reason", "is %d bytes, more than %d", len(f.Reason), MaxOperatorReasonBytes)
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

// ValidOperatorID reports whether s is an operator id: [A-Za-z0-9._@-]{1,64},
// so an e-mail address will do.
func ValidOperatorID(s string) bool {
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

// SignOperatorDecision encodes msg and signs the encoding with the nkey
// user seed (an "SU…" seed, as `gated operator keygen` writes it; a
// surrounding creds-file decoration is accepted). It sets V when zero and
// SignedAt to now when zero. The body is checked as gated will check it,
// so a malformed decision fails here (with an *OperatorRefusal, code
// 400) rather than on the wire. hdr carries wire.OperatorKeyHeader and
// wire.OperatorSigHeader; send body and hdr unchanged, as one message.
func SignOperatorDecision(seed []byte, msg OperatorMessage) (body []byte, hdr nats.Header, err error) {
	kp, err := nkeys.ParseDecoratedUserNKey(seed)
	if err != nil {
		// The error never quotes the seed.
		return nil, nil, fmt.Errorf("reading the operator's nkey seed: want an nkey user seed (SU…): %w", err)
	}
	defer kp.Wipe()
	if msg.V == 0 {
		msg.V = OperatorMessageVersion
	}
	if msg.SignedAt.IsZero() {
		msg.SignedAt = time.Now()
	}
	msg.SignedAt = msg.SignedAt.UTC()
	if msg.Criteria == nil {
		msg.Criteria = []engine.OperatorFinding{}
	}
	body, err = json.Marshal(msg)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the operator message: %w", err)
	}
	if _, err := DecodeOperatorMessage(body); err != nil {
		return nil, nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, nil, fmt.Errorf("deriving the operator's public key: %w", err)
	}
	sig, err := kp.Sign(body)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the operator message: %w", err)
	}
	hdr = nats.Header{}
	hdr.Set(wire.OperatorKeyHeader, pub)
	hdr.Set(wire.OperatorSigHeader, base64.RawURLEncoding.EncodeToString(sig))
	return body, hdr, nil
}

// Operator is one entry of gated's operator list.
type Operator struct {
	// ID names the operator in decisions and audit records; verdicts say
	// "operator:<id>" judged a criterion.
	ID string
	// Key is the operator's nkey public user key ("U…"): only signatures
	// made with its seed are the operator's.
	Key string
	// Tenants the operator may decide for; empty means every tenant.
	Tenants []string
}

// Allows tells whether the operator may decide for tenant.
func (o Operator) Allows(tenant string) bool {
	if len(o.Tenants) == 0 {
		return true
	}
	for _, t := range o.Tenants {
		if t == tenant {
			return true
		}
	}
	return false
}

// OperatorList is the set of operators whose decisions gated accepts. It
// is immutable once loaded and safe for concurrent use.
type OperatorList struct {
	ops   []Operator
	byKey map[string]int
}

// Operators returns the list's entries in file order.
func (l *OperatorList) Operators() []Operator {
	out := make([]Operator, len(l.ops))
	copy(out, l.ops)
	return out
}

// LoadOperators reads an operators file (see ParseOperators).
func LoadOperators(path string) (*OperatorList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOperators, err)
	}
	return ParseOperators(path, data)
}

// ParseOperators parses an operators file named name:
//
//	operators:
//	  - id: alice                 # [A-Za-z0-9._@-]{1,64}
//	    key: UD…                  # nkey public user key (gated operator keygen)
//	    tenants: [acme, globex]   # empty or absent: every tenant
//
// Errors wrap ErrInvalidOperators and name the file, the line and the
// entry: an unknown key, a missing or malformed id, key or tenant, an id
// or key listed twice, a file that lists nobody. A key field that holds a
// seed is refused without quoting it.
func ParseOperators(name string, data []byte) (*OperatorList, error) {
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrInvalidOperators, name, line, fmt.Sprintf(format, args...))
	}
	root, err := yamlpos.Parse(data)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return nil, fmt.Errorf("%w: %s: empty; list the operators under operators:", ErrInvalidOperators, name)
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		if errors.Is(e, yamlpos.ErrMoreThanOneDocument) {
			return nil, fail(e.Line, "an operators file holds one YAML document")
		}
		return nil, fail(e.Line, "%s", e.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidOperators, name, err)
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root.Line, "want a mapping with the key operators")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if k.Value != "operators" {
			return nil, fail(k.Line, "%s: unknown key; the file has one key, operators", clipToken(k.Value))
		}
		if list != nil {
			return nil, fail(k.Line, "operators: given twice")
		}
		list = yamlpos.Deref(root.Content[i+1])
	}
	if list == nil || yamlpos.IsNull(list) || (list.Kind == yaml.SequenceNode && len(list.Content) == 0) {
		return nil, fail(root.Line, "operators: lists nobody; without operators, leave --operators unset")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fail(list.Line, "operators: want a list of {id, key, tenants}")
	}
	l := &OperatorList{byKey: map[string]int{}}
	ids := map[string]int{}
	for i, item := range list.Content {
		item = yamlpos.Deref(item)
		at := fmt.Sprintf("operators[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fail(item.Line, "%s: want a mapping {id, key, tenants}", at)
		}
		var (
			op   Operator
			seen = map[string]bool{}
		)
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], yamlpos.Deref(item.Content[j+1])
			if seen[k.Value] {
				return nil, fail(k.Line, "%s: %s: given twice", at, clipToken(k.Value))
			}
			seen[k.Value] = true
			switch k.Value {
			case "id":
				if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) || !ValidOperatorID(v.Value) {
					return nil, fail(v.Line, "%s: id: want a name matching [A-Za-z0-9._@-]{1,64}", at)
				}
				op.ID = v.Value
			case "key":
				if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) {
					return nil, fail(v.Line, "%s: key: want an nkey public user key (U…)", at)
				}
				if _, _, err := nkeys.DecodeSeed([]byte(v.Value)); err == nil {
					return nil, fail(v.Line, "%s: key: this is an nkey seed, a secret: put the public key (U…) here, "+
						"keep the seed with the operator, and replace this seed, which is now exposed", at)
				}
				if !nkeys.IsValidPublicUserKey(v.Value) {
					return nil, fail(v.Line, "%s: key: not an nkey public user key (U… 56 characters, as gated operator keygen prints it)", at)
				}
				op.Key = v.Value
			case "tenants":
				tenants, err := yamlTenants(v)
				if err != nil {
					return nil, fail(v.Line, "%s: tenants: %v", at, err)
				}
				op.Tenants = tenants
			default:
				return nil, fail(k.Line, "%s: %s: unknown key; an operator has id, key and tenants", at, clipToken(k.Value))
			}
		}
		switch {
		case op.ID == "":
			return nil, fail(item.Line, "%s: id is required", at)
		case op.Key == "":
			return nil, fail(item.Line, "%s (%s): key is required", at, op.ID)
		}
		if j, dup := ids[op.ID]; dup {
			return nil, fail(item.Line, "%s: id %s is used by operators[%d] too", at, op.ID, j)
		}
		if j, dup := l.byKey[op.Key]; dup {
			return nil, fail(item.Line, "%s (%s): key is operators[%d]'s (%s) too: give each operator a key of its own", at, op.ID, j, l.ops[j].ID)
		}
		ids[op.ID] = i
		l.byKey[op.Key] = i
		l.ops = append(l.ops, op)
	}
	return l, nil
}

func yamlTenants(v *yaml.Node) ([]string, error) {
	if yamlpos.IsNull(v) {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, errors.New("want a list of tenant tokens (empty: every tenant)")
	}
	var out []string
	seen := map[string]bool{}
	for _, t := range v.Content {
		t = yamlpos.Deref(t)
		if t.Kind != yaml.ScalarNode || yamlpos.IsNull(t) || !engine.ValidTenant(t.Value) || t.Value == engine.UnknownTenant {
			return nil, fmt.Errorf("line %d: want a tenant token matching [a-z0-9_-]{1,64}", t.Line)
		}
		if seen[t.Value] {
			return nil, fmt.Errorf("line %d: %s is listed twice", t.Line, t.Value)
		}
		seen[t.Value] = true
		out = append(out, t.Value)
	}
	return out, nil
}

// Verify authenticates an operator message that arrived on subject with
// headers hdr, at now, and returns it with the operator who signed it.
// The checks, in order: the subject names a tenant and a proposal id
// (400); the key is a listed operator's (401); the signature over the
// exact body verifies with it (401); the body decodes strictly (400); it
// names the key's operator (401), the subject's tenant and proposal
// (400), a tenant the operator may decide for (403), and a signed_at
// within OperatorClockSkew of now (401). Errors are *OperatorRefusal.
func (l *OperatorList) Verify(subject string, hdr nats.Header, body []byte, now time.Time) (*OperatorMessage, Operator, error) {
	tenant, id, ok := operatorSubjectTokens(subject)
	if !ok {
		return nil, Operator{}, refusal(400, "subject", "%q is not gated.operator.<tenant>.<proposal_id> with valid tokens", clipToken(subject))
	}
	keys, sigs := hdr.Values(wire.OperatorKeyHeader), hdr.Values(wire.OperatorSigHeader)
	switch {
	case len(keys) == 0 || keys[0] == "":
		return nil, Operator{}, refusal(401, "", "no %s header: operator decisions must be signed (gated operator decide signs them)", wire.OperatorKeyHeader)
	case len(keys) > 1:
		return nil, Operator{}, refusal(401, "", "%s is given %d times; give it once", wire.OperatorKeyHeader, len(keys))
	case !nkeys.IsValidPublicUserKey(keys[0]):
		// Not quoted: a seed sent by mistake must not reach the logs.
		return nil, Operator{}, refusal(401, "", "%s is not an nkey public user key (U…)", wire.OperatorKeyHeader)
	}
	key := keys[0]
	i, known := l.byKey[key]
	if !known {
		return nil, Operator{}, refusal(401, "", "key %s is not in gated's operator list", key)
	}
	op := l.ops[i]
	switch {
	case len(sigs) == 0 || sigs[0] == "":
		return nil, op, refusal(401, "", "no %s header: sign the exact body with the operator's seed", wire.OperatorSigHeader)
	case len(sigs) > 1:
		return nil, op, refusal(401, "", "%s is given %d times; give it once", wire.OperatorSigHeader, len(sigs))
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigs[0])
	if err != nil {
		return nil, op, refusal(401, "", "%s is not base64 (raw URL alphabet, no padding)", wire.OperatorSigHeader)
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return nil, op, refusal(401, "", "key %s: %v", key, err)
	}
	if err := pub.Verify(body, sig); err != nil {
		return nil, op, refusal(401, "", "the signature does not verify with operator %s's key %s: the body changed after signing, or another seed signed it", op.ID, key)
	}
	m, err := DecodeOperatorMessage(body)
	if err != nil {
		return nil, op, err
	}
	switch {
	case m.Operator != op.ID:
		return m, op, refusal(401, "", "key %s is operator %s's, but the message names operator %s", key, op.ID, m.Operator)
	case m.Tenant != tenant:
		return m, op, refusal(400, "tenant", "the message names tenant %s, the subject %s", m.Tenant, tenant)
	case m.ProposalID != id:
		return m, op, refusal(400, "proposal_id", "the message names proposal %s, the subject %s", m.ProposalID, id)
	case !op.Allows(m.Tenant):
		return m, op, refusal(403, "", "operator %s may not decide for tenant %s (its tenants: %s)", op.ID, m.Tenant, strings.Join(op.Tenants, ", "))
	}
	if skew := now.Sub(m.SignedAt); skew > OperatorClockSkew || skew < -OperatorClockSkew {
		return m, op, refusal(401, "", "signed_at %s is %s from gated's clock (%s); at most %s either way is accepted: sign again, and check the operator's clock",
			m.SignedAt.UTC().Format(time.RFC3339), skew.Round(time.Second), now.UTC().Format(time.RFC3339), OperatorClockSkew)
	}
	return m, op, nil
}

// operatorSubjectTokens reads gated.operator.<tenant>.<proposal_id>.
func operatorSubjectTokens(subject string) (tenant, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, wire.OperatorSubjectPrefix)
	if !found {
		return "", "", false
	}
	tenant, id, found = strings.Cut(rest, ".")
	if !found || !engine.ValidTenant(tenant) || tenant == engine.UnknownTenant || !engine.ValidID(id) {
		return "", "", false
	}
	return tenant, id, true
}

// Resolver applies operator decisions to held run verdicts:
// *engine.Engine is one.
type Resolver interface {
	Resolve(ctx context.Context, d engine.OperatorDecision, trail engine.AuditTrail) (*engine.Verdict, error)
}

// VerdictHook is handed each verdict an operator decision produced.
type VerdictHook func(ctx context.Context, v *engine.Verdict) error

// OperatorEndpoint serves operator decisions as the endpoint "operator"
// of the review service (ServiceConfig.Operators), on
// gated.operator.<tenant>.<proposal_id>. A request is verified
// (OperatorList.Verify), applied (Resolver.Resolve, which stores and
// audits the new verdict), its follow-up published, the verdict
// published, and the verdict is the reply. Every refusal is audited as
// engine.EventOperatorRefused. Error replies are micro errors:
//
//	400  malformed: the description names the field
//	401  unsigned, bad signature, unknown key, key of another operator,
//	     signed_at too far from gated's clock
//	403  the operator may not decide for the tenant
//	404  no verdict is stored for the proposal
//	409  the verdict is not held for an operator, was decided already,
//	     or the decision does not fit it (digest, criteria)
//	503  the store or the audit trail failed, or gated is stopping:
//	     nothing was decided unless the description says so; retry
type OperatorEndpoint struct {
	list     *OperatorList
	resolver Resolver
	trails   Trails
	followUp VerdictHook
	publish  VerdictHook
	log      *zap.Logger
	// wait bounds one decision; now is the clock signed_at is checked
	// against.
	wait time.Duration
	now  func() time.Time
}

// NewOperatorEndpoint builds the operator endpoint; pass it to
// StartService in ServiceConfig.Operators. followUp is called with every
// verdict a decision produces before the verdict is published, and again
// with the stored operator verdict when an authenticated decision comes
// after it (so sending the decision again repairs a lost follow-up): it
// publishes the continuation or escalation the verdict sends, if any
// (engine.FollowUp), returns once it is stored, and must publish nothing
// twice. publish publishes the verdict on gated.verdicts.<tenant>.<id>.
// Every argument but log is required: else the error wraps
// ErrInvalidConfig.
func NewOperatorEndpoint(list *OperatorList, r Resolver, trails Trails, followUp, publish VerdictHook, log *zap.Logger) (*OperatorEndpoint, error) {
	switch {
	case list == nil || len(list.ops) == 0:
		return nil, fmt.Errorf("%w: the operator endpoint needs an operator list", ErrInvalidConfig)
	case r == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs a resolver (the engine)", ErrInvalidConfig)
	case trails == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs audit trails", ErrInvalidConfig)
	case followUp == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs a follow-up publisher", ErrInvalidConfig)
	case publish == nil:
		return nil, fmt.Errorf("%w: the operator endpoint needs a verdict publisher", ErrInvalidConfig)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &OperatorEndpoint{
		list: list, resolver: r, trails: trails, followUp: followUp, publish: publish, log: log,
		wait: DefaultOperatorWait, now: time.Now,
	}, nil
}

// OperatorRefusedData is the data of an engine.EventOperatorRefused audit
// event.
type OperatorRefusedData struct {
	// Code is the error code replied, Field the field at fault (400), and
	// Reason the description replied.
	Code   int    `json:"code"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
	// Subject is where the message was sent.
	Subject string `json:"subject"`
	// Key is the public key the message names, when it is one; Operator
	// is the listed operator it belongs to, when it is listed. Neither
	// means the signature verified: see Reason.
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
}

// verdictLookup reads a stored verdict.
type verdictLookup func(ctx context.Context, tenant, id string) (*engine.Verdict, error)

// decide handles one request and returns the verdict to reply with, or
// the refusal. It never returns both. lookup, when set, reads the stored
// verdict of a decision that comes after the verdict was decided.
func (e *OperatorEndpoint) decide(ctx context.Context, lookup verdictLookup, subject string, hdr nats.Header, body []byte) (*engine.Verdict, *OperatorRefusal) {
	ctx, cancel := context.WithTimeout(ctx, e.wait)
	defer cancel()
	trail := e.trails()
	msg, op, err := e.list.Verify(subject, hdr, body, e.now())
	if err != nil {
		var r *OperatorRefusal
		if !errors.As(err, &r) {
			r = refusal(400, "", "%v", err)
		}
		return nil, e.refuse(ctx, trail, subject, hdr, op, r)
	}
	v, err := e.resolver.Resolve(ctx, msg.Decision(op.Key), trail)
	if err == nil && v == nil {
		err = errors.New("the engine returned no verdict")
	}
	if err != nil {
		r := e.resolveRefusal(msg, err)
		if v == nil && lookup != nil && errors.Is(err, engine.ErrNotAwaiting) {
			v, _ = lookup(ctx, msg.Tenant, msg.ProposalID)
		}
		if v != nil && v.Stage == engine.StageOperator && v.ProposalSHA256 == msg.ProposalSHA256 && r.Code == 409 {
			// Decided already, by an operator: the verdict may still owe
			// its follow-up, which a failure kept from being published.
			// The hook publishes only what is not stored yet.
			if ferr := e.followUp(ctx, v); ferr != nil {
				e.log.Warn("publishing the follow-up of an operator verdict again", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(ferr))
			}
		}
		if r.Code == 503 {
			// The engine's trail may be broken: record the refusal anew.
			trail = e.trails()
		}
		return nil, e.refuse(ctx, trail, subject, hdr, op, r)
	}
	if err := e.followUp(ctx, v); err != nil {
		e.log.Error("publishing the follow-up of an operator verdict", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(err))
		return nil, refusal(503, "", "the decision is stored (proposal %s.%s is %s at stage %s, audit seq %d), but its %s could not be published: %v; "+
			"send the same decision again to have it published", v.Tenant, v.ProposalID, v.Outcome, v.Stage, v.AuditSeq, followUpName(v), err)
	}
	if err := e.publish(ctx, v); err != nil {
		// The verdict is stored, and the reply carries it; a fleet waiting
		// on the verdict subject finds it in the bucket.
		e.log.Warn("publishing an operator verdict", zap.String("key", v.Tenant+"."+v.ProposalID), zap.Error(err))
	}
	return v, nil
}

func followUpName(v *engine.Verdict) string {
	if v.Run != nil && v.Run.Next != "" {
		return v.Run.Next
	}
	return "follow-up"
}

// resolveRefusal maps an error of Resolve to the reply.
func (e *OperatorEndpoint) resolveRefusal(m *OperatorMessage, err error) *OperatorRefusal {
	key := m.Tenant + "." + m.ProposalID
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return refusal(404, "", "no verdict is stored for proposal %s (never decided, still under review, or past the verdict TTL)", key)
	case errors.Is(err, engine.ErrNotAwaiting):
		return refusal(409, "", "proposal %s: %v", key, err)
	case errors.Is(err, engine.ErrDecisionMismatch):
		return refusal(409, "", "proposal %s: %v", key, err)
	case errors.Is(err, engine.ErrExists):
		return refusal(409, "", "proposal %s was decided meanwhile by another decision: %v", key, err)
	}
	return refusal(503, "", "proposal %s: nothing was decided: %v; retry", key, err)
}

// refuse audits the refusal r and returns what to reply: r, or a 503 when
// the refusal could not be audited.
func (e *OperatorEndpoint) refuse(ctx context.Context, trail engine.AuditTrail, subject string, hdr nats.Header, op Operator, r *OperatorRefusal) *OperatorRefusal {
	tenant, id, ok := operatorSubjectTokens(subject)
	if !ok {
		tenant, id = engine.UnknownTenant, ""
	}
	data := OperatorRefusedData{Code: r.Code, Field: r.Field, Reason: r.Reason, Subject: clipToken(subject), Operator: op.ID}
	if k := hdr.Get(wire.OperatorKeyHeader); nkeys.IsValidPublicUserKey(k) {
		data.Key = k
	}
	raw, _ := json.Marshal(data)
	ev := engine.AuditEvent{
		V: engine.SchemaVersion, Event: engine.EventOperatorRefused, Tenant: tenant, ProposalID: id,
		At: e.now().UTC(), Data: raw,
	}
	_, err := trail.Seal(ctx, ev)
	if errors.Is(err, audit.ErrTrailSealed) {
		_, err = e.trails().Seal(ctx, ev)
	}
	if err != nil {
		e.log.Error("auditing a refused operator decision", zap.String("subject", subject), zap.Int("code", r.Code), zap.Error(err))
		return refusal(503, "", "refused (%d: %s), and the refusal could not be audited: %v", r.Code, r.description(), err)
	}
	e.log.Info("operator decision refused", zap.String("subject", subject), zap.Int("code", r.Code),
		zap.String("operator", op.ID), zap.String("reason", r.description()))
	return r
}

// SendOperatorDecision sends a signed operator decision (body and hdr
// from SignOperatorDecision) to gated.operator.<tenant>.<proposal_id> and
// returns the verdict that replaces the held one. Errors: an
// *OperatorRefusal (400 also when body does not decode; matching
// ErrOperatorRefused and the sentinel of its code),
// fleet.ErrServiceUnavailable when no gated serves the endpoint (started
// without --operators), or a NATS error such as a context deadline. When
// ctx has no deadline it waits fleet.DefaultWait for the reply.
func SendOperatorDecision(ctx context.Context, nc *nats.Conn, body []byte, hdr nats.Header) (*engine.Verdict, error) {
	m, err := DecodeOperatorMessage(body)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fleet.DefaultWait)
		defer cancel()
	}
	subject := OperatorSubject(m.Tenant, m.ProposalID)
	req := &nats.Msg{Subject: subject, Data: body, Header: hdr}
	reply, err := nc.RequestMsgWithContext(ctx, req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: nothing answers %s: is gated running with --operators?", fleet.ErrServiceUnavailable, subject)
	}
	if err != nil {
		return nil, fmt.Errorf("sending the operator decision on %s: %w", subject, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		r := &OperatorRefusal{Reason: reply.Header.Get(micro.ErrorHeader)}
		if _, err := fmt.Sscanf(code, "%d", &r.Code); err != nil {
			r.Code = 500
		}
		return nil, r
	}
	var v engine.Verdict
	if err := json.Unmarshal(reply.Data, &v); err != nil {
		return nil, fmt.Errorf("decoding the reply on %s: %w", subject, err)
	}
	if v.Tenant != m.Tenant || v.ProposalID != m.ProposalID {
		return nil, fmt.Errorf("the reply on %s is the verdict of %s.%s", subject, v.Tenant, v.ProposalID)
	}
	return &v, nil
}
