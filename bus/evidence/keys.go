package evidence

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Keys is a checkpoint key file: the signer's key on its first line
// (note's "PRIVATE+KEY+<name>+<hash>+<key>"), then the public keys of
// the keys it replaced, one a line ("<name>+<hash>+<key>"), kept so that
// the checkpoints they signed still verify.
type Keys struct {
	Signer note.Signer
	// Public is the signer's public key, then the earlier ones.
	Public []string
}

// NewKeyFile is a key file with one new key named name, the log's name
// (a host name or similar: it begins every origin line).
func NewKeyFile(name string) ([]byte, error) {
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return nil, fmt.Errorf("generating a checkpoint key: %w", err)
	}
	return []byte(skey + "\n"), nil
}

// ParseKeys reads a key file.
func ParseKeys(data []byte) (*Keys, error) {
	lines := strings.Fields(string(data))
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "PRIVATE+KEY+") {
		return nil, errors.New("a checkpoint key file begins with a PRIVATE+KEY+ line")
	}
	s, err := note.NewSigner(lines[0])
	if err != nil {
		return nil, fmt.Errorf("the checkpoint signing key: %w", err)
	}
	pub, err := publicKey(lines[0])
	if err != nil {
		return nil, err
	}
	k := &Keys{Signer: s, Public: []string{pub}}
	for _, l := range lines[1:] {
		v, err := note.NewVerifier(l)
		if err != nil {
			return nil, fmt.Errorf("an earlier checkpoint key %q: %w", l, err)
		}
		if v.Name() != s.Name() {
			return nil, fmt.Errorf("an earlier checkpoint key is named %q, the signer %q: a log keeps its name", v.Name(), s.Name())
		}
		k.Public = append(k.Public, l)
	}
	return k, nil
}

// Rotate returns the key file with a new signer of the same name and
// the old signer's public key kept after it.
func Rotate(data []byte) ([]byte, error) {
	k, err := ParseKeys(data)
	if err != nil {
		return nil, err
	}
	fresh, err := NewKeyFile(k.Signer.Name())
	if err != nil {
		return nil, err
	}
	return append(fresh, []byte(strings.Join(k.Public, "\n")+"\n")...), nil
}

// publicKey derives the verifier key of a note signer key,
// PRIVATE+KEY+<name>+<hash>+<base64(1 || Ed25519 seed)>.
func publicKey(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if len(parts) != 5 || err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("malformed checkpoint signing key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[2], pub)
}

// Verifiers are the note verifiers of vkeys.
func Verifiers(vkeys []string) (note.Verifiers, []note.Verifier, error) {
	var vs []note.Verifier
	for _, k := range vkeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, nil, fmt.Errorf("public key %q: %w", k, err)
		}
		vs = append(vs, v)
	}
	return note.VerifierList(vs...), vs, nil
}

// CreateKeyFile writes a key file with a new key named name at path
// (mode 0600), which must not exist (else an error wrapping
// fs.ErrExist), and returns its public key.
func CreateKeyFile(path, name string) (string, error) {
	data, err := NewKeyFile(name)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return "", werr
	}
	k, err := ParseKeys(data)
	if err != nil {
		return "", err
	}
	return k.Public[0], nil
}

// RotateKeyFile replaces the key file at path with Rotate's, atomically,
// and returns its public keys, the new one first.
func RotateKeyFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	next, err := Rotate(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".checkpoint-key-*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, werr := tmp.Write(next)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, err
	}
	k, err := ParseKeys(next)
	if err != nil {
		return nil, err
	}
	return k.Public, nil
}
