package evidence_test

import (
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/gated/gated/bus/evidence"
)

// noteKey is a new note key named name: its signer and verifier key.
func noteKey(t *testing.T, name string) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, vkey
}

// oneRecord is a bundle of tenant acme with one record, under a
// checkpoint of log gated.test that signers sign.
func oneRecord(t *testing.T, keys, witnessKeys []string, signers ...note.Signer) []byte {
	return oneRecordOf(t, "gated.test", keys, witnessKeys, signers...)
}

// oneRecordOf is oneRecord under a checkpoint of the log named log.
func oneRecordOf(t *testing.T, log string, keys, witnessKeys []string, signers ...note.Signer) []byte {
	t.Helper()
	body := []byte(`{"r":1}`)
	c := evidence.Checkpoint{Origin: evidence.OriginOf(log, "acme"), Size: 1, Root: tlog.RecordHash(body), Time: time.Now().UTC().Truncate(time.Second)}
	msg, err := note.Sign(&note.Note{Text: c.Text()}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := json.Marshal(evidence.Header{Format: evidence.Format, Tenant: "acme", Keys: keys, WitnessKeys: witnessKeys, Checkpoints: []string{string(msg)}, Range: true, Records: 1})
	r, _ := json.Marshal(evidence.RecordLine{Index: 0, Seq: 1, Body: body})
	return join([]string{string(h), string(r)})
}

// TestBundleKeysAreNotTrusted: keys a bundle carries neither sign for
// gated nor cosign for a witness the verifier asks for, whatever their
// names (the same forgeries as the Python verifier's tests).
func TestBundleKeysAreNotTrusted(t *testing.T) {
	gatedS, gatedV := noteKey(t, "gated.test")
	witnessS, witnessV := noteKey(t, "witness.test")
	attackerS, attackerV := noteKey(t, "gated.test")
	fakeS, fakeV := noteKey(t, "witness.test")
	good := oneRecord(t, []string{gatedV}, []string{witnessV}, gatedS, witnessS)
	if res, err := verify(good, evidence.VerifyOptions{Keys: []string{gatedV}, Witnesses: []string{witnessV}}); err != nil || len(res.Witnessed) != 1 {
		t.Fatalf("a genuine cosigned bundle: %+v, %v", res, err)
	}
	// A cosignature by a key only the bundle carries is not named.
	if res, err := verify(good, evidence.VerifyOptions{Keys: []string{gatedV}}); err != nil || len(res.Witnessed) != 0 {
		t.Fatalf("a witness the bundle alone carries: %+v, %v", res, err)
	}
	for _, tc := range []struct {
		name   string
		bundle []byte
		opts   evidence.VerifyOptions
		want   string
	}{
		{"a witness key of the log's name signs alone", oneRecord(t, []string{gatedV}, []string{attackerV}, attackerS),
			evidence.VerifyOptions{Keys: []string{gatedV}}, "is named as a checkpoint key"},
		{"a required witness of the log's name", oneRecord(t, []string{gatedV}, nil, gatedS, attackerS),
			evidence.VerifyOptions{Keys: []string{gatedV}, Witnesses: []string{attackerV}}, "is named as a checkpoint key"},
		{"a second key of a required witness's name cosigns", oneRecord(t, []string{gatedV}, []string{fakeV}, gatedS, fakeS),
			evidence.VerifyOptions{Keys: []string{gatedV}, Witnesses: []string{witnessV}}, "not cosigned by the witness witness.test"},
		{"a witness of the log's name, with gated's signature of another name", oneRecordOf(t, "witness.test", []string{gatedV}, []string{witnessV}, gatedS, witnessS),
			evidence.VerifyOptions{Keys: []string{gatedV}, Witnesses: []string{witnessV}}, `checkpoint of log "witness.test" is not signed by a key of that name`},
		{"the bundle's gated key is another of the log's name", oneRecord(t, []string{attackerV}, nil, attackerS),
			evidence.VerifyOptions{Keys: []string{gatedV}}, "signed by no known key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify(tc.bundle, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}
