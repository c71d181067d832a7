package grant

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFormatNumber(t *testing.T) {
	cases := []struct {
		note string
		f    float64
		want string
	}{
		{"zero", 0, "0"},
		{"negative zero", math.Copysign(0, -1), "0"},
		{"integer", 7, "7"},
		{"negative fraction", -2.5, "-2.5"},
		{"1e21 switches to exponent", 1e21, "1e+21"},
		{"below 1e21 stays plain", 999999999999999900000, "999999999999999900000"},
		{"1e-6 stays plain", 1e-6, "0.000001"},
		{"1e-7 switches to exponent", 1e-7, "1e-7"},
		{"exponent with fraction", 1.25e-10, "1.25e-10"},
		{"smallest subnormal", 5e-324, "5e-324"},
		{"largest double", math.MaxFloat64, "1.7976931348623157e+308"},
		{"shortest round trip", 0.30000000000000004, "0.30000000000000004"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			if got := FormatNumber(tc.f); got != tc.want {
				t.Errorf("FormatNumber(%v) = %s, want %s", tc.f, got, tc.want)
			}
		})
	}
}

// TestFormatNumberRoundTrips: every spelling reads back as the same double.
func TestFormatNumberRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		s := FormatNumber(f)
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != f && !(f == 0 && back == 0) {
			t.Fatalf("FormatNumber(%v) = %s reads back as %v, %v", f, s, back, err)
		}
	}
}

func TestCanonicalizeRefuses(t *testing.T) {
	cases := []struct {
		note, json, want string
	}{
		{"number beyond the double range", `{"n":1e400}`, "outside the IEEE-754 double range"},
		{"negative number beyond the double range", `[-1e309]`, "outside the IEEE-754 double range"},
		{"duplicate member", `{"a":1,"a":2}`, `duplicate member "a"`},
		{"unpaired high surrogate", `["\ud800"]`, "unpaired surrogate"},
		{"unpaired low surrogate", `["\udc00x"]`, "unpaired surrogate"},
		{"invalid UTF-8", "[\"\xff\"]", "not valid UTF-8"},
		{"trailing data", `{} {}`, "data after its value"},
		{"leading zero", `[01]`, "leading zero"},
		{"NaN", `[NaN]`, "unexpected character"},
		{"too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested deeper"},
		{"empty", ``, "unexpected end"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			_, err := Canonicalize([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Canonicalize(%q) = %v, want an error containing %q", tc.json, err, tc.want)
			}
		})
	}
}

func TestTargetSHA256OfNoTarget(t *testing.T) {
	empty, err := TargetSHA256([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"", "null", " null "} {
		got, err := TargetSHA256([]byte(in))
		if err != nil || got != empty {
			t.Errorf("TargetSHA256(%q) = %s, %v; want the digest of {} %s", in, got, err, empty)
		}
	}
}

func expectOf(c Claims, target string) Expect {
	return Expect{Tenant: c.Tenant, ProposalID: c.ProposalID, ProposalSHA256: c.ProposalSHA256, Action: c.Action, Target: []byte(target)}
}

func testClaims(t *testing.T, target string) Claims {
	t.Helper()
	d, err := TargetSHA256([]byte(target))
	if err != nil {
		t.Fatal(err)
	}
	return Claims{Tenant: "acme", ProposalID: "p1", ProposalSHA256: ProposalSHA256([]byte("proposal")),
		Action: "host_restart_service", TargetSHA256: d, PolicyRevision: "r1"}
}

// TestRingRotation: a grant of the key a rotation retires verifies until
// its expiry, under the key set published after the rotation; the retired
// key stays published until no grant of it can be alive, and a grant it
// signs after its retirement never verifies.
func TestRingRotation(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ring, err := NewRing(t0, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := testClaims(t, `{"service":"nginx"}`)
	old, claims, err := ring.Issue(c, t0.Add(time.Minute), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	oldKey := ring.active()
	if err := ring.Rotate(t0.Add(2*time.Minute), 0, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The ring round-trips through its key file.
	data, err := json.Marshal(ring)
	if err != nil {
		t.Fatal(err)
	}
	if ring, err = ParseRing(data); err != nil {
		t.Fatal(err)
	}
	want := expectOf(c, `{"service":"nginx"}`)
	published := ring.Public(t0.Add(2 * time.Minute))
	if len(published.Keys) != 2 {
		t.Fatalf("after a rotation the key set holds %d keys, want the new and the retired one", len(published.Keys))
	}
	t.Run("old grant valid until its expiry", func(t *testing.T) {
		if _, err := Verify(old, published, claims.Expires().Add(-time.Second), want); err != nil {
			t.Fatalf("a grant of the retired key was refused before its expiry: %v", err)
		}
		if _, err := Verify(old, published, claims.Expires(), want); err == nil || !strings.Contains(err.Error(), "exp") {
			t.Fatalf("at its expiry: %v, want a refusal naming exp", err)
		}
	})
	t.Run("new key signs", func(t *testing.T) {
		tok, _, err := ring.Issue(c, t0.Add(3*time.Minute), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(tok, published, t0.Add(3*time.Minute), want); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("retired key signing after its retirement", func(t *testing.T) {
		forged := c
		forged.V, forged.Iss, forged.GID = Version, Issuer, "AAAAAAAAAAAAAAAAAAAAAA"
		forged.IssuedAt, forged.ExpiresAt = t0.Add(3*time.Minute).Unix(), t0.Add(4*time.Minute).Unix()
		tok, err := sign(forged, oldKey.priv, oldKey.KID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(tok, published, t0.Add(3*time.Minute), want); err == nil || !strings.Contains(err.Error(), "retired") {
			t.Fatalf("got %v, want a refusal naming retired", err)
		}
	})
	t.Run("retired key dropped once its grants are dead", func(t *testing.T) {
		// Retired the second after the rotation (t0+2m), kept max_ttl_s.
		dead := t0.Add(2*time.Minute + time.Second + 5*time.Minute)
		if before := ring.Public(dead.Add(-time.Second)); len(before.Keys) != 2 {
			t.Fatalf("a second before its last grant can expire the retired key is gone: %+v", before)
		}
		later := ring.Public(dead)
		if len(later.Keys) != 1 || later.Keys[0].KID == oldKey.KID {
			t.Fatalf("at retired_at + max_ttl_s the key set is %+v, want the active key only", later)
		}
	})
	t.Run("a grant of the same second as the rotation", func(t *testing.T) {
		r, err := NewRing(t0, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Minute + 300*time.Millisecond)
		tok, _, err := r.Issue(c, at, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Rotate(at.Add(100*time.Millisecond), 0, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(tok, r.Public(at), at, want); err != nil {
			t.Fatalf("a rotation invalidated a grant issued the same second before it: %v", err)
		}
	})
}

func TestIssueRefusesLifetimeBeyondKey(t *testing.T) {
	ring, err := NewRing(time.Unix(1_800_000_000, 0), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ring.Issue(testClaims(t, `{}`), time.Unix(1_800_000_100, 0), 2*time.Minute); err == nil || !strings.Contains(err.Error(), "max_ttl_s") {
		t.Fatalf("got %v, want a refusal naming max_ttl_s", err)
	}
}

func TestParseKeySetRefuses(t *testing.T) {
	ring, err := NewRing(time.Unix(1_800_000_000, 0), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	k := ring.Active()
	good, _ := json.Marshal(KeySet{Keys: []Key{k}})
	if _, err := ParseKeySet(good); err != nil {
		t.Fatalf("a key set gated writes: %v", err)
	}
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		_ = json.Unmarshal(mustMarshal(k), &m)
		f(m)
		return `{"keys":[` + string(mustMarshal(m)) + `]}`
	}
	cases := []struct{ note, json, want string }{
		{"unknown member", edit(func(m map[string]any) { m["d"] = "secret" }), `member "d" is not allowed`},
		{"other curve", edit(func(m map[string]any) { m["crv"] = "X25519" }), "only OKP Ed25519"},
		{"kid not of the key", edit(func(m map[string]any) { m["kid"] = "AAAAAAAAAAAAAAAAAAAAAA" }), "is not the key's id"},
		{"short x", edit(func(m map[string]any) { m["x"] = "AAAA" }), "x must be 32 bytes"},
		{"no max_ttl_s", edit(func(m map[string]any) { delete(m, "max_ttl_s") }), "max_ttl_s must be a positive integer"},
		{"retired before created", edit(func(m map[string]any) { m["retired_at"] = 1 }), "is before created_at"},
		{"a key twice", `{"keys":[` + string(mustMarshal(k)) + `,` + string(mustMarshal(k)) + `]}`, "appears twice"},
		{"not an object", `[]`, "want a JSON object"},
		{"extra top-level member", `{"keys":[],"x":1}`, `member "x" is not allowed`},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			_, err := ParseKeySet([]byte(tc.json))
			if !errors.Is(err, ErrInvalidKeySet) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseKeySet = %v, want ErrInvalidKeySet containing %q", err, tc.want)
			}
		})
	}
}

func TestMergeKeepsRetirement(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ring, err := NewRing(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := ring.Public(now)
	if err := ring.Rotate(now.Add(time.Second), 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	after := ring.Public(now.Add(time.Second))
	merged := Merge(now.Add(time.Second), after, before)
	if len(merged.Keys) != 2 {
		t.Fatalf("merged %d keys, want 2", len(merged.Keys))
	}
	for _, k := range merged.Keys {
		if k.KID == before.Keys[0].KID && k.RetiredAt == nil {
			t.Fatal("a stale copy of the key set undid a retirement")
		}
	}
	if m := Merge(now.Add(2*time.Minute), after); len(m.Keys) != 1 {
		t.Fatalf("a key retired past its max_ttl_s was kept: %+v", m)
	}
}

func FuzzCanonicalize(f *testing.F) {
	for _, j := range jcsTable {
		f.Add([]byte(j.json))
	}
	f.Add([]byte(`{"a":1e400}`))
	f.Add([]byte(`["\ud83d\ude00","\ud800"]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Canonicalize(data)
		if err != nil {
			return
		}
		again, err := Canonicalize(c)
		if err != nil || string(again) != string(c) {
			t.Fatalf("canonical form %q is not canonical: %q, %v", c, again, err)
		}
		var in, out any
		if json.Unmarshal(data, &in) != nil {
			t.Fatalf("accepted %q, which encoding/json refuses", data)
		}
		if err := json.Unmarshal(c, &out); err != nil || !reflect.DeepEqual(in, out) {
			t.Fatalf("canonical %q of %q reads as %v, not %v (%v)", c, data, out, in, err)
		}
	})
}

// acmeToken is a grant of proposal p of tenant acme, issued at now by a
// new ring for a minute, with the ring's key set.
func acmeToken(tb testing.TB) (time.Time, string, KeySet) {
	tb.Helper()
	now := time.Unix(1_800_000_000, 0)
	ring, err := NewRing(now.Add(-time.Hour), 5*time.Minute)
	if err != nil {
		tb.Fatal(err)
	}
	c := Claims{Tenant: "acme", ProposalID: "p", ProposalSHA256: ProposalSHA256(nil), Action: "a", TargetSHA256: mustDigest(`{}`)}
	tok, _, err := ring.Issue(c, now, time.Minute)
	if err != nil {
		tb.Fatal(err)
	}
	return now, tok, ring.Public(now)
}

func FuzzVerify(f *testing.F) {
	now, tok, ks := acmeToken(f)
	want := Expect{Tenant: "acme", ProposalID: "p", ProposalSHA256: ProposalSHA256(nil), Action: "a"}
	f.Add(tok)
	f.Add(strings.Replace(tok, ".", "..", 1))
	f.Add("e30.e30.")
	f.Fuzz(func(t *testing.T, token string) {
		got, err := Verify(token, ks, now, want)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("refusal %v is not an *Error", err)
			}
			return
		}
		if got.Tenant != "acme" || got.ExpiresAt <= now.Unix() || got.GID == "" {
			t.Fatalf("accepted %q with claims %+v", token, got)
		}
	})
}

func mustDigest(s string) string {
	d, err := TargetSHA256([]byte(s))
	if err != nil {
		panic(err)
	}
	return d
}

func FuzzParseKeySet(f *testing.F) {
	ring, err := NewRing(time.Unix(1_800_000_000, 0), time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	_ = ring.Rotate(time.Unix(1_800_000_010, 0), 0, time.Minute)
	f.Add(mustMarshal(ring.Public(time.Unix(1_800_000_010, 0))))
	f.Add([]byte(`{"keys":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ks, err := ParseKeySet(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidKeySet) {
				t.Fatalf("error %v does not wrap ErrInvalidKeySet", err)
			}
			return
		}
		again, err := ParseKeySet(mustMarshal(ks))
		if err != nil || !reflect.DeepEqual(again, ks) {
			t.Fatalf("a parsed key set does not round-trip: %v", err)
		}
	})
}

// BenchmarkIssue signs one grant per iteration with a ring's active key.
func BenchmarkIssue(b *testing.B) {
	t0 := time.Unix(1_800_000_000, 0)
	ring, err := NewRing(t0, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	d, err := TargetSHA256([]byte(`{"service":"nginx"}`))
	if err != nil {
		b.Fatal(err)
	}
	c := Claims{Tenant: "acme", ProposalID: "p1", ProposalSHA256: ProposalSHA256([]byte("proposal")),
		Action: "host_restart_service", TargetSHA256: d, PolicyRevision: "r1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ring.Issue(c, t0.Add(time.Minute), 5*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
