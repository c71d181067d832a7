package telemetry

// Span names: one per stage of a decision, children of SpanProposal, which
// is a child of the fleet's span when the proposal carries a traceparent.
const (
	// SpanProposal is gated's whole handling of one proposal message, from
	// delivery to acknowledgement.
	SpanProposal = "gated.proposal"
	// SpanDecode is the strict decoding and validation of the proposal.
	SpanDecode = "gated.decode"
	// SpanStoreLookup is the look-up of a stored verdict under the
	// proposal's id (idempotent replay).
	SpanStoreLookup = "gated.store.lookup"
	// SpanStoreHistory is the read of the target's recent verdicts, which
	// the policy sees as history.
	SpanStoreHistory = "gated.store.history"
	// SpanPolicy is one evaluation of the Rego policy.
	SpanPolicy = "gated.policy"
	// SpanClaim is taking the proposal's review claim.
	SpanClaim = "gated.claim"
	// SpanClaimWait is waiting for the verdict of the message that holds
	// the claim.
	SpanClaimWait = "gated.claim.wait"
	// SpanReview is the review RPC to a plugin, on gated's side.
	SpanReview = "gated.review"
	// SpanPluginReview is the review on the plugin's side, a child of
	// SpanReview through the gRPC metadata.
	SpanPluginReview = "gated.plugin.review"
	// SpanLLMCall is one call of the bundled LLM reviewer to its model.
	SpanLLMCall = "gated.llm.call"
	// SpanAudit is appending the proposal's audit trail: from its final
	// record queued until every record is stored.
	SpanAudit = "gated.audit.append"
	// SpanStore is storing the verdict.
	SpanStore = "gated.store.create"
	// SpanPublish is publishing the verdict (and storing a run's follow-up
	// or a hold's deadline before it).
	SpanPublish = "gated.publish"
)

// Attribute keys. Values are ids, names and outcomes, never payloads.
const (
	AttrTenant     = "gated.tenant"
	AttrProposalID = "gated.proposal_id"
	AttrAction     = "gated.action"
	AttrOutcome    = "gated.outcome"
	AttrStage      = "gated.stage"
	AttrDelivery   = "gated.delivery"
	AttrPlugin     = "gated.plugin"
	AttrPersona    = "gated.persona"
	AttrModel      = "gated.model"
	AttrAuditSeq   = "gated.audit_seq"
	AttrAuditEvent = "gated.audit_event"
	AttrFound      = "gated.found"
	AttrReplayed   = "gated.replayed"
	AttrRevision   = "gated.policy_revision"
	AttrTurn       = "gated.turn"
	// AttrBudgetUnread marks a policy span that ended in the policy's
	// refusal of an input without the budget counters
	// (engine.ErrBudgetUnread): the evaluation that follows has them.
	AttrBudgetUnread = "gated.policy.budget_unread"
)
