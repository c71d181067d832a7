package grant

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Fixed values of the token format.
const (
	// Alg is the only signature algorithm: Ed25519 (RFC 8037).
	Alg = "EdDSA"
	// Typ is the header's typ.
	Typ = "gated-grant+jwt"
	// Issuer is the payload's iss.
	Issuer = "gated"
	// Version is the payload's v.
	Version = 1
	// MaxTokenLen bounds a token a verifier reads.
	MaxTokenLen = 16 << 10
)

// Reviewer is one reviewer that approved, as a grant names it: "" for
// what is unknown. An operator's approval of a held action is
// {"plugin":"operator","persona":"<operator id>"}.
type Reviewer struct {
	Plugin        string `json:"plugin"`
	PluginVersion string `json:"plugin_version"`
	Persona       string `json:"persona"`
	Model         string `json:"model"`
}

// Claims is a grant's payload, its members in the order of the format.
type Claims struct {
	V              int        `json:"v"`
	GID            string     `json:"gid"`
	Iss            string     `json:"iss"`
	Tenant         string     `json:"tenant"`
	ProposalID     string     `json:"proposal_id"`
	ProposalSHA256 string     `json:"proposal_sha256"`
	Action         string     `json:"action"`
	TargetSHA256   string     `json:"target_sha256"`
	PolicyRevision string     `json:"policy_revision"`
	Reviewers      []Reviewer `json:"reviewers"`
	IssuedAt       int64      `json:"iat"`
	ExpiresAt      int64      `json:"exp"`
}

// Expires is when the grant stops verifying.
func (c Claims) Expires() time.Time { return time.Unix(c.ExpiresAt, 0) }

type header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
	KID string `json:"kid"`
}

// NewGID returns a new grant id: 16 random bytes, unpadded base64url.
func NewGID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("creating a grant id: %w", err)
	}
	return b64.EncodeToString(b), nil
}

// sign encodes c as the payload and signs it with priv under kid.
func sign(c Claims, priv ed25519.PrivateKey, kid string) (string, error) {
	if c.Reviewers == nil {
		c.Reviewers = []Reviewer{}
	}
	h, err := json.Marshal(header{Alg: Alg, Typ: Typ, KID: kid})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding grant claims: %w", err)
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	sig := ed25519.Sign(priv, []byte(input))
	return input + "." + b64.EncodeToString(sig), nil
}

// Issue signs a grant with the ring's active key: c with v, iss and a new
// gid set, issued at now and expiring ttl later. ttl must not exceed the
// active key's max_ttl_s. It returns the token and the claims it holds.
func (r *Ring) Issue(c Claims, now time.Time, ttl time.Duration) (string, Claims, error) {
	k := r.active()
	if k.priv == nil {
		return "", c, fmt.Errorf("issuing a grant: the key ring has no active key")
	}
	if err := checkTTL(ttl); err != nil {
		return "", c, fmt.Errorf("issuing a grant: %w", err)
	}
	if int64(ttl/time.Second) > k.MaxTTL {
		return "", c, fmt.Errorf("issuing a grant: lifetime %s exceeds the active key's max_ttl_s %d; rotate to a key that allows it", ttl, k.MaxTTL)
	}
	gid, err := NewGID()
	if err != nil {
		return "", c, err
	}
	c.V, c.GID, c.Iss = Version, gid, Issuer
	c.IssuedAt = now.Unix()
	c.ExpiresAt = c.IssuedAt + int64(ttl/time.Second)
	if c.Reviewers == nil {
		c.Reviewers = []Reviewer{}
	}
	tok, err := sign(c, k.priv, k.KID)
	return tok, c, err
}

// Expect is what an executor is about to do, which a grant must name
// exactly. Every field is checked; a Target of nil or JSON null is the
// empty object, as for a proposal without a target. TargetSHA256, when
// set, is used instead of digesting Target.
type Expect struct {
	Tenant         string
	ProposalID     string
	ProposalSHA256 string
	Action         string
	Target         []byte
	TargetSHA256   string
}

// Verify checks token against the key set ks at now, then against want,
// and returns its claims. Checks run in this order: the token's format,
// the header (alg EdDSA, typ, kid of a key in ks, no other member), the
// Ed25519 signature over the bytes as received, the payload (every member
// present, of its type, none other), the key's rules (created_at ≤ iat;
// for a retired key iat < retired_at and exp ≤ retired_at + max_ttl_s;
// exp − iat ≤ max_ttl_s), the time (iat ≤ now + ClockSkew, now < exp),
// and last every member against want. A refusal is an *Error naming the
// member or check (errors.Is ErrRefused).
func Verify(token string, ks KeySet, now time.Time, want Expect) (Claims, error) {
	c, k, err := decode(token, ks)
	if err != nil {
		return Claims{}, err
	}
	if err := checkKeyRules(c, k, now); err != nil {
		return Claims{}, err
	}
	if err := check(c, want); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// VerifyToken checks token against ks at now as Verify does, but checks
// no expectation: it is gated's own check of a grant it issued, which an
// executor has already compared with what it runs.
func VerifyToken(token string, ks KeySet, now time.Time) (Claims, error) {
	c, k, err := decode(token, ks)
	if err != nil {
		return Claims{}, err
	}
	if err := checkKeyRules(c, k, now); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// Decode checks token's format, header and signature against ks and
// returns its claims, with neither the key's time rules nor any
// expectation checked: for reading a grant gated issued, never for
// deciding to act on one.
func Decode(token string, ks KeySet) (Claims, error) {
	c, _, err := decode(token, ks)
	return c, err
}

// split checks the token's length and parts and returns them as written
// and base64url-decoded.
func split(token string) ([]string, [3][]byte, error) {
	var raw [3][]byte
	if len(token) > MaxTokenLen {
		return nil, raw, refuse("format", fmt.Sprintf("token is longer than %d bytes", MaxTokenLen))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, raw, refuse("format", "token is not three base64url parts joined by '.'")
	}
	for i, part := range parts {
		b, err := b64.DecodeString(part)
		// An empty signature is read as no signature, so that alg none is
		// refused for its alg.
		if err != nil || part == "" && i < 2 {
			return nil, raw, refuse("format", fmt.Sprintf("token part %d is not unpadded base64url", i+1))
		}
		raw[i] = b
	}
	return parts, raw, nil
}

func decode(token string, ks KeySet) (Claims, Key, error) {
	parts, raw, err := split(token)
	if err != nil {
		return Claims{}, Key{}, err
	}
	k, err := checkHeader(raw[0], ks)
	if err != nil {
		return Claims{}, Key{}, err
	}
	if len(raw[2]) != ed25519.SignatureSize || !ed25519.Verify(k.publicKey(), []byte(parts[0]+"."+parts[1]), raw[2]) {
		return Claims{}, Key{}, refuse("signature", fmt.Sprintf("does not verify under key %s", k.KID))
	}
	c, err := parseClaims(raw[1])
	if err != nil {
		return Claims{}, Key{}, err
	}
	return c, k, nil
}

func checkHeader(data []byte, ks KeySet) (Key, error) {
	h, err := parseJSON(data)
	if err != nil || h.kind != kindObject {
		return Key{}, refuse("format", "header is not a JSON object")
	}
	for _, m := range h.members {
		if !slices.Contains([]string{"alg", "typ", "kid"}, m.name) {
			return Key{}, refuse(clip(m.name), "is not an allowed header member (only alg, typ and kid are)")
		}
	}
	alg := h.get("alg")
	if alg == nil || alg.kind != kindString || alg.text != Alg {
		return Key{}, refuse("alg", "must be "+Alg)
	}
	typ := h.get("typ")
	if typ == nil || typ.kind != kindString || typ.text != Typ {
		return Key{}, refuse("typ", "must be "+Typ)
	}
	kid := h.get("kid")
	if kid == nil || kid.kind != kindString {
		return Key{}, refuse("kid", "is missing")
	}
	k, ok := ks.find(kid.text)
	if !ok {
		return Key{}, refuse("kid", fmt.Sprintf("%q is not a key of the key set", clip(kid.text)))
	}
	return k, nil
}

// payloadMembers are the payload's members in the order gated writes them.
var payloadMembers = []string{"v", "gid", "iss", "tenant", "proposal_id", "proposal_sha256", "action",
	"target_sha256", "policy_revision", "reviewers", "iat", "exp"}

func parseClaims(data []byte) (Claims, error) {
	p, err := parseJSON(data)
	if err != nil || p.kind != kindObject {
		return Claims{}, refuse("format", "payload is not a JSON object")
	}
	for _, m := range p.members {
		if !slices.Contains(payloadMembers, m.name) {
			return Claims{}, refuse(clip(m.name), "is not an allowed payload member")
		}
	}
	var c Claims
	strs := []struct {
		name string
		to   *string
	}{{"gid", &c.GID}, {"iss", &c.Iss}, {"tenant", &c.Tenant}, {"proposal_id", &c.ProposalID},
		{"proposal_sha256", &c.ProposalSHA256}, {"action", &c.Action}, {"target_sha256", &c.TargetSHA256},
		{"policy_revision", &c.PolicyRevision}}
	for _, s := range strs {
		m := p.get(s.name)
		if m == nil || m.kind != kindString {
			return Claims{}, refuse(s.name, "must be a string")
		}
		*s.to = m.text
	}
	ints := []struct {
		name string
		to   *int64
	}{{"iat", &c.IssuedAt}, {"exp", &c.ExpiresAt}}
	for _, s := range ints {
		n, ok := p.get(s.name).integer()
		if !ok {
			return Claims{}, refuse(s.name, "must be an integer")
		}
		*s.to = n
	}
	v, ok := p.get("v").integer()
	if !ok || v != Version {
		return Claims{}, refuse("v", fmt.Sprintf("must be %d", Version))
	}
	c.V = Version
	if c.Iss != Issuer {
		return Claims{}, refuse("iss", "must be "+Issuer)
	}
	if g, err := b64.DecodeString(c.GID); err != nil || len(g) != 16 {
		return Claims{}, refuse("gid", "must be 16 bytes in unpadded base64url")
	}
	rv := p.get("reviewers")
	if rv == nil || rv.kind != kindArray {
		return Claims{}, refuse("reviewers", "must be a list")
	}
	c.Reviewers = []Reviewer{}
	for _, item := range rv.items {
		r, ok := parseReviewer(item)
		if !ok {
			return Claims{}, refuse("reviewers", "entries must be {plugin, plugin_version, persona, model}, each a string")
		}
		c.Reviewers = append(c.Reviewers, r)
	}
	return c, nil
}

func parseReviewer(v *value) (Reviewer, bool) {
	if v.kind != kindObject || len(v.members) != 4 {
		return Reviewer{}, false
	}
	var r Reviewer
	for _, f := range []struct {
		name string
		to   *string
	}{{"plugin", &r.Plugin}, {"plugin_version", &r.PluginVersion}, {"persona", &r.Persona}, {"model", &r.Model}} {
		m := v.get(f.name)
		if m == nil || m.kind != kindString {
			return Reviewer{}, false
		}
		*f.to = m.text
	}
	return r, true
}

func checkKeyRules(c Claims, k Key, now time.Time) error {
	switch {
	case c.IssuedAt < k.CreatedAt:
		return refuse("iat", fmt.Sprintf("%d is before key %s was created (%d)", c.IssuedAt, k.KID, k.CreatedAt))
	case k.RetiredAt != nil && c.IssuedAt >= *k.RetiredAt:
		return refuse("retired", fmt.Sprintf("key %s was retired at %d, before the grant was issued (%d)", k.KID, *k.RetiredAt, c.IssuedAt))
	case k.RetiredAt != nil && c.ExpiresAt > *k.RetiredAt+k.MaxTTL:
		return refuse("retired", fmt.Sprintf("key %s, retired at %d, signs nothing that expires after %d", k.KID, *k.RetiredAt, *k.RetiredAt+k.MaxTTL))
	case c.ExpiresAt <= c.IssuedAt:
		return refuse("exp", "is not after iat")
	case c.ExpiresAt-c.IssuedAt > k.MaxTTL:
		return refuse("max_ttl", fmt.Sprintf("exp - iat is %d s, above key %s's max_ttl_s %d", c.ExpiresAt-c.IssuedAt, k.KID, k.MaxTTL))
	case c.IssuedAt > now.Unix()+int64(ClockSkew/time.Second):
		return refuse("iat", fmt.Sprintf("%d is in the future", c.IssuedAt))
	case now.Unix() >= c.ExpiresAt:
		return refuse("exp", fmt.Sprintf("grant expired at %s", time.Unix(c.ExpiresAt, 0).UTC().Format(time.RFC3339)))
	}
	return nil
}

func check(c Claims, want Expect) error {
	target := want.TargetSHA256
	if target == "" {
		var err error
		if target, err = TargetSHA256(want.Target); err != nil {
			return refuse("target_sha256", fmt.Sprintf("cannot be checked: %v", err))
		}
	}
	for _, f := range []struct{ member, got, want, what string }{
		{"tenant", c.Tenant, want.Tenant, "the tenant"},
		{"proposal_id", c.ProposalID, want.ProposalID, "the proposal id"},
		{"proposal_sha256", c.ProposalSHA256, want.ProposalSHA256, "the proposal's digest"},
		{"action", c.Action, want.Action, "the action"},
		{"target_sha256", c.TargetSHA256, target, "the target"},
	} {
		if f.want == "" {
			return refuse(f.member, "cannot be checked: the executor did not say "+f.what)
		}
		if f.got != f.want {
			return refuse(f.member, "does not match "+f.what)
		}
	}
	return nil
}

// ProposalSHA256 is the digest of the exact proposal bytes, as a grant
// and a verdict carry it.
func ProposalSHA256(proposal []byte) string {
	sum := sha256.Sum256(proposal)
	return hex.EncodeToString(sum[:])
}
