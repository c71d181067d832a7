package operator_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/operator"
)

const clearBody = `{"v":1,"tenant":"acme","agent":"mailer","revision":3,"operator":"alice","reason":"ok","signed_at":"2026-01-02T15:04:05Z"}`

func TestDecodeClearRefusesWhatIsNotAClear(t *testing.T) {
	if _, err := operator.DecodeClear([]byte(clearBody)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, field string }{
		{strings.Replace(clearBody, `"revision":3`, `"revision":0`, 1), "revision"},
		{strings.Replace(clearBody, `"revision":3`, `"revision":3.0`, 1), "revision"},
		{strings.Replace(clearBody, `"revision":3`, `"revision":"3"`, 1), "revision"},
		{strings.Replace(clearBody, `"revision":3,`, ``, 1), "revision"},
		{strings.Replace(clearBody, `"agent":"mailer"`, `"agent":" "`, 1), "agent"},
		{strings.Replace(clearBody, `"tenant":"acme"`, `"tenant":"Acme"`, 1), "tenant"},
		{strings.Replace(clearBody, `"v":1`, `"v":1,"proposal_id":"p"`, 1), "proposal_id"},
		{strings.Replace(clearBody, `"v":1`, `"v":1,"agent":"other"`, 1), "agent"},
	} {
		_, err := operator.DecodeClear([]byte(tc.body))
		var r *operator.Refusal
		if !errors.As(err, &r) || r.Code != 400 || r.Field != tc.field {
			t.Errorf("%s: %v, want a 400 naming %s", tc.body, err, tc.field)
		}
	}
}

func FuzzDecodeClear(f *testing.F) {
	f.Add([]byte(clearBody))
	f.Add([]byte(`{"v":1,"revision":18446744073709551615}`))
	f.Add([]byte(`{"v":1,"revision":18446744073709551616}`))
	f.Add([]byte(`{"revision":1e2}`))
	f.Add([]byte(`{"v":1} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := operator.DecodeClear(data)
		if err != nil {
			var r *operator.Refusal
			if !errors.As(err, &r) || r.Code != 400 {
				t.Fatalf("err = %v, want a 400 refusal", err)
			}
			return
		}
		// Whatever decodes is a complete, valid clear, and encodes to one
		// that decodes to the same.
		if m.V != 1 || !gated.ValidTenant(m.Tenant) || strings.TrimSpace(m.Agent) == "" || m.Revision == 0 || !operator.ValidID(m.Operator) {
			t.Fatalf("decoded an invalid clear: %+v", m)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := operator.DecodeClear(again)
		if err != nil {
			t.Fatalf("re-encoded clear refused: %v\n%s", err, again)
		}
		a, b := *m, *m2
		if !a.SignedAt.Equal(b.SignedAt) {
			t.Fatalf("round trip changed signed_at")
		}
		a.SignedAt, b.SignedAt = time.Time{}, time.Time{}
		if a != b {
			t.Fatalf("round trip changed the clear: %+v != %+v", b, a)
		}
	})
}
