package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/gated/gated"
)

// The shared vectors in test/vectors hold every client, in every language,
// to what this one does. These tests prove the Go client agrees with the
// files; the Python and TypeScript suites read the same files.

var updateVectors = flag.Bool("update", false, "rewrite the generated parts of test/vectors/proposals.json")

func vectorPath(name string) string { return filepath.Join("..", "..", "test", "vectors", name) }

func readVectors(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(vectorPath(name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

type proposalVectors struct {
	About string `json:"about"`
	Cases []struct {
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		Wire    string          `json:"wire"`
		SHA256  string          `json:"sha256"`
		Address Address         `json:"address"`
	} `json:"cases"`
}

// encodeProposal is what Propose sends for p.
func encodeProposal(t *testing.T, input []byte) (Address, []byte) {
	t.Helper()
	var p gated.Proposal
	if err := json.Unmarshal(input, &p); err != nil {
		t.Fatalf("input %s: %v", input, err)
	}
	if p.V == 0 {
		p.V = gated.SchemaVersion
	}
	data, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	return Address{Tenant: p.Tenant, ID: p.ID, Action: p.Action}, data
}

func TestProposalVectors(t *testing.T) {
	var doc proposalVectors
	readVectors(t, "proposals.json", &doc)
	if *updateVectors {
		for i := range doc.Cases {
			c := &doc.Cases[i]
			a, data := encodeProposal(t, c.Input)
			c.Wire, c.SHA256, c.Address = string(data), proposalDigest(data), a
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(&doc); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorPath("proposals.json"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(doc.Cases) == 0 {
		t.Fatal("no proposal vectors")
	}
	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			a, data := encodeProposal(t, c.Input)
			if string(data) != c.Wire {
				t.Errorf("Go sends\n%s\nthe vector says\n%s", data, c.Wire)
			}
			if got := proposalDigest([]byte(c.Wire)); got != c.SHA256 {
				t.Errorf("digest of the wire bytes = %s, the vector says %s", got, c.SHA256)
			}
			if a != c.Address {
				t.Errorf("address %+v, the vector says %+v", a, c.Address)
			}
			if got, err := AddressOf([]byte(c.Wire)); err != nil || got != c.Address {
				t.Errorf("AddressOf(wire) = %+v, %v", got, err)
			}
		})
	}
}

func TestAddressVectors(t *testing.T) {
	var doc struct {
		About string `json:"about"`
		Cases []struct {
			Name     string   `json:"name"`
			Proposal string   `json:"proposal"`
			Address  *Address `json:"address"`
		} `json:"cases"`
	}
	readVectors(t, "addresses.json", &doc)
	refused := 0
	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			a, err := AddressOf([]byte(c.Proposal))
			switch {
			case c.Address == nil && !errors.Is(err, ErrBadProposal):
				t.Errorf("AddressOf(%s) = %+v, %v; the vector says it cannot be addressed", c.Proposal, a, err)
			case c.Address != nil && (err != nil || a != *c.Address):
				t.Errorf("AddressOf(%s) = %+v, %v; the vector says %+v", c.Proposal, a, err, *c.Address)
			}
		})
		if c.Address == nil {
			refused++
		}
	}
	if refused == 0 || refused == len(doc.Cases) {
		t.Errorf("%d of %d address vectors are refused: the file must hold both", refused, len(doc.Cases))
	}
}

type verdictExpect struct {
	Result  string `json:"result"`
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
}

type verdictVectors struct {
	About          string `json:"about"`
	Proposal       string `json:"proposal"`
	ProposalSHA256 string `json:"proposal_sha256"`
	Cases          []struct {
		Name    string        `json:"name"`
		Via     string        `json:"via"`
		Message *string       `json:"message"`
		Stored  *string       `json:"stored"`
		Expect  verdictExpect `json:"expect"`
	} `json:"cases"`
	ServiceErrors []struct {
		Code        string `json:"code"`
		Description string `json:"description"`
		Error       string `json:"error"`
	} `json:"service_errors"`
}

// errorKind names a client error the way the vectors do.
func errorKind(err error) string {
	var se *ServiceError
	switch {
	case errors.As(err, &se):
		for _, k := range []struct {
			sentinel error
			kind     string
		}{{ErrBadProposal, "bad_proposal"}, {ErrTenantMismatch, "tenant_mismatch"}, {ErrIDReused, "id_reused"},
			{ErrServiceUnavailable, "service_unavailable"}, {ErrNoVerdict, "no_verdict"}} {
			if errors.Is(err, k.sentinel) {
				return k.kind
			}
		}
		return "service_error"
	case strings.Contains(err.Error(), "confirming the approval"):
		return "unconfirmed"
	case errors.Is(err, ErrIDReused):
		return "id_reused"
	case strings.Contains(err.Error(), "names no proposal digest"):
		return "not_gated"
	case strings.Contains(err.Error(), "verdict names"):
		return "not_this_proposal"
	case strings.Contains(err.Error(), "review service's reply"):
		return "malformed"
	}
	return "unclassified: " + err.Error()
}

// judge is what the client makes of one vector, by the client's own code.
func (doc *verdictVectors) judge(via string, message, stored *string) verdictExpect {
	a, err := AddressOf([]byte(doc.Proposal))
	if err != nil {
		return verdictExpect{Result: "error", Error: errorKind(err)}
	}
	digest := proposalDigest([]byte(doc.Proposal))
	lookup := func() (*gated.Verdict, error) {
		if stored == nil {
			return decodeStoredVerdict(a.Tenant, a.ID, &nats.Msg{Header: nats.Header{"Status": []string{"404"}}})
		}
		return decodeStoredVerdict(a.Tenant, a.ID, &nats.Msg{Data: []byte(*stored)})
	}
	var v *gated.Verdict
	switch via {
	case "subject":
		m, ok := verdictMessage(a, []byte(*message))
		if !ok {
			return verdictExpect{Result: "skip"}
		}
		v, err = confirmApproval(a, digest, m, lookup)
	case "service":
		m, derr := decodeReviewReply(nats.Header{}, []byte(*message))
		if derr != nil {
			return verdictExpect{Result: "error", Error: errorKind(derr)}
		}
		v, err = confirmApproval(a, digest, m, lookup)
	case "stored":
		s, lerr := lookup()
		if lerr != nil {
			return verdictExpect{Result: "pending"} // the client keeps waiting
		}
		v, err = answer(a, digest, s)
	default:
		return verdictExpect{Result: "unknown via " + via}
	}
	if err != nil {
		return verdictExpect{Result: "error", Error: errorKind(err)}
	}
	if err := CheckVerdict(v); errors.Is(err, ErrAwaitingOperator) {
		return verdictExpect{Result: "held", Outcome: string(v.Outcome)}
	} else if err != nil {
		return verdictExpect{Result: "not_approved", Outcome: string(v.Outcome)}
	}
	return verdictExpect{Result: "approved"}
}

func TestVerdictVectors(t *testing.T) {
	var doc verdictVectors
	readVectors(t, "verdicts.json", &doc)
	if got := proposalDigest([]byte(doc.Proposal)); got != doc.ProposalSHA256 {
		t.Fatalf("proposal_sha256 %s, the proposal's digest is %s", doc.ProposalSHA256, got)
	}
	results := map[string]int{}
	for _, c := range doc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if got := doc.judge(c.Via, c.Message, c.Stored); got != c.Expect {
				t.Errorf("the Go client makes %+v of it, the vector says %+v", got, c.Expect)
			}
		})
		results[c.Expect.Result]++
	}
	for _, r := range []string{"skip", "pending", "approved", "not_approved", "held", "error"} {
		if results[r] == 0 {
			t.Errorf("no vector expects %s", r)
		}
	}
	for _, c := range doc.ServiceErrors {
		t.Run("service error "+c.Code, func(t *testing.T) {
			h := nats.Header{}
			h.Set(micro.ErrorCodeHeader, c.Code)
			h.Set(micro.ErrorHeader, c.Description)
			_, err := decodeReviewReply(h, nil)
			if err == nil {
				t.Fatal("no error for a micro error reply")
			}
			if got := errorKind(err); got != c.Error {
				t.Errorf("code %s: the Go client raises %s, the vector says %s", c.Code, got, c.Error)
			}
		})
	}
}

type statusVectors struct {
	About string `json:"about"`
	Cases []struct {
		Name    string `json:"name"`
		Message string `json:"message"`
		Status  *struct {
			Stage    gated.StatusStage `json:"stage"`
			Reviewer string            `json:"reviewer"`
			Reason   string            `json:"reason"`
			Outcome  gated.Outcome     `json:"outcome"`
			Deadline bool              `json:"deadline"`
		} `json:"status"`
		Field *string `json:"field"`
	} `json:"cases"`
}

// TestStatusVectors holds the watch's reading of a message on a status
// subject to test/vectors/statuses.json.
func TestStatusVectors(t *testing.T) {
	var vs statusVectors
	readVectors(t, "statuses.json", &vs)
	if len(vs.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, tc := range vs.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			u := statusUpdate("acme", "p-1", []byte(tc.Message))
			if tc.Status == nil {
				var se *gated.StatusError
				if !errors.As(u.Err, &se) || u.Status != nil {
					t.Fatalf("got %+v, want a *gated.StatusError", u)
				}
				if tc.Field == nil || se.Field != *tc.Field {
					t.Fatalf("error %q names field %q, want %v", se, se.Field, *tc.Field)
				}
				return
			}
			if u.Err != nil {
				t.Fatalf("unexpected error: %v", u.Err)
			}
			st := u.Status
			var outcome gated.Outcome
			if st.Verdict != nil {
				outcome = st.Verdict.Outcome
			}
			if st.Stage != tc.Status.Stage || st.Reviewer != tc.Status.Reviewer || st.Reason != tc.Status.Reason ||
				outcome != tc.Status.Outcome || (st.Deadline != nil) != tc.Status.Deadline || st.Tenant != "acme" || st.ID != "p-1" {
				t.Fatalf("got %+v (outcome %q), want %+v", st, outcome, *tc.Status)
			}
		})
	}
}
