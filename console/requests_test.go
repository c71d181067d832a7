package console_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/console"
)

func testPub(t testing.TB) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestDecodeSignIn(t *testing.T) {
	pub := testPub(t)
	ch := base64.RawURLEncoding.EncodeToString(make([]byte, 56))
	sig := base64.RawURLEncoding.EncodeToString(make([]byte, 64))
	cases := []struct {
		note, body, field string // field: what the error names; "" for none
	}{
		{note: "well-formed", body: `{"key":"` + pub + `","challenge":"` + ch + `","sig":"` + sig + `"}`},
		{note: "not an object", body: `[]`, field: "object"},
		{note: "trailing data", body: `{"key":"` + pub + `","challenge":"` + ch + `","sig":"` + sig + `"}{}`, field: "after"},
		{note: "unknown field", body: `{"key":"` + pub + `","challenge":"` + ch + `","sig":"` + sig + `","tenant":"acme"}`, field: `"tenant"`},
		{note: "repeated field", body: `{"key":"` + pub + `","key":"` + pub + `","challenge":"` + ch + `","sig":"` + sig + `"}`, field: "twice"},
		{note: "missing sig", body: `{"key":"` + pub + `","challenge":"` + ch + `"}`, field: "sig"},
		{note: "key not a string", body: `{"key":7,"challenge":"` + ch + `","sig":"` + sig + `"}`, field: "key"},
		{note: "a seed as the key", body: `{"key":"SUAM","challenge":"` + ch + `","sig":"` + sig + `"}`, field: "key"},
		{note: "short challenge", body: `{"key":"` + pub + `","challenge":"abc","sig":"` + sig + `"}`, field: "challenge"},
		{note: "short signature", body: `{"key":"` + pub + `","challenge":"` + ch + `","sig":"AAAA"}`, field: "sig"},
		{note: "oversize", body: `{"key":"` + strings.Repeat("U", 5000) + `"}`, field: "bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			in, err := console.DecodeSignIn([]byte(tc.body))
			if tc.field == "" {
				if err != nil || in.Key != pub || len(in.Sig) != 64 {
					t.Fatalf("%+v, %v", in, err)
				}
				return
			}
			if !errors.Is(err, console.ErrBadRequest) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want ErrBadRequest naming %s", err, tc.field)
			}
		})
	}
}

func TestDecodeDecision(t *testing.T) {
	pub := testPub(t)
	body := `{\"v\":1,\"tenant\":\"acme\",\"proposal_id\":\"p-1\",\"proposal_sha256\":\"` + strings.Repeat("ab", 32) +
		`\",\"operator\":\"alice\",\"criteria\":[{\"id\":\"ux\",\"pass\":true}],\"reason\":\"\",\"signed_at\":\"2026-01-02T03:04:05.678Z\"}`
	cases := []struct {
		note, req, field string
	}{
		{note: "well-formed", req: `{"body":"` + body + `","key":"` + pub + `","sig":"AAAA"}`},
		{note: "body not a message", req: `{"body":"{}","key":"` + pub + `","sig":"AAAA"}`, field: "v"},
		{note: "body with an extra field", req: `{"body":"{\"x\":1}","key":"` + pub + `","sig":"AAAA"}`, field: "x"},
		{note: "no key", req: `{"body":"` + body + `","sig":"AAAA"}`, field: "key"},
		{note: "sig not base64", req: `{"body":"` + body + `","key":"` + pub + `","sig":"!!"}`, field: "sig"},
		{note: "body not a string", req: `{"body":{},"key":"` + pub + `","sig":"AAAA"}`, field: "body"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			d, err := console.DecodeDecision([]byte(tc.req))
			if tc.field == "" {
				if err != nil || d.Message.Tenant != "acme" || d.Message.ProposalID != "p-1" || d.Key != pub {
					t.Fatalf("%+v, %v", d, err)
				}
				return
			}
			var refusal *operator.Refusal
			if !errors.Is(err, console.ErrBadRequest) && !errors.As(err, &refusal) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want a bad request naming %s", err, tc.field)
			}
		})
	}
}

// FuzzDecodeSignIn: any input is a sign-in or an error wrapping
// ErrBadRequest; a sign-in has a public user key, a challenge and a
// 64-byte signature.
func FuzzDecodeSignIn(f *testing.F) {
	pub := testPub(f)
	ch := base64.RawURLEncoding.EncodeToString(make([]byte, 56))
	f.Add([]byte(`{"key":"` + pub + `","challenge":"` + ch + `","sig":"` + base64.RawURLEncoding.EncodeToString(make([]byte, 64)) + `"}`))
	f.Add([]byte(`{"key":"","challenge":"","sig":""}`))
	f.Add([]byte(`{"key":1}`))
	f.Add([]byte(`nul`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := console.DecodeSignIn(data)
		if err != nil {
			if in != nil || !errors.Is(err, console.ErrBadRequest) {
				t.Fatalf("%+v, %v", in, err)
			}
			return
		}
		if !nkeys.IsValidPublicUserKey(in.Key) || len(in.Sig) != 64 || in.Challenge == "" {
			t.Fatalf("accepted %+v", in)
		}
	})
}

// FuzzDecodeDecision: any input is a decision whose body decodes as an
// operator message, or an error.
func FuzzDecodeDecision(f *testing.F) {
	pub := testPub(f)
	f.Add([]byte(`{"body":"{\"v\":1,\"tenant\":\"acme\",\"proposal_id\":\"p-1\",\"proposal_sha256\":\"` + strings.Repeat("ab", 32) +
		`\",\"operator\":\"alice\",\"criteria\":[{\"id\":\"ux\",\"pass\":true}],\"reason\":\"\",\"signed_at\":\"2026-01-02T03:04:05Z\"}","key":"` + pub + `","sig":"AAAA"}`))
	f.Add([]byte(`{"body":"","key":"","sig":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := console.DecodeDecision(data)
		if err != nil {
			if d != nil {
				t.Fatalf("a decision and an error: %+v, %v", d, err)
			}
			return
		}
		m, err := operator.DecodeMessage(d.Body)
		if err != nil || m.Tenant != d.Message.Tenant || m.ProposalID != d.Message.ProposalID || !nkeys.IsValidPublicUserKey(d.Key) {
			t.Fatalf("accepted %+v: %v", d, err)
		}
	})
}
