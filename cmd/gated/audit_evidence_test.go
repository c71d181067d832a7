package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gated/gated/internal/natstest"
)

// TestAuditEvidenceCommands runs a real serve, decides proposals, signs
// checkpoints, and proves, exports and verifies its evidence; a bundle
// with a record removed fails verify with exit status 3.
func TestAuditEvidenceCommands(t *testing.T) {
	s := natstest.Server(t)
	url := s.ClientURL()
	_, stop := startServe(t, url)
	defer stop()
	client := fleetClient(t, url)
	var seqs []uint64
	for i := range 3 {
		v := propose(t, client, readProposal(fmt.Sprint("ev-", i), "nginx"))
		seqs = append(seqs, v.AuditSeq)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "checkpoint.key")
	code, pub, err := runGated(t, "audit", "checkpoint", "--checkpoint-key-file", keyFile, "--create-key", "gated.example")
	if code != 0 {
		t.Fatalf("checkpoint --create-key: %d %v", code, err)
	}
	pub = strings.TrimSpace(pub)
	if !strings.HasPrefix(pub, "gated.example+") {
		t.Fatalf("public key %q", pub)
	}
	code, out, err := runGated(t, "audit", "checkpoint", "--nats-url", url, "--checkpoint-key-file", keyFile)
	if code != 0 || !strings.Contains(out, "acme: signed size") {
		t.Fatalf("checkpoint: %d %v\n%s", code, err, out)
	}
	code, out, err = runGated(t, "audit", "checkpoint", "--nats-url", url, "--checkpoint-key-file", keyFile, "--tenant", "acme")
	if code != 0 || !strings.Contains(out, "acme: unchanged size") {
		t.Fatalf("checkpoint again: %d %v\n%s", code, err, out)
	}
	// The key rotated: the next checkpoint is signed with the new key,
	// the old public key kept in the file for the checkpoints before.
	code, out, err = runGated(t, "audit", "checkpoint", "--checkpoint-key-file", keyFile, "--rotate-key")
	keys := strings.Fields(out)
	if code != 0 || len(keys) != 2 || keys[1] != pub || keys[0] == pub {
		t.Fatalf("--rotate-key: %d %v\n%s", code, err, out)
	}
	propose(t, client, readProposal("ev-late", "nginx"))
	if code, out, err = runGated(t, "audit", "checkpoint", "--nats-url", url, "--checkpoint-key-file", keyFile, "--tenant", "acme"); code != 0 {
		t.Fatalf("checkpoint after more: %d %v\n%s", code, err, out)
	}

	proof := filepath.Join(dir, "proof.jsonl")
	code, out, err = runGated(t, "audit", "prove", "acme", "--seq", fmt.Sprint(seqs[1]), "--nats-url", url, "--key", keys[0], "--key", pub)
	if code != 0 {
		t.Fatalf("prove --seq: %d %v", code, err)
	}
	if err := os.WriteFile(proof, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, err = runGated(t, "audit", "verify", "--bundle", proof, "--key", keys[0], "--key", pub, "--tenant", "acme")
	if code != 0 || !strings.Contains(out, "tenant acme: 1 record(s) proved") {
		t.Fatalf("verify the proof: %d %v\n%s", code, err, out)
	}
	if code, _, _ = runGated(t, "audit", "verify", "--bundle", proof, "--key", keys[0], "--key", pub, "--tenant", "beta"); code != exitAuditProblems {
		t.Errorf("a proof of acme's verified as beta's: exit %d", code)
	}
	if code, out, err = runGated(t, "audit", "prove", "acme", "ev-0", "--nats-url", url, "--checkpoint-key-file", keyFile); code != 0 || !strings.Contains(out, `"range":false`) {
		t.Fatalf("prove ev-0: %d %v\n%s", code, err, out)
	}

	bundle := filepath.Join(dir, "acme.jsonl")
	if code, _, err = runGated(t, "audit", "export", "--tenant", "acme", "--out", bundle, "--nats-url", url, "--checkpoint-key-file", keyFile); code != 0 {
		t.Fatalf("export: %d %v", code, err)
	}
	code, out, err = runGated(t, "audit", "verify", "--bundle", bundle, "--key", keys[0], "--key", pub)
	if code != 0 || !strings.Contains(out, "2 checkpoint(s) consistent") {
		t.Fatalf("verify the export: %d %v\n%s", code, err, out)
	}
	if code, _, err = runGated(t, "audit", "verify", "--bundle", bundle, "--key", pub); code != exitAuditProblems || !strings.Contains(err.Error(), "checkpoint 2: checkpoint signed by no known key") {
		t.Fatalf("verify with the old key alone: exit %d, %v", code, err)
	}
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	cut := filepath.Join(dir, "cut.jsonl")
	if err := os.WriteFile(cut, []byte(strings.Join(append(lines[:2], lines[3:]...), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, err = runGated(t, "audit", "verify", "--bundle", cut, "--checkpoint-key-file", keyFile)
	if code != exitAuditProblems || err == nil || !strings.Contains(err.Error(), "record(s) were removed") {
		t.Fatalf("verify a bundle with a record removed: exit %d, %v", code, err)
	}
}
