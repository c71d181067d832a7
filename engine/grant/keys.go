package grant

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// ClockSkew is how far in the future a grant's iat may lie and still
// verify: the clocks of gated and an executor may differ by this much.
const ClockSkew = 60 * time.Second

// b64 is unpadded base64url, strict: no padding, no other alphabet, no
// stray bits.
var b64 = base64.RawURLEncoding.Strict()

// KeyID is the kid of an Ed25519 public key: the first 16 bytes of the
// SHA-256 of the raw key, unpadded base64url (22 characters).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return b64.EncodeToString(sum[:16])
}

// Key is one public key of a key set: a JWK (kty OKP, crv Ed25519, x)
// with gated's three members. A grant verifies under it only within the
// rules of Verify: issued at or after CreatedAt, before RetiredAt when it
// is retired, and living at most MaxTTL seconds.
type Key struct {
	KID       string `json:"kid"`
	Kty       string `json:"kty"`
	Crv       string `json:"crv"`
	X         string `json:"x"`
	CreatedAt int64  `json:"created_at"`
	// RetiredAt is absent while the key is the active one.
	RetiredAt *int64 `json:"retired_at,omitempty"`
	MaxTTL    int64  `json:"max_ttl_s"`
}

// KeySet is the public key set gated publishes on gated.grants.keys.
type KeySet struct {
	Keys []Key `json:"keys"`
}

// publicKey returns k's raw key; ParseKeySet has checked it.
func (k Key) publicKey() ed25519.PublicKey {
	raw, _ := b64.DecodeString(k.X)
	return ed25519.PublicKey(raw)
}

// find returns the key named kid.
func (ks KeySet) find(kid string) (Key, bool) {
	for _, k := range ks.Keys {
		if k.KID == kid {
			return k, true
		}
	}
	return Key{}, false
}

// ParseKeySet reads a key set strictly: no unknown members, every key an
// Ed25519 OKP key whose kid is KeyID of its x, created_at and max_ttl_s
// positive, retired_at (when present) not before created_at, no kid twice.
// Errors wrap ErrInvalidKeySet.
func ParseKeySet(data []byte) (KeySet, error) {
	v, err := parseJSON(data)
	if err != nil {
		return KeySet{}, fmt.Errorf("%w: %w", ErrInvalidKeySet, err)
	}
	if v.kind != kindObject {
		return KeySet{}, fmt.Errorf("%w: want a JSON object, not a %s", ErrInvalidKeySet, v.kind)
	}
	ks := KeySet{Keys: []Key{}}
	for _, m := range v.members {
		if m.name != "keys" {
			return KeySet{}, fmt.Errorf("%w: member %q is not allowed", ErrInvalidKeySet, m.name)
		}
	}
	keys := v.get("keys")
	if keys == nil || keys.kind != kindArray {
		return KeySet{}, fmt.Errorf("%w: keys must be a list", ErrInvalidKeySet)
	}
	for i, kv := range keys.items {
		k, err := parseKey(kv, false)
		if err != nil {
			return KeySet{}, fmt.Errorf("%w: keys[%d]: %w", ErrInvalidKeySet, i, err)
		}
		if _, dup := ks.find(k.KID); dup {
			return KeySet{}, fmt.Errorf("%w: keys[%d]: kid %s appears twice", ErrInvalidKeySet, i, k.KID)
		}
		ks.Keys = append(ks.Keys, k.Key)
	}
	return ks, nil
}

// privateKey is a Key with its seed, as gated's key file holds it.
type privateKey struct {
	Key
	seed []byte
	// priv is the signing key derived from seed, once: deriving it is a
	// scalar multiplication, as costly as the signature itself.
	priv ed25519.PrivateKey
}

// parseKey reads one key object; withSeed says the object is a key file's
// entry, which holds seed instead of kty, crv and x.
func parseKey(v *value, withSeed bool) (privateKey, error) {
	if v.kind != kindObject {
		return privateKey{}, fmt.Errorf("want an object, not a %s", v.kind)
	}
	allowed := []string{"kid", "kty", "crv", "x", "created_at", "retired_at", "max_ttl_s"}
	if withSeed {
		allowed = []string{"kid", "seed", "created_at", "retired_at", "max_ttl_s"}
	}
	for _, m := range v.members {
		if !slices.Contains(allowed, m.name) {
			return privateKey{}, fmt.Errorf("member %q is not allowed", m.name)
		}
	}
	str := func(name string) (string, error) {
		m := v.get(name)
		if m == nil || m.kind != kindString {
			return "", fmt.Errorf("%s must be a string", name)
		}
		return m.text, nil
	}
	num := func(name string) (int64, error) {
		n, ok := v.get(name).integer()
		if !ok || n <= 0 {
			return 0, fmt.Errorf("%s must be a positive integer", name)
		}
		return n, nil
	}
	var (
		k   privateKey
		err error
	)
	if k.KID, err = str("kid"); err != nil {
		return k, err
	}
	var pub ed25519.PublicKey
	if withSeed {
		s, err := str("seed")
		if err != nil {
			return k, err
		}
		if k.seed, err = b64.DecodeString(s); err != nil || len(k.seed) != ed25519.SeedSize {
			return k, fmt.Errorf("seed must be %d bytes in unpadded base64url", ed25519.SeedSize)
		}
		k.priv = ed25519.NewKeyFromSeed(k.seed)
		pub = k.priv.Public().(ed25519.PublicKey)
		k.Kty, k.Crv, k.X = "OKP", "Ed25519", b64.EncodeToString(pub)
	} else {
		if k.Kty, err = str("kty"); err != nil {
			return k, err
		}
		if k.Crv, err = str("crv"); err != nil {
			return k, err
		}
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			return k, fmt.Errorf("kty %q crv %q: only OKP Ed25519 keys are allowed", k.Kty, k.Crv)
		}
		if k.X, err = str("x"); err != nil {
			return k, err
		}
		raw, derr := b64.DecodeString(k.X)
		if derr != nil || len(raw) != ed25519.PublicKeySize {
			return k, fmt.Errorf("x must be %d bytes in unpadded base64url", ed25519.PublicKeySize)
		}
		pub = raw
	}
	if want := KeyID(pub); k.KID != want {
		return k, fmt.Errorf("kid %q is not the key's id %s", clip(k.KID), want)
	}
	if k.CreatedAt, err = num("created_at"); err != nil {
		return k, err
	}
	if k.MaxTTL, err = num("max_ttl_s"); err != nil {
		return k, err
	}
	if v.get("retired_at") != nil {
		r, err := num("retired_at")
		if err != nil {
			return k, err
		}
		if r < k.CreatedAt {
			return k, fmt.Errorf("retired_at %d is before created_at %d", r, k.CreatedAt)
		}
		k.RetiredAt = &r
	}
	return k, nil
}

// Ring is gated's signing keys: the active key, which signs, and the
// retired keys whose grants may still be alive. It is kept as a JSON key
// file, {"keys":[{"kid","seed","created_at","retired_at","max_ttl_s"}]},
// the seed being the Ed25519 private key seed in unpadded base64url.
type Ring struct {
	keys []privateKey
}

// NewRing returns a ring with one new active key, created at now, whose
// grants may live up to maxTTL.
func NewRing(now time.Time, maxTTL time.Duration) (*Ring, error) {
	r := &Ring{}
	if err := r.add(now, maxTTL); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Ring) add(now time.Time, maxTTL time.Duration) error {
	if err := checkTTL(maxTTL); err != nil {
		return err
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return fmt.Errorf("creating a grant key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	r.keys = append(r.keys, privateKey{Key: Key{
		KID: KeyID(pub), Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(pub),
		CreatedAt: now.Unix(), MaxTTL: int64(maxTTL / time.Second),
	}, seed: seed, priv: priv})
	return nil
}

// MinTTL and MaxTTL bound a grant's lifetime.
const (
	MinTTL = 5 * time.Second
	MaxTTL = 24 * time.Hour
)

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL || ttl%time.Second != 0 {
		return fmt.Errorf("grant lifetime %s must be whole seconds between %s and %s", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ParseRing reads a key file. It must hold exactly one active key (no
// retired_at); errors wrap ErrInvalidKeySet.
func ParseRing(data []byte) (*Ring, error) {
	v, err := parseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKeySet, err)
	}
	if v.kind != kindObject || len(v.members) != 1 || v.get("keys") == nil || v.get("keys").kind != kindArray {
		return nil, fmt.Errorf(`%w: a key file is {"keys":[...]}`, ErrInvalidKeySet)
	}
	r := &Ring{}
	active := 0
	for i, kv := range v.get("keys").items {
		k, err := parseKey(kv, true)
		if err != nil {
			return nil, fmt.Errorf("%w: keys[%d]: %w", ErrInvalidKeySet, i, err)
		}
		if slices.ContainsFunc(r.keys, func(o privateKey) bool { return o.KID == k.KID }) {
			return nil, fmt.Errorf("%w: keys[%d]: kid %s appears twice", ErrInvalidKeySet, i, k.KID)
		}
		if k.RetiredAt == nil {
			active++
		}
		r.keys = append(r.keys, k)
	}
	if active != 1 {
		return nil, fmt.Errorf("%w: a key file holds exactly one active key (without retired_at), not %d", ErrInvalidKeySet, active)
	}
	return r, nil
}

// MarshalJSON writes the key file, seeds included: keep it secret.
func (r *Ring) MarshalJSON() ([]byte, error) {
	type entry struct {
		KID       string `json:"kid"`
		Seed      string `json:"seed"`
		CreatedAt int64  `json:"created_at"`
		RetiredAt *int64 `json:"retired_at,omitempty"`
		MaxTTL    int64  `json:"max_ttl_s"`
	}
	out := struct {
		Keys []entry `json:"keys"`
	}{Keys: []entry{}}
	for _, k := range r.keys {
		out.Keys = append(out.Keys, entry{k.KID, b64.EncodeToString(k.seed), k.CreatedAt, k.RetiredAt, k.MaxTTL})
	}
	return json.Marshal(out)
}

// Active returns the public half of the key that signs.
func (r *Ring) Active() Key {
	for _, k := range r.keys {
		if k.RetiredAt == nil {
			return k.Key
		}
	}
	return Key{}
}

func (r *Ring) active() privateKey {
	for _, k := range r.keys {
		if k.RetiredAt == nil {
			return k
		}
	}
	return privateKey{}
}

// Rotate makes a new key, created at now, whose grants may live up to
// maxTTL, the active one, and retires the key that was active the second
// after now + grace: a gated that has not yet read the rotated key file may sign with
// the old key until then, and its grants verify. Keys retired long enough
// that no grant of theirs can be alive are dropped.
func (r *Ring) Rotate(now time.Time, grace, maxTTL time.Duration) error {
	if grace < 0 {
		return fmt.Errorf("rotating the grant key: grace %s is negative", grace)
	}
	// The first whole second after now + grace: a grant the old key
	// signed in the same second as the rotation has iat < retired_at, so
	// the rotation does not invalidate it.
	at := now.Add(grace).Unix() + 1
	for i := range r.keys {
		if r.keys[i].RetiredAt == nil {
			r.keys[i].RetiredAt = &at
		}
	}
	if err := r.add(now, maxTTL); err != nil {
		return err
	}
	r.prune(now)
	return nil
}

// prune drops retired keys whose retired_at + max_ttl_s has passed.
func (r *Ring) prune(now time.Time) {
	r.keys = slices.DeleteFunc(r.keys, func(k privateKey) bool { return expiredKey(k.Key, now) })
}

func expiredKey(k Key, now time.Time) bool {
	return k.RetiredAt != nil && now.Unix() >= *k.RetiredAt+k.MaxTTL
}

// Public returns the key set to publish at now: every key of the ring but
// those retired long enough that no grant of theirs can be alive.
func (r *Ring) Public(now time.Time) KeySet {
	ks := KeySet{Keys: []Key{}}
	for _, k := range r.keys {
		if !expiredKey(k.Key, now) {
			ks.Keys = append(ks.Keys, k.Key)
		}
	}
	return ks
}

// Merge returns ks with the keys of others that it lacks, less those
// retired long enough that no grant of theirs can be alive at now. A kid
// present in both keeps the entry that is retired (a retirement is never
// undone by a stale copy).
func Merge(now time.Time, sets ...KeySet) KeySet {
	out := KeySet{Keys: []Key{}}
	for _, ks := range sets {
		for _, k := range ks.Keys {
			if expiredKey(k, now) {
				continue
			}
			i := slices.IndexFunc(out.Keys, func(o Key) bool { return o.KID == k.KID })
			switch {
			case i < 0:
				out.Keys = append(out.Keys, k)
			case out.Keys[i].RetiredAt == nil && k.RetiredAt != nil:
				out.Keys[i] = k
			}
		}
	}
	return out
}
