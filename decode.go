package gated

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gated/gated/internal/strictjson"
)

// Limits bound what a proposal may carry. The zero value means the
// defaults below.
type Limits struct {
	// MaxBytes is the largest accepted message. Default 1 MiB.
	MaxBytes int
	// MaxReasonBytes bounds the reason field. Default 8 KiB.
	MaxReasonBytes int
	// MaxContextBytes bounds context_summary. Default 64 KiB.
	MaxContextBytes int
}

// Default limits, from the v1 wire contract.
const (
	DefaultMaxBytes        = 1 << 20
	DefaultMaxReasonBytes  = 8 << 10
	DefaultMaxContextBytes = 64 << 10
)

// WithDefaults fills the limits left at zero with the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxReasonBytes <= 0 {
		l.MaxReasonBytes = DefaultMaxReasonBytes
	}
	if l.MaxContextBytes <= 0 {
		l.MaxContextBytes = DefaultMaxContextBytes
	}
	return l
}

// DecodeProposal decodes and validates one proposal strictly. subjectTenant
// and subjectAction are the tokens of the subject the proposal arrived on;
// when non-empty the payload must name the same ones. Every error wraps
// ErrInvalidProposal and is a *FieldError naming the field at fault.
func DecodeProposal(data []byte, subjectTenant, subjectAction string, limits Limits) (*Proposal, error) {
	limits = limits.WithDefaults()
	if len(data) > limits.MaxBytes {
		return nil, fieldErr("", "proposal is %d bytes, larger than the %d byte limit", len(data), limits.MaxBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fieldErr("", "proposal is empty; expected a JSON object")
	}
	if !utf8.Valid(data) {
		return nil, fieldErr("", "proposal is not valid UTF-8")
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		// encoding/json decodes null into a zero struct without complaint.
		return nil, fieldErr("", "proposal must be a JSON object, not null")
	}
	p, ok := decodeFast(data)
	if !ok {
		var err error
		if p, err = decodeStrict(data); err != nil {
			return nil, err
		}
	}
	if err := validate(p, subjectTenant, subjectAction, limits); err != nil {
		return nil, err
	}
	return p, nil
}

// decodeStrict reads a proposal with encoding/json and the key check:
// the reading that words every error, and the one decodeFast must agree
// with.
func decodeStrict(data []byte) (*Proposal, error) {
	var p Proposal
	if err := strictjson.Decode(data, &p, strictjson.UseNumber()); errors.Is(err, strictjson.ErrTrailingData) {
		return nil, fieldErr("", "unexpected data after the proposal object")
	} else if err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			// encoding/json names the field but not where it is; the key
			// walk names the full path.
			if problem := checkKeys(data); problem != nil {
				return nil, problem
			}
		}
		return nil, jsonFieldError(err)
	}
	if problem := checkKeys(data); problem != nil {
		return nil, problem
	}
	return &p, nil
}

// jsonFieldError turns an encoding/json error into a FieldError that
// names the field in the proposal's own terms.
func jsonFieldError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var pt *time.ParseError
	switch {
	case errors.As(err, &syn):
		return fieldErr("", "proposal is not valid JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fieldErr("", "proposal must be a JSON object, not %s", typ.Value)
		}
		return fieldErr(typ.Field, "must be %s, not %s", jsonTypeName(typ.Type.Kind().String()), typ.Value)
	case errors.As(err, &pt):
		return fieldErr("created_at", "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fieldErr("", "proposal is truncated JSON")
	}
	msg := err.Error()
	if strings.Contains(msg, "Time.UnmarshalJSON") {
		return fieldErr("created_at", "must be an RFC 3339 time string such as 2026-01-02T15:04:05Z")
	}
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fieldErr(strings.Trim(name, `"`), "is not a field of the v1 proposal schema")
	}
	return fieldErr("", "decoding proposal: %s", strings.TrimPrefix(msg, "json: "))
}

func jsonTypeName(kind string) string {
	switch kind {
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return kind
}

// checkKeys reports the first key of the proposal that repeats within one
// object, or that is not, byte for byte, a field of the schema (see
// strictjson.CheckKeys for why encoding/json's own check is not enough).
func checkKeys(data []byte) *FieldError {
	err := strictjson.CheckKeys(data, proposalSchema)
	var ke *strictjson.KeyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ke) && ke.Duplicate:
		return fieldErr(ke.Path, "appears more than once; every key must be unique")
	case errors.As(err, &ke):
		return fieldErr(ke.Path, "is not a field of the v1 proposal schema (field names are case-sensitive)")
	}
	return fieldErr("", "proposal is not valid JSON: %v", err)
}

// proposalSchema is read from Proposal's json tags: a field added to the
// struct is known to the strict-key check at once.
var proposalSchema = strictjson.SchemaOf(reflect.TypeFor[Proposal]())

func validate(p *Proposal, subjectTenant, subjectAction string, l Limits) error {
	if p.V != SchemaVersion {
		if p.V == 0 {
			return fieldErr("v", "is required and must be %d", SchemaVersion)
		}
		return fieldErr("v", "schema version %d is not supported; this gated speaks version %d", p.V, SchemaVersion)
	}
	if p.ID == "" {
		return fieldErr("id", "is required")
	}
	if !ValidID(p.ID) {
		return fieldErr("id", "%q must match [A-Za-z0-9_-]{1,128} (no dots: ids are subject tokens and KV keys)", clip(p.ID))
	}
	if p.Tenant == "" {
		return fieldErr("tenant", "is required")
	}
	if !ValidTenant(p.Tenant) {
		return fieldErr("tenant", "%q must match [a-z0-9_-]{1,64}", clip(p.Tenant))
	}
	if p.Tenant == UnknownTenant {
		return fieldErr("tenant", "%q is reserved for audit events whose tenant is unknown", p.Tenant)
	}
	if subjectTenant != "" && p.Tenant != subjectTenant {
		return fieldErr("tenant", "%q does not match the subject's tenant %q", p.Tenant, subjectTenant)
	}
	switch p.Kind {
	case "":
		p.Kind = KindAction
	case KindAction, KindRun:
	default:
		return fieldErr("kind", "%q must be \"action\" or \"run\"", clip(string(p.Kind)))
	}
	if p.Action == "" {
		return fieldErr("action", "is required")
	}
	if !ValidAction(p.Action) {
		return fieldErr("action", "%q must match [A-Za-z0-9_-]{1,128}", clip(p.Action))
	}
	if subjectAction != "" && p.Action != subjectAction {
		return fieldErr("action", "%q does not match the subject's action %q", p.Action, subjectAction)
	}
	switch p.Class {
	case ClassRead, ClassWrite, ClassDestructive:
	case "":
		return fieldErr("class", "is required: one of read, write, destructive")
	default:
		return fieldErr("class", "%q must be one of read, write, destructive", clip(string(p.Class)))
	}
	switch p.BlastRadius {
	case BlastSingleDevice, BlastCluster, BlastTenantWide:
	case "":
		if p.Mutating() {
			return fieldErr("blast_radius", "is required for %s actions: one of single_device, cluster, tenant_wide", p.Class)
		}
	default:
		return fieldErr("blast_radius", "%q must be one of single_device, cluster, tenant_wide", clip(string(p.BlastRadius)))
	}
	if len(p.Reason) > l.MaxReasonBytes {
		return fieldErr("reason", "is %d bytes, larger than the %d byte limit", len(p.Reason), l.MaxReasonBytes)
	}
	if len(p.ContextSummary) > l.MaxContextBytes {
		return fieldErr("context_summary", "is %d bytes, larger than the %d byte limit", len(p.ContextSummary), l.MaxContextBytes)
	}
	if p.Operator != nil {
		if strings.TrimSpace(p.Operator.ID) == "" {
			return fieldErr("operator.id", "is required when operator is given")
		}
		for i, r := range p.Operator.Roles {
			if strings.TrimSpace(r) == "" {
				return fieldErr(fmt.Sprintf("operator.roles[%d]", i), "must not be empty")
			}
		}
	}
	if p.RequestedBy != nil && strings.TrimSpace(p.RequestedBy.Agent) == "" {
		return fieldErr("requested_by.agent", "is required when requested_by is given")
	}
	if p.Reviewer != "" && !ValidTenant(p.Reviewer) {
		return fieldErr("reviewer", "%q must be a persona name matching [a-z0-9_-]{1,64}", clip(p.Reviewer))
	}
	if err := validateLabels(p.Labels); err != nil {
		return err
	}
	if fe, ok := errors.AsType[*strictjson.FoldError](strictjson.CheckFolded(p.Arguments)); ok {
		return fieldErr("arguments"+strings.ReplaceAll(fe.Path, "/", "."), "has members %q and %q, which differ only by case: an executor that reads names without case could act on either", fe.Key, fe.Other)
	}
	if p.Kind == KindRun {
		if p.Arguments != nil {
			return fieldErr("arguments", "belong to proposals of kind action; a run review has none")
		}
		return validateRun(p, l)
	}
	switch {
	case p.Run != nil:
		return fieldErr("run", "is only allowed for proposals of kind run")
	case len(p.Criteria) > 0:
		return fieldErr("criteria", "acceptance criteria belong to proposals of kind run; an action proposal has none")
	}
	return nil
}

// Run proposal bounds.
const (
	MaxCriteria           = 64
	MaxCriterionDescBytes = 4 << 10
	MaxPriorReviews       = 16
	MaxPriorFindings      = 256
)

func validateRun(p *Proposal, l Limits) error {
	run := p.Run
	if run == nil {
		return fieldErr("run", "is required for proposals of kind run")
	}
	switch {
	case !ValidID(run.RunID):
		return fieldErr("run.run_id", "%q must match [A-Za-z0-9_-]{1,128}", clip(run.RunID))
	case run.TaskID != "" && len(run.TaskID) > 128:
		return fieldErr("run.task_id", "is %d bytes, longer than 128", len(run.TaskID))
	case run.Status == "":
		return fieldErr("run.status", "is required: one of completed, failed, canceled")
	case run.Status != RunCompleted && run.Status != RunFailed && run.Status != RunCanceled:
		return fieldErr("run.status", "%q must be one of completed, failed, canceled", clip(run.Status))
	case run.Round < 1:
		return fieldErr("run.round", "is %d; rounds count from 1", run.Round)
	case strings.TrimSpace(run.Worker) == "":
		return fieldErr("run.worker", "is required: the agent that did the run (it never reviews its own run)")
	case len(run.Worker) > 128:
		return fieldErr("run.worker", "is %d bytes, longer than 128", len(run.Worker))
	case len(run.Summary) > l.MaxContextBytes:
		return fieldErr("run.summary", "is %d bytes, larger than the %d byte limit", len(run.Summary), l.MaxContextBytes)
	case len(run.PriorReviews) > MaxPriorReviews:
		return fieldErr("run.prior_reviews", "has %d reviews, more than %d", len(run.PriorReviews), MaxPriorReviews)
	}
	findings := 0
	for i, pr := range run.PriorReviews {
		at := fmt.Sprintf("run.prior_reviews[%d]", i)
		if pr.Round < 1 {
			return fieldErr(at+".round", "is %d; rounds count from 1", pr.Round)
		}
		if pr.ProposalID != "" && !ValidID(pr.ProposalID) {
			return fieldErr(at+".proposal_id", "%q must match [A-Za-z0-9_-]{1,128}", clip(pr.ProposalID))
		}
		for j, f := range pr.Findings {
			fat := fmt.Sprintf("%s.findings[%d]", at, j)
			if findings++; findings > MaxPriorFindings {
				return fieldErr(fat, "is one finding too many: at most %d over all prior reviews", MaxPriorFindings)
			}
			switch {
			case strings.TrimSpace(f.ID) == "":
				return fieldErr(fat+".id", "is required: the id the review gave the finding")
			case f.Status != "" && f.Status != FindingOpen && f.Status != FindingResolved:
				return fieldErr(fat+".status", "%q must be open or resolved", clip(f.Status))
			case f.Line != nil && *f.Line < 1:
				return fieldErr(fat+".line", "is %d; lines count from 1 (use null for the whole file)", *f.Line)
			}
		}
	}
	if len(p.Criteria) > MaxCriteria {
		return fieldErr("criteria", "has %d criteria, more than %d", len(p.Criteria), MaxCriteria)
	}
	seen := make(map[string]bool, len(p.Criteria))
	for i, c := range p.Criteria {
		at := fmt.Sprintf("criteria[%d]", i)
		switch {
		case c.ID == "":
			return fieldErr(at+".id", "is required")
		case !validWide(c.ID):
			return fieldErr(at+".id", "%q must match [A-Za-z0-9_-]{1,128}", clip(c.ID))
		case seen[c.ID]:
			return fieldErr(at+".id", "%q is used by an earlier criterion", clip(c.ID))
		case len(c.Description) > MaxCriterionDescBytes:
			return fieldErr(at+".description", "is %d bytes, larger than %d", len(c.Description), MaxCriterionDescBytes)
		}
		seen[c.ID] = true
		switch c.Kind {
		case CriterionCommandResult, CriterionFileContains, CriterionAIReview, CriterionManual:
		case "":
			return fieldErr(at+".kind", "is required: one of command_result, file_contains, ai_review, manual")
		default:
			return fieldErr(at+".kind", "%q must be one of command_result, file_contains, ai_review, manual", clip(c.Kind))
		}
	}
	return nil
}

// clip keeps error messages short when a field holds a huge value.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// ValidTenant reports whether s is a tenant token: [a-z0-9_-]{1,64}.
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidAction reports whether s is an action token: [A-Za-z0-9_-]{1,128}.
func ValidAction(s string) bool { return validWide(s) }

// ValidID reports whether s is a proposal id: [A-Za-z0-9_-]{1,128}.
func ValidID(s string) bool { return validWide(s) }

func validWide(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
