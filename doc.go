// Package gated is gated's public model: what a fleet, a reviewer plugin
// or an executor speaks with gated.
//
// Proposal is what an agent publishes before it acts, and DecodeProposal
// reads one strictly; Verdict is gated's answer; Status is a proposal's
// progress on its status subject; ExecutionReport is what an executor
// reports about an approved action; Continuation and Escalation are the
// follow-ups of a rejected run review. A reviewer is handed a RunContext
// and SOPs and answers with a ReviewDecision, GateResults and
// CriterionEvals, and ParseDecision and CheckGateLines read its text as the
// host does. The errors a client reads (ErrNotFound, ErrInvalidProposal
// with its *FieldError, ...) are here too.
//
// The audit trail's records are here as well: AuditEvent is the envelope
// of every record of the audit stream, the Event constants name the
// events, and each event's data has one type (ReceivedData,
// PolicyDecidedData with the Route, Hold, RunPolicy and ReplayInput it
// keeps, ReviewFinishedData, ...), which NewAuditEventData names and
// DecodeAuditData reads, for gated's own readers and a third party's
// alike.
//
// The package imports nothing of gated's server: package engine decides
// with this model, and the fleet client (bus/fleet), the plugin SDK
// (plugins/sdk) and the MCP gateway (mcpgate) expose it. docs/API.md says
// which packages a third party may import.
package gated
