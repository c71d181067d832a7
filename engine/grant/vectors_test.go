package grant

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite test/vectors/grants.json")

const vectorsPath = "../../test/vectors/grants.json"

// vectorNow is the clock every vector is checked at unless it gives its own.
const vectorNow int64 = 1767225600 // 2026-01-01T00:00:00Z

type vectorFile struct {
	Comment string                     `json:"comment"`
	Now     int64                      `json:"now"`
	Keysets map[string]json.RawMessage `json:"keysets"`
	Seeds   map[string]string          `json:"seeds"`
	JCS     []jcsVector                `json:"jcs"`
	Grants  []grantVector              `json:"grants"`
}

type jcsVector struct {
	Name      string          `json:"name"`
	Target    json.RawMessage `json:"target,omitempty"`
	JSON      string          `json:"json"`
	Canonical string          `json:"canonical"`
	SHA256    string          `json:"sha256"`
}

type grantVector struct {
	Name        string       `json:"name"`
	Keyset      string       `json:"keyset"`
	Now         int64        `json:"now,omitempty"`
	Token       string       `json:"token"`
	Expect      vectorExpect `json:"expect"`
	Valid       bool         `json:"valid"`
	ErrorMember string       `json:"error_member,omitempty"`
	Claims      *Claims      `json:"claims,omitempty"`
}

type vectorExpect struct {
	Tenant         string `json:"tenant"`
	ProposalID     string `json:"proposal_id"`
	ProposalSHA256 string `json:"proposal_sha256"`
	Action         string `json:"action"`
	TargetJSON     string `json:"target_json"`
}

// testKey is a vector key: its seed is derived from its name, so the file
// is the same every time it is generated.
type testKey struct {
	seed []byte
	pub  ed25519.PublicKey
	kid  string
}

func newTestKey(name string) testKey {
	sum := sha256.Sum256([]byte("gated grant test vector key " + name))
	seed := sum[:]
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return testKey{seed: seed, pub: pub, kid: KeyID(pub)}
}

func (k testKey) public(created, maxTTL int64, retired *int64) Key {
	return Key{KID: k.kid, Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(k.pub), CreatedAt: created, RetiredAt: retired, MaxTTL: maxTTL}
}

// jcsTable is the canonicalisation table, its expected bytes written by
// hand (RFC 8785's own examples among them), not computed.
var jcsTable = []struct {
	name, json, canonical string
}{
	{"members sorted, white space dropped", `{ "service": "nginx", "device_id": 7, "tags": ["production"] }`, `{"device_id":7,"service":"nginx","tags":["production"]}`},
	{"nested objects sorted at every depth", `{"b":{"z":1,"a":[{"y":true,"x":null}]},"a":false}`, `{"a":false,"b":{"a":[{"x":null,"y":true}],"z":1}}`},
	{"RFC 8785 3.2.3 sorting by UTF-16 code units", `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
		"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
	{"RFC 8785 3.2.2.2 string escapes", `{"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"}`, `{"string":"€$\u000f\nA'B\"\\\\\"/"}`},
	{"control characters", "[\"\\u0000\\u0008\\u0009\\u000c\\u001f\\u007f\"]", "[\"\\u0000\\b\\t\\f\\u001f\u007f\"]"},
	{"RFC 8785 3.2.2.3 numbers", `{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]}`, `{"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}`},
	{"negative zero is 0", `[-0, -0.0, 0e10]`, `[0,0,0]`},
	{"integers up to 1e21 in plain notation", `[1e20, 1e21, 123456789012345678901]`, `[100000000000000000000,1e+21,123456789012345680000]`},
	{"small numbers switch to exponent at 1e-7", `[0.000001, 0.0000001, 1.5e-7]`, `[0.000001,1e-7,1.5e-7]`},
	{"integers beyond 2^53 round to the nearest double", `[9007199254740993, -9007199254740993]`, `[9007199254740992,-9007199254740992]`},
	{"double extremes", `[5e-324, 1.7976931348623157e308, -1.7976931348623157e308]`, `[5e-324,1.7976931348623157e+308,-1.7976931348623157e+308]`},
	{"non-ASCII kept as UTF-8, escapes decoded", `{"name":"caf\u00e9 \u2603","raw":"café ☃"}`, `{"name":"café ☃","raw":"café ☃"}`},
	{"the empty object", `{}`, `{}`},
	{"scalars at the top", `"x"`, `"x"`},
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// build generates the vector file.
func build(t *testing.T) vectorFile {
	t.Helper()
	now := vectorNow
	a, b, c, forger := newTestKey("a"), newTestKey("b"), newTestKey("c"), newTestKey("forger")
	retiredB := now - 120
	main := KeySet{Keys: []Key{a.public(now-86400, 300, nil), b.public(now-2*86400, 300, &retiredB)}}
	other := KeySet{Keys: []Key{c.public(now-86400, 300, nil)}}
	f := vectorFile{
		Comment: "gated grant vectors: generated by `go test ./engine/grant -run TestGrantVectors -update`; " +
			"the seeds are TEST ONLY keys, published here, never to be used anywhere else. " +
			"Every verifier must accept exactly the valid grants at `now` (or the case's own now) and refuse each invalid one " +
			"with an error naming error_member. docs/GRANTS.md describes the format.",
		Now:     now,
		Keysets: map[string]json.RawMessage{},
		Seeds:   map[string]string{},
	}
	for name, ks := range map[string]KeySet{"main": main, "other": other} {
		raw, err := json.Marshal(ks)
		if err != nil {
			t.Fatal(err)
		}
		f.Keysets[name] = raw
	}
	for _, k := range []testKey{a, b, c, forger} {
		f.Seeds[k.kid] = b64.EncodeToString(k.seed)
	}
	for _, j := range jcsTable {
		got, err := Canonicalize([]byte(j.json))
		if err != nil {
			t.Fatalf("%s: %v", j.name, err)
		}
		if string(got) != j.canonical {
			t.Fatalf("%s: canonical\n got %s\nwant %s", j.name, got, j.canonical)
		}
		f.JCS = append(f.JCS, jcsVector{Name: j.name, JSON: j.json, Canonical: j.canonical, SHA256: hexSHA(got)})
	}

	proposal := []byte(`{"v":1,"id":"restart-7","tenant":"acme","action":"host_restart_service","class":"write","target":{"device_id":7,"service":"nginx"}}`)
	target := `{"device_id":7,"service":"nginx"}`
	targetSHA, err := TargetSHA256([]byte(target))
	if err != nil {
		t.Fatal(err)
	}
	expect := vectorExpect{Tenant: "acme", ProposalID: "restart-7", ProposalSHA256: ProposalSHA256(proposal),
		Action: "host_restart_service", TargetJSON: target}
	base := Claims{V: 1, GID: "AAECAwQFBgcICQoLDA0ODw", Iss: Issuer, Tenant: "acme", ProposalID: "restart-7",
		ProposalSHA256: expect.ProposalSHA256, Action: "host_restart_service", TargetSHA256: targetSHA,
		PolicyRevision: "rev-1f2e3d", Reviewers: []Reviewer{{Plugin: "sop", PluginVersion: "1.0.0", Persona: "reviewer", Model: ""}},
		IssuedAt: now - 30, ExpiresAt: now + 270}
	signed := func(c Claims, k testKey) string {
		tok, err := sign(c, ed25519.NewKeyFromSeed(k.seed), k.kid)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	with := func(edit func(*Claims)) Claims {
		c := base
		c.Reviewers = append([]Reviewer(nil), base.Reviewers...)
		edit(&c)
		return c
	}
	// raw signs hand-made header and payload bytes with k.
	raw := func(hdr, payload string, k testKey) string {
		in := b64.EncodeToString([]byte(hdr)) + "." + b64.EncodeToString([]byte(payload))
		return in + "." + b64.EncodeToString(ed25519.Sign(ed25519.NewKeyFromSeed(k.seed), []byte(in)))
	}
	payloadOf := func(c Claims) string {
		p, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	hdrA := `{"alg":"EdDSA","typ":"gated-grant+jwt","kid":"` + a.kid + `"}`
	good := signed(base, a)
	// altered swaps the payload of a good token for p, keeping its signature.
	altered := func(p Claims) string {
		parts := strings.Split(good, ".")
		return parts[0] + "." + b64.EncodeToString([]byte(payloadOf(p))) + "." + parts[2]
	}
	valid := func(name string, tok string, c Claims, e vectorExpect) grantVector {
		c.Reviewers = append([]Reviewer{}, c.Reviewers...)
		return grantVector{Name: name, Keyset: "main", Token: tok, Expect: e, Valid: true, Claims: &c}
	}
	bad := func(name, member, tok string, e vectorExpect) grantVector {
		return grantVector{Name: name, Keyset: "main", Token: tok, Expect: e, ErrorMember: member}
	}
	expectWith := func(edit func(*vectorExpect)) vectorExpect {
		e := expect
		edit(&e)
		return e
	}
	reordered := `{"service":"nginx",  "device_id":7.0}`
	operator := with(func(c *Claims) {
		c.Reviewers = []Reviewer{{Plugin: "operator", Persona: "alice"}}
	})
	readOnly := with(func(c *Claims) { c.Reviewers = nil })
	rotated := with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now-200, now+100 })
	skew := with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now+30, now+300 })
	hs256 := func() string {
		h := `{"alg":"HS256","typ":"gated-grant+jwt","kid":"` + a.kid + `"}`
		in := b64.EncodeToString([]byte(h)) + "." + b64.EncodeToString([]byte(payloadOf(base)))
		m := hmac.New(sha256.New, a.pub)
		m.Write([]byte(in))
		return in + "." + b64.EncodeToString(m.Sum(nil))
	}()
	f.Grants = []grantVector{
		valid("a reviewed approval", good, base, expect),
		valid("the same target with other member order, spacing and number spelling", good, base, expectWith(func(e *vectorExpect) { e.TargetJSON = reordered })),
		valid("an operator's approval of a held action", signed(operator, a), operator, expect),
		valid("a policy-only approval names no reviewer", signed(readOnly, a), readOnly, expect),
		valid("a grant of a retired key issued before its retirement, still alive", signed(rotated, b), rotated, expect),
		valid("iat within the 60 s clock skew", signed(skew, a), skew, expect),
		func() grantVector {
			v := valid("the last second before exp", good, base, expect)
			v.Now = base.ExpiresAt - 1
			return v
		}(),
		bad("signed by a key not in the set under the kid of one that is", "signature", signed(base, testKey{seed: forger.seed, pub: forger.pub, kid: a.kid}), expect),
		bad("tenant altered after signing", "signature", altered(with(func(c *Claims) { c.Tenant = "evil" })), expect),
		bad("action altered after signing", "signature", altered(with(func(c *Claims) { c.Action = "drop_table" })), expect),
		bad("target_sha256 altered after signing", "signature", altered(with(func(c *Claims) { c.TargetSHA256 = strings.Repeat("0", 64) })), expect),
		bad("exp altered after signing", "signature", altered(with(func(c *Claims) { c.ExpiresAt += 3600 })), expect),
		bad("proposal_sha256 altered after signing", "signature", altered(with(func(c *Claims) { c.ProposalSHA256 = strings.Repeat("a", 64) })), expect),
		bad("reviewers altered after signing", "signature", altered(with(func(c *Claims) { c.Reviewers[0].Persona = "lenient" })), expect),
		bad("the signature of another grant", "signature", strings.Join(strings.Split(good, ".")[:2], ".")+"."+strings.Split(signed(readOnly, a), ".")[2], expect),
		func() grantVector {
			v := bad("expired", "exp", good, expect)
			v.Now = base.ExpiresAt
			return v
		}(),
		bad("expired long ago", "exp", signed(with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now-400, now-100 }), a), expect),
		bad("issued in the future beyond the clock skew", "iat", signed(with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now+120, now+300 }), a), expect),
		bad("issued before its key was created", "iat", signed(with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now-86400-10, now-86400+200 }), a), expect),
		bad("exp - iat beyond the key's max_ttl_s", "max_ttl", signed(with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now-10, now+400 }), a), expect),
		bad("exp not after iat", "exp", signed(with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now, now }), a), expect),
		bad("a retired key used after its retirement", "retired", signed(with(func(c *Claims) { c.IssuedAt, c.ExpiresAt = now-60, now+200 }), b), expect),
		bad("another tenant's grant", "tenant", signed(with(func(c *Claims) { c.Tenant = "globex" }), a), expect),
		bad("another proposal's id", "proposal_id", good, expectWith(func(e *vectorExpect) { e.ProposalID = "restart-8" })),
		bad("another proposal's digest", "proposal_sha256", good, expectWith(func(e *vectorExpect) { e.ProposalSHA256 = hexSHA([]byte("other proposal")) })),
		bad("another action", "action", good, expectWith(func(e *vectorExpect) { e.Action = "host_stop_service" })),
		bad("another target", "target_sha256", good, expectWith(func(e *vectorExpect) { e.TargetJSON = `{"device_id":8,"service":"nginx"}` })),
		bad("a target with a number JCS cannot write", "target_sha256", good, expectWith(func(e *vectorExpect) { e.TargetJSON = `{"device_id":1e400}` })),
		bad("a target with duplicate members", "target_sha256", good, expectWith(func(e *vectorExpect) { e.TargetJSON = `{"device_id":7,"device_id":8,"service":"nginx"}` })),
		bad("a target with an unpaired surrogate", "target_sha256", good, expectWith(func(e *vectorExpect) { e.TargetJSON = `{"service":"\ud800"}` })),
		bad("alg none without a signature", "alg", b64.EncodeToString([]byte(`{"alg":"none","typ":"gated-grant+jwt","kid":"`+a.kid+`"}`))+"."+b64.EncodeToString([]byte(payloadOf(base)))+".", expect),
		bad("alg HS256 keyed with the public key", "alg", hs256, expect),
		bad("typ JWT", "typ", raw(`{"alg":"EdDSA","typ":"JWT","kid":"`+a.kid+`"}`, payloadOf(base), a), expect),
		bad("a jku header member", "jku", raw(`{"alg":"EdDSA","typ":"gated-grant+jwt","kid":"`+a.kid+`","jku":"https://example.com/keys"}`, payloadOf(base), a), expect),
		bad("a jwk header member", "jwk", raw(`{"alg":"EdDSA","typ":"gated-grant+jwt","kid":"`+a.kid+`","jwk":{"kty":"OKP"}}`, payloadOf(base), a), expect),
		bad("a crit header member", "crit", raw(`{"alg":"EdDSA","typ":"gated-grant+jwt","kid":"`+a.kid+`","crit":["exp"]}`, payloadOf(base), a), expect),
		bad("no kid", "kid", raw(`{"alg":"EdDSA","typ":"gated-grant+jwt"}`, payloadOf(base), a), expect),
		bad("a kid the key set does not hold", "kid", signed(base, c), expect),
		func() grantVector {
			v := bad("a valid grant checked against another key set", "kid", good, expect)
			v.Keyset = "other"
			return v
		}(),
		bad("v 2", "v", signed(with(func(c *Claims) { c.V = 2 }), a), expect),
		bad("iss not gated", "iss", signed(with(func(c *Claims) { c.Iss = "someone" }), a), expect),
		bad("gid not 16 bytes", "gid", signed(with(func(c *Claims) { c.GID = "short" }), a), expect),
		bad("an unknown payload member", "extra", raw(hdrA, strings.TrimSuffix(payloadOf(base), "}")+`,"extra":true}`, a), expect),
		bad("a missing payload member", "policy_revision", raw(hdrA, strings.Replace(payloadOf(base), `"policy_revision":"rev-1f2e3d",`, "", 1), a), expect),
		bad("iat as a string", "iat", raw(hdrA, strings.Replace(payloadOf(base), `"iat":`+itoa(base.IssuedAt), `"iat":"`+itoa(base.IssuedAt)+`"`, 1), a), expect),
		bad("exp with a fraction", "exp", raw(hdrA, strings.Replace(payloadOf(base), `"exp":`+itoa(base.ExpiresAt), `"exp":`+itoa(base.ExpiresAt)+`.5`, 1), a), expect),
		bad("a reviewer with a missing member", "reviewers", raw(hdrA, strings.Replace(payloadOf(base), `,"model":""`, "", 1), a), expect),
		bad("a payload member twice", "format", raw(hdrA, strings.Replace(payloadOf(base), `"tenant":"acme"`, `"tenant":"acme","tenant":"globex"`, 1), a), expect),
		bad("two parts", "format", strings.Join(strings.Split(good, ".")[:2], "."), expect),
		bad("padded base64", "format", strings.Replace(good, ".", "=.", 1), expect),
		bad("not a token", "format", "grant", expect),
	}
	return f
}

func itoa(n int64) string { return strings.TrimSpace(string(mustMarshal(n))) }

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func encodeVectors(t *testing.T, f vectorFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGrantVectors checks that the generator reproduces
// test/vectors/grants.json (rewrite it with -update) and that Verify
// accepts exactly its valid grants and refuses each invalid one naming
// its member.
func TestGrantVectors(t *testing.T) {
	want := encodeVectors(t, build(t))
	if *update {
		if err := os.WriteFile(vectorsPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.FromSlash(vectorsPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the generator writes: run go test ./engine/grant -run TestGrantVectors -update", vectorsPath)
	}
	var f vectorFile
	if err := json.Unmarshal(got, &f); err != nil {
		t.Fatal(err)
	}
	sets := map[string]KeySet{}
	for name, raw := range f.Keysets {
		ks, err := ParseKeySet(raw)
		if err != nil {
			t.Fatalf("keyset %s: %v", name, err)
		}
		sets[name] = ks
	}
	for _, j := range f.JCS {
		t.Run("jcs/"+j.Name, func(t *testing.T) {
			c, err := Canonicalize([]byte(j.JSON))
			if err != nil {
				t.Fatal(err)
			}
			if string(c) != j.Canonical {
				t.Errorf("canonical %s, want %s", c, j.Canonical)
			}
			d, err := TargetSHA256([]byte(j.JSON))
			if err != nil || d != j.SHA256 {
				t.Errorf("TargetSHA256 = %s, %v; want %s", d, err, j.SHA256)
			}
		})
	}
	for _, g := range f.Grants {
		t.Run(g.Name, func(t *testing.T) {
			now := f.Now
			if g.Now != 0 {
				now = g.Now
			}
			c, err := Verify(g.Token, sets[g.Keyset], time.Unix(now, 0), Expect{
				Tenant: g.Expect.Tenant, ProposalID: g.Expect.ProposalID, ProposalSHA256: g.Expect.ProposalSHA256,
				Action: g.Expect.Action, Target: []byte(g.Expect.TargetJSON),
			})
			if g.Valid {
				if err != nil {
					t.Fatalf("refused a valid grant: %v", err)
				}
				if gotC, wantC := mustMarshal(c), mustMarshal(g.Claims); !bytes.Equal(gotC, wantC) {
					t.Errorf("claims\n got %s\nwant %s", gotC, wantC)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted an invalid grant (want refusal naming %s)", g.ErrorMember)
			}
			var ge *Error
			if !errorsAs(err, &ge) || ge.Member != g.ErrorMember || !strings.Contains(err.Error(), g.ErrorMember) {
				t.Errorf("error %q does not name %s", err, g.ErrorMember)
			}
		})
	}
}
