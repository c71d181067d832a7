package server

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"go.uber.org/zap"
)

func TestEnsureAuditKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	key, path, created, err := ensureAuditKey(dir)
	if err != nil || !created || len(key) != audit.MinKeyLen {
		t.Fatalf("first start: key of %d bytes, created %v, err %v", len(key), created, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, err %v; want 0600", st.Mode().Perm(), err)
	}
	again, _, created, err := ensureAuditKey(dir)
	if err != nil || created || string(again) != string(key) {
		t.Fatalf("second start: created %v, same key %v, err %v", created, string(again) == string(key), err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ensureAuditKey(dir); err == nil {
		t.Fatal("a key file of 5 bytes was accepted")
	}
}

// TestServeAuditsWithTheDataDirKey runs serve's audit writer set-up against a
// server: the embedded case creates the key, an external server without a
// key file gets unkeyed records, and a bad --audit-publish is refused.
func TestServeAuditsWithTheDataDirKey(t *testing.T) {
	s := natsServer(t)
	_, js := connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	o := Config{DataDir: t.TempDir(), AuditPublish: "auto"}
	key, err := serveAuditKey(t.Context(), js, o, true, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	a, err := newServeAuditor(t.Context(), js, o, key, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAuditor(context.Background(), a, zap.NewNop())
	stored, err := ReadAuditKey(filepath.Join(o.DataDir, AuditKeyName))
	if err != nil || a.KeyID() != audit.KeyID(stored) {
		t.Fatalf("key id %q, data dir key err %v", a.KeyID(), err)
	}
	// Nothing is recorded yet, so a gated without a key may still join.
	none, err := serveAuditKey(t.Context(), js, Config{}, false, zap.NewNop())
	if err != nil || none != nil {
		t.Fatalf("external server without a key on an empty stream: key %x, err %v", none, err)
	}
	external, err := newServeAuditor(t.Context(), js, Config{AuditPublish: "one-at-a-time"}, nil, zap.NewNop())
	if err != nil || external.KeyID() != "" || external.Batching() {
		t.Fatalf("external server without a key: key id %q, batching %v, err %v", external.KeyID(), external.Batching(), err)
	}
	defer closeAuditor(context.Background(), external, zap.NewNop())
	piped, err := newServeAuditor(t.Context(), js, Config{AuditPublish: "pipelined"}, nil, zap.NewNop())
	if err != nil || !piped.Pipelined() {
		t.Fatalf("--audit-publish pipelined: pipelined %v, err %v", err == nil && piped.Pipelined(), err)
	}
	defer closeAuditor(context.Background(), piped, zap.NewNop())
	if !a.Pipelined() {
		t.Error("auto on the embedded server's R1 file stream does not pipeline")
	}
	if _, err := newServeAuditor(t.Context(), js, Config{AuditPublish: "sometimes"}, nil, zap.NewNop()); !isUsage(err) {
		t.Fatalf("--audit-publish sometimes: %v", err)
	}
}

// TestServeAuditKeyFollowsTheChain runs serve's key choice against a
// stream that holds records MACed with the key of a first gated: each
// other gated must bring that key, or say --audit-key-rotate, and a
// missing data-dir key is not replaced behind the operator's back.
func TestServeAuditKeyFollowsTheChain(t *testing.T) {
	s := natsServer(t)
	_, js := connect(t, s)
	if _, err := bus.Setup(t.Context(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	firstDir := t.TempDir()
	first := Config{DataDir: firstDir, AuditPublish: "auto"}
	key, err := serveAuditKey(t.Context(), js, first, true, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	a, err := newServeAuditor(t.Context(), js, first, key, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Trail().Seal(t.Context(), gated.AuditEvent{V: 1, Event: gated.EventVerdict, Tenant: "acme", ProposalID: "p1"}); err != nil {
		t.Fatal(err)
	}
	closeAuditor(context.Background(), a, zap.NewNop())
	keyFile := filepath.Join(firstDir, AuditKeyName)
	otherFile := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(otherFile, []byte(hex.EncodeToString([]byte("another key of thirty-two bytes!"))), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyDir := func() string { return filepath.Join(t.TempDir(), "data") }

	tests := []struct {
		note     string
		o        Config
		embedded bool
		say      []string // the refusal says each; none: accepted
		keyID    string   // the key accepted
	}{
		{note: "external without a key", o: Config{},
			say: []string{"no audit key", "--audit-key-file", "GATED_AUDIT_KEY_FILE", "audit_key_file", "--audit-key-rotate"}},
		{note: "external with another key", o: Config{AuditKeyFile: otherFile},
			say: []string{otherFile, "--audit-key-file", "--audit-key-rotate"}},
		{note: "external with the key", o: Config{AuditKeyFile: keyFile}, keyID: audit.KeyID(key)},
		{note: "external with another key, rotating", o: Config{AuditKeyFile: otherFile, AuditKeyRotate: true},
			keyID: audit.KeyID([]byte("another key of thirty-two bytes!"))},
		{note: "embedded whose key file is gone", o: Config{DataDir: emptyDir()}, embedded: true,
			say: []string{AuditKeyName, "is missing", "--audit-key-rotate"}},
		{note: "embedded with the key", o: Config{DataDir: firstDir}, embedded: true, keyID: audit.KeyID(key)},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			got, err := serveAuditKey(t.Context(), js, tc.o, tc.embedded, zap.NewNop())
			if len(tc.say) == 0 {
				if err != nil || audit.KeyID(got) != tc.keyID {
					t.Fatalf("key %s, err %v; want key %s", audit.KeyID(got), err, tc.keyID)
				}
				return
			}
			if err == nil || isUsage(err) {
				t.Fatalf("accepted key %q (err %v); want a refusal", audit.KeyID(got), err)
			}
			for _, w := range tc.say {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("the refusal does not say %q: %v", w, err)
				}
			}
			if tc.embedded {
				if _, err := os.Stat(filepath.Join(tc.o.DataDir, AuditKeyName)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a refused start wrote a key file: %v", err)
				}
			}
		})
	}
	// With --audit-key-rotate, the embedded server makes itself a new key.
	o := Config{DataDir: emptyDir(), AuditKeyRotate: true}
	got, err := serveAuditKey(t.Context(), js, o, true, zap.NewNop())
	if err != nil || len(got) != audit.MinKeyLen || audit.KeyID(got) == audit.KeyID(key) {
		t.Fatalf("rotating with no key file: key %s, err %v; want a new key", audit.KeyID(got), err)
	}
}

// isUsage reports whether err is a refused configuration.
func isUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}
