package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/internal/server"
)

// newKeyFile writes a grant key file with one new key in a directory of
// its own.
func newKeyFile(t *testing.T) (string, string) {
	t.Helper()
	ring, err := grant.NewRing(time.Now().Add(-time.Minute), server.DefaultGrantTTL)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "grant.keys")
	if err := server.WriteGrantRing(path, ring); err != nil {
		t.Fatal(err)
	}
	return path, ring.Active().KID
}

func grantKID(t *testing.T, token string) string {
	t.Helper()
	h, _, _ := strings.Cut(token, ".")
	var hdr struct {
		KID string `json:"kid"`
	}
	raw, err := b64url(h)
	if err != nil || json.Unmarshal(raw, &hdr) != nil {
		t.Fatalf("grant header %q: %v", h, err)
	}
	return hdr.KID
}

// TestServeGrants: two gated on one NATS server, each with its own key
// file, publish one key set that holds both keys; every approval's grant
// verifies under it and is used once through either. A rotation of one
// key file mid-flight is picked up by the running gated, and a grant the
// old key signed stays valid and usable.
func TestServeGrants(t *testing.T) {
	clearGatedEnv(t)
	s := natstest.Server(t)
	keyA, kidA := newKeyFile(t)
	keyB, kidB := newKeyFile(t)
	_, stopA := startServe(t, s.ClientURL(), "--grant-key-file", keyA)
	defer stopA()
	_, stopServeB := startServe(t, s.ClientURL(), "--grant-key-file", keyB)
	var stopOnce sync.Once
	stopB := func() { stopOnce.Do(stopServeB) }
	defer stopB()

	nc, _ := natstest.Connect(t, s)
	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	keys := func() grant.KeySet {
		code, out, err := runGated(t, "grants", "keys", "--nats-url", s.ClientURL())
		if code != 0 {
			t.Fatalf("gated grants keys: %d %v", code, err)
		}
		ks, err := grant.ParseKeySet([]byte(out))
		if err != nil {
			t.Fatalf("gated grants keys printed %q: %v", out, err)
		}
		return ks
	}
	has := func(ks grant.KeySet, kid string) bool {
		for _, k := range ks.Keys {
			if k.KID == kid {
				return true
			}
		}
		return false
	}
	if ks := keys(); !has(ks, kidA) || !has(ks, kidB) {
		t.Fatalf("the published key set %+v lacks a gated's key (%s, %s)", ks, kidA, kidB)
	}
	approve := func(id string) (*gated.Verdict, grant.Expect) {
		t.Helper()
		data := bustest.Proposal(id, "read", "host_list_services", "")
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		v, err := client.ProposeRaw(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		if v.Outcome != gated.OutcomeApproved || v.Grant == "" {
			t.Fatalf("%s: %s with grant %q: %s", id, v.Outcome, v.Grant, v.Reason)
		}
		return v, grant.Expect{Tenant: "acme", ProposalID: id, ProposalSHA256: grant.ProposalSHA256(data),
			Action: "host_list_services", Target: []byte(`{"service":"nginx"}`)}
	}
	use := func(token string) grants.UseReply {
		t.Helper()
		body, _ := json.Marshal(grants.UseRequest{Grant: token, By: "test"})
		msg, err := nc.Request(wire.GrantUseSubject("acme"), body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r grants.UseReply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Approvals spread over both gated: each grant verifies and is used
	// once, whichever gated signed it and whichever answers the use.
	signers := map[string]bool{}
	var fromA *gated.Verdict
	var fromAExpect grant.Expect
	for i := range 12 {
		v, want := approve("grants-" + string(rune('a'+i)))
		if _, err := grant.Verify(v.Grant, keys(), time.Now(), want); err != nil {
			t.Fatalf("grant of %s: %v", v.ProposalID, err)
		}
		kid := grantKID(t, v.Grant)
		signers[kid] = true
		if kid == kidA && fromA == nil {
			fromA, fromAExpect = v, want // kept unused for the rotation
			continue
		}
		if r := use(v.Grant); !r.OK {
			t.Fatalf("use of %s: %s", v.ProposalID, r.Error)
		}
		if r := use(v.Grant); r.OK {
			t.Fatalf("second use of %s succeeded", v.ProposalID)
		}
	}
	if !signers[kidA] || !signers[kidB] {
		t.Logf("signers of 12 approvals: %v", signers)
	}
	if fromA == nil {
		// Only the second gated decided: with it stopped, the first must.
		stopB()
		fromA, fromAExpect = approve("grants-from-a")
		if kid := grantKID(t, fromA.Grant); kid != kidA {
			t.Fatalf("with one gated left, the grant is signed by %s, not its key %s", kid, kidA)
		}
	}

	// Rotate A's key file while A runs.
	if code, out, err := runGated(t, "grants", "rotate", "--grant-key-file", keyA, "--grace", "5s"); code != 0 {
		t.Fatalf("gated grants rotate: %d %s %v", code, out, err)
	}
	ring, _, err := server.ReadGrantRing(keyA)
	if err != nil {
		t.Fatal(err)
	}
	kidA2 := ring.Active().KID
	if kidA2 == kidA {
		t.Fatal("rotate kept the active key")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !has(keys(), kidA2) {
		if time.Now().After(deadline) {
			t.Fatal("the rotated key was not published within 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	ks := keys()
	if !has(ks, kidA) {
		t.Fatal("the retired key left the published set while a grant of it is alive")
	}
	if _, err := grant.Verify(fromA.Grant, ks, time.Now(), fromAExpect); err != nil {
		t.Fatalf("a grant of the rotated-out key no longer verifies: %v", err)
	}
	if r := use(fromA.Grant); !r.OK {
		t.Fatalf("a grant of the rotated-out key cannot be used: %s", r.Error)
	}
}

func b64url(s string) ([]byte, error) {
	return base64RawURL.DecodeString(s)
}

var base64RawURL = base64.RawURLEncoding

// TestServeGrantKeyRefusals: serve does not start with a grant key file
// it cannot use, and says why.
func TestServeGrantKeyRefusals(t *testing.T) {
	clearGatedEnv(t)
	short, _ := newKeyFile(t) // max_ttl_s 300
	bad := filepath.Join(t.TempDir(), "grant.keys")
	writeFile(t, filepath.Dir(bad), "grant.keys", `{"keys":[{"kid":"x","seed":"short","created_at":1,"max_ttl_s":300}]}`)
	cases := []struct {
		note string
		args []string
		want string
	}{
		{"lifetime beyond the key's max_ttl_s", []string{"--grant-key-file", short, "--grant-ttl", "10m"}, "gated grants rotate --max-ttl 10m"},
		{"a malformed key file", []string{"--grant-key-file", bad}, "seed must be 32 bytes"},
		{"a key file that is not there", []string{"--grant-key-file", filepath.Join(t.TempDir(), "none")}, "no such file"},
		{"lifetime below 5s", []string{"--grant-ttl", "1s"}, "--grant-ttl 1s must be whole seconds from 5s to 24h0m0s"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--log-level", "error", "--log-format", "json"}, tc.args...)
			err := run(t.Context(), args)
			wantUsageError(t, err, tc.want)
		})
	}
}
