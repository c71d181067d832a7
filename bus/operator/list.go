package operator

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.yaml.in/yaml/v3"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/yamlpos"
)

// Signer is one entry of gated's operator list: a key allowed to sign
// decisions, the operator it belongs to, and the tenants it may decide
// for.
type Signer struct {
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
func (o Signer) Allows(tenant string) bool {
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

// List is the set of signers whose decisions gated accepts, read from an
// operators file. It is immutable once loaded and safe for concurrent
// use.
type List struct {
	ops   []Signer
	byKey map[string]int
}

// Signers returns the list's entries in file order.
func (l *List) Signers() []Signer {
	out := make([]Signer, len(l.ops))
	copy(out, l.ops)
	return out
}

// LoadList reads an operators file (see ParseList).
func LoadList(path string) (*List, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidList, err)
	}
	return ParseList(path, data)
}

// ParseList parses an operators file named name:
//
//	operators:
//	  - id: alice                 # [A-Za-z0-9._@-]{1,64}
//	    key: UD…                  # nkey public user key (gated operator keygen)
//	    tenants: [acme, globex]   # empty or absent: every tenant
//
// Errors wrap ErrInvalidList and name the file, the line and the
// entry: an unknown key, a missing or malformed id, key or tenant, an id
// or key listed twice, a file that lists nobody. A key field that holds a
// seed is refused without quoting it.
func ParseList(name string, data []byte) (*List, error) {
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrInvalidList, name, line, fmt.Sprintf(format, args...))
	}
	root, err := yamlpos.Parse(data)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return nil, fmt.Errorf("%w: %s: empty; list the operators under operators:", ErrInvalidList, name)
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		if errors.Is(e, yamlpos.ErrMoreThanOneDocument) {
			return nil, fail(e.Line, "an operators file holds one YAML document")
		}
		return nil, fail(e.Line, "%s", e.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidList, name, err)
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
	l := &List{byKey: map[string]int{}}
	ids := map[string]int{}
	for i, item := range list.Content {
		item = yamlpos.Deref(item)
		at := fmt.Sprintf("operators[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, fail(item.Line, "%s: want a mapping {id, key, tenants}", at)
		}
		var (
			op   Signer
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
				if v.Kind != yaml.ScalarNode || yamlpos.IsNull(v) || !ValidID(v.Value) {
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
		if t.Kind != yaml.ScalarNode || yamlpos.IsNull(t) || !gated.ValidTenant(t.Value) || t.Value == gated.UnknownTenant {
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
// headers hdr, at now, and returns it with the signer who signed it.
// The checks, in order: the subject names a tenant and a proposal id
// (400); the key is a listed operator's (401); the signature over the
// exact body verifies with it (401); the body decodes strictly (400); it
// names the key's operator (401), the subject's tenant and proposal
// (400), a tenant the operator may decide for (403), and a signed_at
// within five minutes of now (401). Errors are *Refusal.
func (l *List) Verify(subject string, hdr nats.Header, body []byte, now time.Time) (*Message, Signer, error) {
	tenant, id, ok := subjectTokens(subject)
	if !ok {
		return nil, Signer{}, refusal(400, "subject", "%q is not gated.operator.<tenant>.<proposal_id> with valid tokens", clipToken(subject))
	}
	op, err := l.verifySignature(hdr, body)
	if err != nil {
		return nil, op, err
	}
	m, err := DecodeMessage(body)
	if err != nil {
		return nil, op, err
	}
	switch {
	case m.Operator != op.ID:
		return m, op, refusal(401, "", "key %s is operator %s's, but the message names operator %s", op.Key, op.ID, m.Operator)
	case m.Tenant != tenant:
		return m, op, refusal(400, "tenant", "the message names tenant %s, the subject %s", m.Tenant, tenant)
	case m.ProposalID != id:
		return m, op, refusal(400, "proposal_id", "the message names proposal %s, the subject %s", m.ProposalID, id)
	case !op.Allows(m.Tenant):
		return m, op, refusal(403, "", "operator %s may not decide for tenant %s (its tenants: %s)", op.ID, m.Tenant, strings.Join(op.Tenants, ", "))
	}
	if skew := now.Sub(m.SignedAt); skew > clockSkew || skew < -clockSkew {
		return m, op, refusal(401, "", "signed_at %s is %s from gated's clock (%s); at most %s either way is accepted: sign again, and check the operator's clock",
			m.SignedAt.UTC().Format(time.RFC3339), skew.Round(time.Second), now.UTC().Format(time.RFC3339), clockSkew)
	}
	return m, op, nil
}

// verifySignature checks that hdr names a listed operator's key and
// carries its signature over body exactly, and returns the operator
// (known when the key is listed, even when the signature fails).
func (l *List) verifySignature(hdr nats.Header, body []byte) (Signer, error) {
	keys, sigs := hdr.Values(wire.OperatorKeyHeader), hdr.Values(wire.OperatorSigHeader)
	switch {
	case len(keys) == 0 || keys[0] == "":
		return Signer{}, refusal(401, "", "no %s header: operator decisions must be signed (gated operator decide signs them)", wire.OperatorKeyHeader)
	case len(keys) > 1:
		return Signer{}, refusal(401, "", "%s is given %d times; give it once", wire.OperatorKeyHeader, len(keys))
	case !nkeys.IsValidPublicUserKey(keys[0]):
		// Not quoted: a seed sent by mistake must not reach the logs.
		return Signer{}, refusal(401, "", "%s is not an nkey public user key (U…)", wire.OperatorKeyHeader)
	}
	key := keys[0]
	i, known := l.byKey[key]
	if !known {
		return Signer{}, refusal(401, "", "key %s is not in gated's operator list", key)
	}
	op := l.ops[i]
	switch {
	case len(sigs) == 0 || sigs[0] == "":
		return op, refusal(401, "", "no %s header: sign the exact body with the operator's seed", wire.OperatorSigHeader)
	case len(sigs) > 1:
		return op, refusal(401, "", "%s is given %d times; give it once", wire.OperatorSigHeader, len(sigs))
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigs[0])
	if err != nil {
		return op, refusal(401, "", "%s is not base64 (raw URL alphabet, no padding)", wire.OperatorSigHeader)
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return op, refusal(401, "", "key %s: %v", key, err)
	}
	if err := pub.Verify(body, sig); err != nil {
		return op, refusal(401, "", "the signature does not verify with operator %s's key %s: the body changed after signing, or another seed signed it", op.ID, key)
	}
	return op, nil
}
