package fleet

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/gated/gated"
)

// FuzzDecodeReviewReply feeds the review service's reply decoder arbitrary
// headers and bodies: it must never panic, never hand back a verdict
// without an address and an outcome, and turn every micro error into a
// *ServiceError.
func FuzzDecodeReviewReply(f *testing.F) {
	f.Add("", "", []byte(`{"v":1,"proposal_id":"p1","tenant":"acme","outcome":"approved","approved":true}`))
	f.Add("504", "no verdict", []byte(nil))
	f.Add("abc", "", []byte(`{}`))
	f.Add("", "", []byte(`[1,2]`))
	f.Add("", "", []byte(`{"proposal_id":"p1"}`))
	f.Fuzz(func(t *testing.T, code, desc string, body []byte) {
		h := nats.Header{}
		if code != "" {
			h.Set(micro.ErrorCodeHeader, code)
			h.Set(micro.ErrorHeader, desc)
		}
		v, err := decodeReviewReply(h, body)
		var se *ServiceError
		switch {
		case err == nil && (v == nil || v.ProposalID == "" || v.Tenant == "" || v.Outcome == ""):
			t.Fatalf("accepted a reply that is not a verdict: %+v", v)
		case err == nil && h.Get(micro.ErrorCodeHeader) != "":
			t.Fatalf("accepted an error reply as verdict %+v", v)
		case err != nil && h.Get(micro.ErrorCodeHeader) != "" && (!errors.As(err, &se) || se.Code < 100 || se.Code > 999 || se.Description == ""):
			t.Fatalf("error reply %q decoded as %v", code, err)
		}
	})
}

// FuzzDecodeStoredVerdict feeds the direct-get decoder arbitrary replies:
// whatever JetStream or an impostor sends, it never returns the verdict of
// another key.
func FuzzDecodeStoredVerdict(f *testing.F) {
	f.Add("", "", "$KV.GATED_VERDICTS.acme.p1", []byte(`{"proposal_id":"p1","tenant":"acme","outcome":"approved"}`))
	f.Add("404", "", "", []byte(nil))
	f.Add("", "DEL", "$KV.GATED_VERDICTS.acme.p1", []byte(nil))
	f.Add("", "", "$KV.GATED_VERDICTS.acme.p2", []byte(`{"proposal_id":"p2","tenant":"acme"}`))
	f.Fuzz(func(t *testing.T, status, op, subject string, body []byte) {
		m := &nats.Msg{Header: nats.Header{}, Data: body}
		for k, v := range map[string]string{"Status": status, "KV-Operation": op, "Nats-Subject": subject} {
			if v != "" {
				m.Header.Set(k, v)
			}
		}
		v, err := decodeStoredVerdict("acme", "p1", m)
		if err == nil && (v == nil || v.Tenant != "acme" || v.ProposalID != "p1") {
			t.Fatalf("returned %+v for key acme.p1", v)
		}
		if errors.Is(err, gated.ErrNotFound) && v != nil {
			t.Fatal("not found with a verdict")
		}
	})
}
