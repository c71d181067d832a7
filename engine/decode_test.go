package engine_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/wire"
)

const proposalsDir = "testdata/proposals"

// The wire contract's token grammar, written out independently of the
// package's own validators so the tests can catch a validator that drifts.
var (
	reTenant = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	reWide   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
)

func readProposal(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(proposalsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func proposalFiles(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(proposalsDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no proposals in %s", proposalsDir)
	}
	return names
}

// minimalWrite is valid-minimal-write.json with extra members appended.
func minimalWrite(extra ...string) []byte {
	s := `{"v": 1, "id": "p1", "tenant": "acme", "action": "host_restart_service", "class": "write", "blast_radius": "single_device"`
	for _, e := range extra {
		s += ", " + e
	}
	return []byte(s + "}")
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

type decodeCase struct {
	note string
	// file is read from testdata/proposals; data is used when file is empty.
	file string
	data []byte
	// noSubject decodes with empty subject tokens; otherwise the subject is
	// gated.proposals.acme.host_restart_service.
	noSubject bool
	limits    gated.Limits
	wantErr   bool
	// wantField is the FieldError.Field of an invalid proposal.
	wantField string
	check     func(t *testing.T, p *gated.Proposal)
}

func decodeCases() []decodeCase {
	return []decodeCase{
		// Valid proposals.
		{note: "minimal write", file: "valid-minimal-write.json", check: func(t *testing.T, p *gated.Proposal) {
			if p.V != 1 || p.ID != "p1" || p.Tenant != "acme" || p.Action != "host_restart_service" {
				t.Errorf("addressing fields = %d %q %q %q", p.V, p.ID, p.Tenant, p.Action)
			}
			if p.Class != gated.ClassWrite || p.BlastRadius != gated.BlastSingleDevice {
				t.Errorf("class, blast radius = %q, %q", p.Class, p.BlastRadius)
			}
			if p.Kind != gated.KindAction {
				t.Errorf("kind = %q, want the default %q", p.Kind, gated.KindAction)
			}
			if p.Flags != (gated.Flags{}) {
				t.Errorf("flags = %+v, want all false", p.Flags)
			}
			if p.Target != nil || p.Operator != nil || p.RequestedBy != nil || p.Run != nil || p.CreatedAt != nil {
				t.Errorf("absent optional fields decoded as present: %+v", p)
			}
			if !p.Mutating() {
				t.Error("a write proposal must be mutating")
			}
			if p.TargetKey() != "" {
				t.Errorf("TargetKey() = %q for a proposal without a target", p.TargetKey())
			}
		}},
		{note: "read needs no blast radius", file: "valid-read-without-blast-radius.json", check: func(t *testing.T, p *gated.Proposal) {
			if p.Class != gated.ClassRead || p.BlastRadius != "" || p.Mutating() {
				t.Errorf("class %q, blast radius %q, mutating %v", p.Class, p.BlastRadius, p.Mutating())
			}
		}},
		{note: "destructive tenant wide with explicit kind", file: "valid-destructive-tenant-wide.json", check: func(t *testing.T, p *gated.Proposal) {
			if p.Class != gated.ClassDestructive || p.BlastRadius != gated.BlastTenantWide || p.Kind != gated.KindAction || !p.Mutating() {
				t.Errorf("got %+v", p)
			}
		}},
		{note: "every field", file: "valid-full-write.json", check: func(t *testing.T, p *gated.Proposal) {
			if p.ID != "chg-2026_01-Restart" {
				t.Errorf("id = %q", p.ID)
			}
			if got := p.Target["device_id"]; got != json.Number("7") {
				t.Errorf("target.device_id = %#v, want json.Number 7 (numbers must keep their text)", got)
			}
			if tags, _ := p.Target["tags"].([]any); len(tags) != 1 || tags[0] != "production" {
				t.Errorf("target.tags = %#v", p.Target["tags"])
			}
			if p.Operator == nil || p.Operator.ID != "u-1042" || strings.Join(p.Operator.Roles, ",") != "sre,admin" {
				t.Errorf("operator = %+v", p.Operator)
			}
			if p.RequestedBy == nil || p.RequestedBy.Agent != "fleet-ops-3" || p.RequestedBy.Session != "sess-9f2" {
				t.Errorf("requested_by = %+v", p.RequestedBy)
			}
			if want := (gated.Flags{UserConfirmed: true}); p.Flags != want {
				t.Errorf("flags = %+v, want %+v", p.Flags, want)
			}
			if p.IncidentID != "INC-4411" || p.Reviewer != "reviewer" || !strings.HasPrefix(p.Reason, "nginx on web-7") || p.ContextSummary == "" {
				t.Errorf("strings = %q %q %q %q", p.IncidentID, p.Reviewer, p.Reason, p.ContextSummary)
			}
			want := time.Date(2026, 1, 2, 14, 4, 5, 123e6, time.UTC)
			if p.CreatedAt == nil || !p.CreatedAt.Equal(want) {
				t.Errorf("created_at = %v, want %v", p.CreatedAt, want)
			}
		}},
		{note: "run review", file: "valid-run.json", check: func(t *testing.T, p *gated.Proposal) {
			if p.Kind != gated.KindRun || p.Run == nil || p.Run.RunID != "r-77" || p.Run.Round != 2 || p.Run.Status != gated.RunCompleted || p.Run.Worker != "w-3" {
				t.Errorf("run proposal = %+v, run %+v", p, p.Run)
			}
			if len(p.Run.PriorReviews) != 1 || len(p.Run.PriorReviews[0].Findings) != 1 {
				t.Fatalf("prior reviews = %+v", p.Run.PriorReviews)
			}
			if f := p.Run.PriorReviews[0].Findings[0]; f.ID != "r1-f1" || f.Open() || f.Line != nil {
				t.Errorf("prior finding = %+v", f)
			}
			if len(p.Criteria) != 4 || p.Criteria[0].Kind != gated.CriterionCommandResult || p.Criteria[0].Evidence["exit_code"] != json.Number("0") ||
				p.Criteria[1].Params["text"] != "nginx" || p.Criteria[2].Required || p.Criteria[3].Kind != gated.CriterionManual {
				t.Errorf("criteria = %+v", p.Criteria)
			}
		}},
		{note: "id of 128 characters", file: "valid-id-128.json", check: func(t *testing.T, p *gated.Proposal) {
			if len(p.ID) != 128 {
				t.Errorf("len(id) = %d", len(p.ID))
			}
		}},
		{note: "no subject tokens means no subject check", file: "invalid-tenant-mismatch.json", noSubject: true},
		{note: "reason of exactly 8 KiB", data: minimalWrite(`"reason": ` + jsonString(strings.Repeat("r", 8<<10)))},
		{note: "context_summary of exactly 64 KiB", data: minimalWrite(`"context_summary": ` + jsonString(strings.Repeat("c", 64<<10)))},
		{note: "message exactly at MaxBytes", data: minimalWrite(), limits: gated.Limits{MaxBytes: len(minimalWrite())}},
		{note: "trailing white space", data: append(minimalWrite(), " \n\t\r\n"...)},

		// Required fields.
		{note: "v missing", file: "invalid-missing-v.json", wantErr: true, wantField: "v"},
		{note: "v unsupported", file: "invalid-v-2.json", wantErr: true, wantField: "v"},
		{note: "id missing", file: "invalid-missing-id.json", wantErr: true, wantField: "id"},
		{note: "tenant missing", file: "invalid-missing-tenant.json", wantErr: true, wantField: "tenant"},
		{note: "action missing", file: "invalid-missing-action.json", wantErr: true, wantField: "action"},
		{note: "class missing", file: "invalid-missing-class.json", wantErr: true, wantField: "class"},
		{note: "blast_radius missing on write", file: "invalid-missing-blast-radius-write.json", wantErr: true, wantField: "blast_radius"},
		{note: "blast_radius missing on destructive", file: "invalid-missing-blast-radius-destructive.json", wantErr: true, wantField: "blast_radius"},

		// Enumerations.
		{note: "class unknown", file: "invalid-class-unknown.json", wantErr: true, wantField: "class"},
		{note: "blast_radius unknown", file: "invalid-blast-radius-unknown.json", wantErr: true, wantField: "blast_radius"},
		{note: "kind unknown", file: "invalid-kind-unknown.json", wantErr: true, wantField: "kind"},

		// Wrong types.
		{note: "flags.skip_review as a string", file: "invalid-skip-review-string.json", wantErr: true, wantField: "flags.skip_review"},
		{note: "target as an array", file: "invalid-target-array.json", wantErr: true, wantField: "target"},
		{note: "v as a string", file: "invalid-v-string.json", wantErr: true, wantField: "v"},
		{note: "v as a fraction", file: "invalid-v-fraction.json", wantErr: true, wantField: "v"},
		{note: "reason as a number", file: "invalid-reason-number.json", wantErr: true, wantField: "reason"},
		{note: "operator.roles as a string", file: "invalid-operator-roles-string.json", wantErr: true, wantField: "operator.roles"},

		// Unknown and duplicate keys.
		{note: "unknown top-level field", file: "invalid-unknown-top-level.json", wantErr: true, wantField: "priority"},
		{note: "unknown nested field", file: "invalid-unknown-nested-flags.json", wantErr: true, wantField: "flags.bogus"},
		{note: "key differing from the schema only in case", file: "invalid-key-case-variant.json", wantErr: true, wantField: "Class"},
		{note: "case variant of a key overriding it", file: "invalid-key-case-conflict.json", wantErr: true, wantField: "CLASS"},
		{note: "flags key differing only in case", data: minimalWrite(`"flags": {"Skip_Review": false}`), wantErr: true, wantField: "flags.Skip_Review"},
		{note: "key matching the schema only by unicode folding", file: "invalid-key-unicode-fold.json", wantErr: true, wantField: "claſs"},
		{note: "duplicate top-level key", file: "invalid-duplicate-class.json", wantErr: true, wantField: "class"},
		{note: "arguments with members equal under unicode folding", file: "invalid-arguments-fold.json", wantErr: true, wantField: "arguments"},
		{note: "arguments with members differing by ascii case, nested", data: minimalWrite(`"arguments": {"opts": [{"Host": "a", "host": "b"}]}`), wantErr: true, wantField: "arguments.opts.0"},
		{note: "arguments with a duplicate member", data: minimalWrite(`"arguments": {"host": "a", "host": "b"}`), wantErr: true, wantField: "arguments.host"},
		{note: "arguments that are not an object", data: minimalWrite(`"arguments": ["host"]`), wantErr: true, wantField: "arguments"},
		{note: "arguments of a run review", data: []byte(`{"v":1,"id":"r1","tenant":"acme","kind":"run","action":"run_review","class":"read","arguments":{"a":1},"run":{"run_id":"run-1","status":"completed","round":1,"worker":"w"}}`), noSubject: true, wantErr: true, wantField: "arguments"},
		{note: "arguments", data: minimalWrite(`"target": {"host": "web-1"}`, `"arguments": {"host": "web-1", "opts": {"grace": 10, "drain": true}, "hosts": ["a"]}`), check: func(t *testing.T, p *gated.Proposal) {
			opts, _ := p.Arguments["opts"].(map[string]any)
			if p.Arguments["host"] != "web-1" || opts["drain"] != true || opts["grace"] != json.Number("10") {
				t.Fatalf("arguments = %#v", p.Arguments)
			}
		}},
		{note: "duplicate key nested in target", file: "invalid-duplicate-target-tags.json", wantErr: true, wantField: "target.tags"},
		{note: "duplicate key spelled with an escape", file: "invalid-duplicate-escaped-key.json", wantErr: true, wantField: "class"},

		// Not one JSON object.
		{note: "trailing object", file: "invalid-trailing-object.json", wantErr: true},
		{note: "trailing garbage", file: "invalid-trailing-garbage.json", wantErr: true},
		{note: "array", file: "invalid-not-object-array.json", wantErr: true},
		{note: "string", file: "invalid-not-object-string.json", wantErr: true},
		{note: "null", file: "invalid-not-object-null.json", wantErr: true},
		{note: "white space only", file: "invalid-empty.json", wantErr: true},
		{note: "zero bytes", data: []byte{}, wantErr: true},
		{note: "truncated", file: "invalid-truncated.json", wantErr: true},
		{note: "invalid UTF-8", file: "invalid-utf8.json", wantErr: true},

		// Sizes.
		{note: "message over MaxBytes", data: minimalWrite(), limits: gated.Limits{MaxBytes: len(minimalWrite()) - 1}, wantErr: true},
		{note: "reason over 8 KiB", data: minimalWrite(`"reason": ` + jsonString(strings.Repeat("r", 8<<10+1))), wantErr: true, wantField: "reason"},
		{note: "context_summary over 64 KiB", data: minimalWrite(`"context_summary": ` + jsonString(strings.Repeat("c", 64<<10+1))), wantErr: true, wantField: "context_summary"},
		{note: "reason over a configured limit", data: minimalWrite(`"reason": "123456789"`), limits: gated.Limits{MaxReasonBytes: 8}, wantErr: true, wantField: "reason"},

		// Tokens and the subject.
		{note: "id with a dot", file: "invalid-id-dot.json", wantErr: true, wantField: "id"},
		{note: "id of 129 characters", file: "invalid-id-129.json", wantErr: true, wantField: "id"},
		{note: "tenant upper case", file: "invalid-tenant-uppercase.json", wantErr: true, wantField: "tenant"},
		{note: "action with a space", file: "invalid-action-space.json", wantErr: true, wantField: "action"},
		{note: "tenant differs from the subject", file: "invalid-tenant-mismatch.json", wantErr: true, wantField: "tenant"},
		{note: "action differs from the subject", file: "invalid-action-mismatch.json", wantErr: true, wantField: "action"},
		{note: "reviewer not a persona name", file: "invalid-reviewer-uppercase.json", wantErr: true, wantField: "reviewer"},

		// Kinds and runs.
		{note: "kind run without run", file: "invalid-run-kind-without-run.json", wantErr: true, wantField: "run"},
		{note: "kind action with run", file: "invalid-action-kind-with-run.json", wantErr: true, wantField: "run"},
		{note: "run id with a dot", file: "invalid-run-id-dot.json", wantErr: true, wantField: "run.run_id"},

		// Other fields.
		{note: "created_at not RFC 3339", file: "invalid-created-at-not-rfc3339.json", wantErr: true, wantField: "created_at"},
		{note: "created_at a number", file: "invalid-created-at-number.json", wantErr: true, wantField: "created_at"},
		{note: "duplicate criteria ids", file: "invalid-criteria-duplicate-id.json", wantErr: true, wantField: "criteria[1].id"},
		{note: "criterion without id", file: "invalid-criteria-missing-id.json", wantErr: true, wantField: "criteria[0].id"},
		{note: "criterion without kind", file: "invalid-criteria-kind-missing.json", wantErr: true, wantField: "criteria[0].kind"},
		{note: "criterion of an unknown kind", file: "invalid-criteria-kind-unknown.json", wantErr: true, wantField: "criteria[0].kind"},
		{note: "criterion with an unknown field", file: "invalid-criteria-unknown-field.json", wantErr: true, wantField: "criteria[0].weight"},
		{note: "criteria on an action", file: "invalid-action-with-criteria.json", wantErr: true, wantField: "criteria"},
		{note: "run without status", file: "invalid-run-status-missing.json", wantErr: true, wantField: "run.status"},
		{note: "run status unknown", file: "invalid-run-status-unknown.json", wantErr: true, wantField: "run.status"},
		{note: "run round zero", file: "invalid-run-round-zero.json", wantErr: true, wantField: "run.round"},
		{note: "run without worker", file: "invalid-run-worker-missing.json", wantErr: true, wantField: "run.worker"},
		{note: "prior finding status unknown", file: "invalid-run-prior-finding-status.json", wantErr: true, wantField: "run.prior_reviews[0].findings[0].status"},
		{note: "prior finding without id", file: "invalid-run-prior-finding-no-id.json", wantErr: true, wantField: "run.prior_reviews[0].findings[0].id"},
		{note: "prior review with an unknown field", file: "invalid-run-prior-review-field.json", wantErr: true, wantField: "run.prior_reviews[0].decision"},
		{note: "operator with a blank id", file: "invalid-operator-empty-id.json", wantErr: true, wantField: "operator.id"},
		{note: "requested_by without agent", file: "invalid-requested-by-no-agent.json", wantErr: true, wantField: "requested_by.agent"},
		{note: "a label not spelled as one", file: "invalid-label-uppercase.json", wantErr: true, wantField: "labels[1]"},
		{note: "more labels than the bound", file: "invalid-labels-too-many.json", wantErr: true, wantField: "labels"},
		{note: "labels the agent adds", file: "valid-labels.json", check: wantLabels("secret", "untrusted")},
	}
}

func TestDecodeProposal(t *testing.T) {
	for _, tc := range decodeCases() {
		t.Run(tc.note, func(t *testing.T) {
			data := tc.data
			if tc.file != "" {
				data = readProposal(t, tc.file)
			}
			tenant, action := "acme", "host_restart_service"
			if tc.noSubject {
				tenant, action = "", ""
			}
			p, err := gated.DecodeProposal(data, tenant, action, tc.limits)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("DecodeProposal: %v", err)
				}
				if p == nil {
					t.Fatal("DecodeProposal returned neither a proposal nor an error")
				}
				if tc.check != nil {
					tc.check(t, p)
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeProposal accepted an invalid proposal: %+v", p)
			}
			if p != nil {
				t.Errorf("DecodeProposal returned a proposal with its error: %+v", p)
			}
			checkFieldError(t, err, tc.wantField)
		})
	}
}

func checkFieldError(t *testing.T, err error, wantField string) {
	t.Helper()
	if !errors.Is(err, gated.ErrInvalidProposal) {
		t.Errorf("error %q does not wrap ErrInvalidProposal", err)
	}
	var fe *gated.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %q (%T) is not a *FieldError", err, err)
	}
	if fe.Field != wantField {
		t.Errorf("FieldError.Field = %q, want %q (error: %v)", fe.Field, wantField, err)
	}
	if fe.Problem == "" {
		t.Error("FieldError.Problem is empty")
	}
	if fe.Field != "" && !strings.Contains(err.Error(), fe.Field) {
		t.Errorf("error %q does not name its field %q", err, fe.Field)
	}
}

// TestProposalTestdataIsCovered keeps testdata/proposals and the table in
// step: every file is decoded by a case whose expectation matches the
// file's valid-/invalid- prefix.
func TestProposalTestdataIsCovered(t *testing.T) {
	used := map[string]bool{}
	for _, tc := range decodeCases() {
		if tc.file == "" {
			continue
		}
		used[tc.file] = true
		valid := strings.HasPrefix(tc.file, "valid-")
		if !valid && !strings.HasPrefix(tc.file, "invalid-") {
			t.Errorf("%s: name must start with valid- or invalid-", tc.file)
		}
		if valid == tc.wantErr && !tc.noSubject {
			t.Errorf("case %q expects wantErr=%v from %s", tc.note, tc.wantErr, tc.file)
		}
	}
	for _, name := range proposalFiles(t) {
		if !used[name] {
			t.Errorf("%s is not decoded by any case of TestDecodeProposal", name)
		}
	}
}

func TestParseProposalSubject(t *testing.T) {
	tests := []struct {
		note       string
		subject    string
		wantTenant string
		wantAction string
		wantErr    bool
	}{
		{note: "valid", subject: "gated.proposals.acme.host_restart_service", wantTenant: "acme", wantAction: "host_restart_service"},
		{note: "mixed-case action", subject: "gated.proposals.team-7.K8s_Scale-Deployment", wantTenant: "team-7", wantAction: "K8s_Scale-Deployment"},
		{note: "other prefix", subject: "gated.verdicts.acme.p1", wantErr: true},
		{note: "prefix without trailing dot", subject: "gated.proposalsacme.x", wantErr: true},
		{note: "no action", subject: "gated.proposals.acme", wantErr: true},
		{note: "extra token", subject: "gated.proposals.acme.host.restart", wantErr: true},
		{note: "empty tenant", subject: "gated.proposals..host_restart_service", wantErr: true},
		{note: "empty action", subject: "gated.proposals.acme.", wantErr: true},
		{note: "upper-case tenant", subject: "gated.proposals.Acme.host_restart_service", wantErr: true},
		{note: "wildcard action", subject: "gated.proposals.acme.*", wantErr: true},
		{note: "tenant of 65 characters", subject: "gated.proposals." + strings.Repeat("t", 65) + ".x", wantErr: true},
		{note: "tenant of 64 characters", subject: "gated.proposals." + strings.Repeat("t", 64) + ".x", wantTenant: strings.Repeat("t", 64), wantAction: "x"},
		{note: "action of 129 characters", subject: "gated.proposals.acme." + strings.Repeat("a", 129), wantErr: true},
		{note: "empty", subject: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			tenant, action, err := engine.ParseProposalSubject(tc.subject)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseProposalSubject(%q) = %q, %q, want an error", tc.subject, tenant, action)
				}
				if tenant != "" || action != "" {
					t.Errorf("tokens returned with the error: %q, %q", tenant, action)
				}
				checkFieldError(t, err, "subject")
				return
			}
			if err != nil {
				t.Fatalf("ParseProposalSubject(%q): %v", tc.subject, err)
			}
			if tenant != tc.wantTenant || action != tc.wantAction {
				t.Errorf("ParseProposalSubject(%q) = %q, %q, want %q, %q", tc.subject, tenant, action, tc.wantTenant, tc.wantAction)
			}
		})
	}
}

func TestRecoverAddress(t *testing.T) {
	const subject = "gated.proposals.acme.host_restart_service"
	tests := []struct {
		note       string
		subject    string
		data       string
		msgID      string
		wantTenant string
		wantID     string
	}{
		{note: "id from the payload", subject: subject, data: `{"id": "p1", "class": 7}`, msgID: "acme.other", wantTenant: "acme", wantID: "p1"},
		{note: "subject tenant wins over the payload's", subject: subject, data: `{"id": "p1", "tenant": "globex"}`, wantTenant: "acme", wantID: "p1"},
		{note: "id from the header when the payload is not JSON", subject: subject, data: `{"id": "p1",`, msgID: "acme.p2", wantTenant: "acme", wantID: "p2"},
		{note: "id from the header when the payload id is no token", subject: subject, data: `{"id": "p.1"}`, msgID: "acme.p2", wantTenant: "acme", wantID: "p2"},
		{note: "id from the header when the payload id is a number", subject: subject, data: `{"id": 12}`, msgID: "acme.p2", wantTenant: "acme", wantID: "p2"},
		{note: "header of another tenant is ignored", subject: subject, data: `garbage`, msgID: "globex.p2", wantTenant: "acme"},
		{note: "header id with a dot is ignored", subject: subject, data: `garbage`, msgID: "acme.p.2", wantTenant: "acme"},
		{note: "header without tenant is ignored", subject: subject, data: `garbage`, msgID: "p2", wantTenant: "acme"},
		{note: "nothing to recover but the tenant", subject: subject, data: `[]`, wantTenant: "acme"},
		{note: "bad subject tenant recovers nothing", subject: "gated.proposals.ACME.host_restart_service", data: `{"id": "p1"}`, msgID: "ACME.p1"},
		{note: "other subject recovers nothing", subject: "gated.review", data: `{"id": "p1", "tenant": "acme"}`, msgID: "acme.p1"},
		{note: "oversize payload falls back to the header", subject: subject,
			data: `{"id": "p1", "reason": "` + strings.Repeat("x", gated.DefaultMaxBytes) + `"}`, msgID: "acme.p2", wantTenant: "acme", wantID: "p2"},
	}
	for _, tc := range tests {
		t.Run(tc.note, func(t *testing.T) {
			tenant, id := engine.RecoverAddress(tc.subject, []byte(tc.data), tc.msgID)
			if tenant != tc.wantTenant || id != tc.wantID {
				t.Errorf("RecoverAddress = %q, %q, want %q, %q", tenant, id, tc.wantTenant, tc.wantID)
			}
		})
	}
}

func FuzzDecodeProposal(f *testing.F) {
	for _, name := range proposalFiles(f) {
		f.Add(readProposal(f, name))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, subj := range [][2]string{{"", ""}, {"acme", "host_restart_service"}} {
			p, err := gated.DecodeProposal(data, subj[0], subj[1], gated.Limits{})
			if err != nil {
				if p != nil {
					t.Fatalf("proposal returned with error %v", err)
				}
				if !errors.Is(err, gated.ErrInvalidProposal) {
					t.Fatalf("error %q does not wrap ErrInvalidProposal", err)
				}
				var fe *gated.FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("error %q (%T) is not a *FieldError", err, err)
				}
				continue
			}
			if p == nil {
				t.Fatal("nil proposal and nil error")
			}
			checkContract(t, p, subj[0], subj[1])

			// An accepted proposal, encoded again, must decode to the same
			// proposal: validation depends on the proposal, not its spelling.
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(p); err != nil {
				t.Fatalf("encoding accepted proposal: %v", err)
			}
			q, err := gated.DecodeProposal(buf.Bytes(), p.Tenant, p.Action, gated.Limits{MaxBytes: 64 << 20})
			if err != nil {
				t.Fatalf("accepted proposal does not re-validate: %v\nre-encoded: %s", err, buf.Bytes())
			}
			if q.ID != p.ID || q.Tenant != p.Tenant || q.Kind != p.Kind || q.Action != p.Action ||
				q.Class != p.Class || q.BlastRadius != p.BlastRadius || q.Flags != p.Flags || q.Reason != p.Reason {
				t.Fatalf("re-decoded proposal differs:\n got %+v\nwant %+v", q, p)
			}
		}
	})
}

// checkContract checks an accepted proposal against the wire contract,
// written out independently of the package's validation.
func checkContract(t *testing.T, p *gated.Proposal, subjTenant, subjAction string) {
	t.Helper()
	switch {
	case p.V != 1:
		t.Fatalf("accepted v %d", p.V)
	case !reWide.MatchString(p.ID):
		t.Fatalf("accepted id %q", p.ID)
	case !reTenant.MatchString(p.Tenant):
		t.Fatalf("accepted tenant %q", p.Tenant)
	case !reWide.MatchString(p.Action):
		t.Fatalf("accepted action %q", p.Action)
	case subjTenant != "" && p.Tenant != subjTenant:
		t.Fatalf("accepted tenant %q on subject tenant %q", p.Tenant, subjTenant)
	case subjAction != "" && p.Action != subjAction:
		t.Fatalf("accepted action %q on subject action %q", p.Action, subjAction)
	case p.Kind != "action" && p.Kind != "run":
		t.Fatalf("accepted kind %q", p.Kind)
	case p.Class != "read" && p.Class != "write" && p.Class != "destructive":
		t.Fatalf("accepted class %q", p.Class)
	case p.Class != "read" && p.BlastRadius != "single_device" && p.BlastRadius != "cluster" && p.BlastRadius != "tenant_wide":
		t.Fatalf("accepted %s proposal with blast radius %q", p.Class, p.BlastRadius)
	case len(p.Reason) > 8<<10:
		t.Fatalf("accepted reason of %d bytes", len(p.Reason))
	case len(p.ContextSummary) > 64<<10:
		t.Fatalf("accepted context_summary of %d bytes", len(p.ContextSummary))
	case (p.Kind == "run") != (p.Run != nil):
		t.Fatalf("accepted kind %q with run %+v", p.Kind, p.Run)
	}
}

func FuzzRecoverAddress(f *testing.F) {
	f.Add("gated.proposals.acme.host_restart_service", []byte(`{"id": "p1"}`), "acme.p1")
	f.Add("gated.proposals.acme.host_restart_service", []byte(`{"id": "p.1"}`), "acme.p2")
	f.Add("gated.proposals.acme.x", []byte(`garbage`), "globex.p2")
	f.Add("gated.proposals.ACME.x", []byte(`{"id": "p1"}`), "ACME.p1")
	f.Add("gated.proposals.acme", []byte(`{"id": 5}`), "acme.")
	f.Add("gated.review", []byte(`{"id": "p1"}`), "acme.p1")
	f.Fuzz(func(t *testing.T, subject string, data []byte, msgID string) {
		tenant, id := engine.RecoverAddress(subject, data, msgID)
		if tenant != "" && !reTenant.MatchString(tenant) {
			t.Fatalf("recovered tenant %q", tenant)
		}
		if id != "" && !reWide.MatchString(id) {
			t.Fatalf("recovered id %q", id)
		}
		if id != "" && tenant == "" {
			t.Fatalf("recovered id %q without a tenant", id)
		}
		if tenant != "" && !strings.HasPrefix(subject, wire.ProposalSubjectPrefix+tenant) {
			t.Fatalf("recovered tenant %q from subject %q", tenant, subject)
		}
	})
}

func BenchmarkDecodeProposal(b *testing.B) {
	data := readProposal(b, "valid-full-write.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := gated.DecodeProposal(data, "acme", "host_restart_service", gated.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReservedTenant(t *testing.T) {
	if _, _, err := engine.ParseProposalSubject("gated.proposals._.x"); err == nil {
		t.Error("subject tenant _ accepted")
	}
	_, err := gated.DecodeProposal([]byte(`{"v":1,"id":"p1","tenant":"_","action":"x","class":"read"}`), "", "", gated.Limits{})
	var fe *gated.FieldError
	if !errors.As(err, &fe) || fe.Field != "tenant" {
		t.Errorf("tenant _: err = %v, want a tenant field error", err)
	}
	if tenant, id := engine.RecoverAddress("gated.proposals._.x", []byte(`{"id":"p1"}`), ""); tenant != "" || id != "" {
		t.Errorf("recovered %q/%q under the reserved tenant", tenant, id)
	}
}

func FuzzParseProposalSubject(f *testing.F) {
	for _, s := range []string{"gated.proposals.acme.x", "gated.proposals.acme", "gated.proposals.a.b.c", "gated.proposals._.x", "gated.proposals..x", "nats.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		tenant, action, err := engine.ParseProposalSubject(subject)
		if err != nil {
			if !errors.Is(err, gated.ErrInvalidProposal) {
				t.Fatalf("error %v does not wrap ErrInvalidProposal", err)
			}
			return
		}
		if !gated.ValidTenant(tenant) || tenant == gated.UnknownTenant || !gated.ValidAction(action) {
			t.Fatalf("accepted %q as tenant %q action %q", subject, tenant, action)
		}
		if subject != wire.ProposalSubject(tenant, action) {
			t.Fatalf("%q split into %q and %q", subject, tenant, action)
		}
	})
}

func TestTargetKeyIgnoresKeyOrder(t *testing.T) {
	a, err := gated.DecodeProposal([]byte(`{"v":1,"id":"a","tenant":"acme","action":"x","class":"write","blast_radius":"cluster","target":{"device_id":7,"service":"nginx"}}`), "", "", gated.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := gated.DecodeProposal([]byte(`{"v":1,"id":"b","tenant":"acme","action":"y","class":"write","blast_radius":"cluster","target":{"service":"nginx","device_id":7}}`), "", "", gated.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := gated.DecodeProposal([]byte(`{"v":1,"id":"c","tenant":"acme","action":"y","class":"write","blast_radius":"cluster","target":{"service":"nginx","device_id":8}}`), "", "", gated.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if a.TargetKey() == "" || a.TargetKey() != b.TargetKey() {
		t.Fatalf("same target, keys %q and %q", a.TargetKey(), b.TargetKey())
	}
	if a.TargetKey() == c.TargetKey() {
		t.Fatal("different targets share a key")
	}
}
