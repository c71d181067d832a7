// @gated/client: gated's fleet client for TypeScript and JavaScript.
//
// A fleet publishes a proposal before it acts and runs the action only on
// an approval that gated's stored verdict confirms. Client does that with
// every check of the Go client (bus/fleet), and awaitDecision waits for an
// operator's decision on a held verdict; ToolGate and gate() wrap an
// agent's tools so that write and destructive calls run only on approval.

export { Client, defaultWaitMs, holdGraceMs, StatusWatch, type CallOptions, type ClientOptions, type WatchOptions } from "./client.js";
export {
  type Propagator,
  type TraceContext,
  traceHeaders,
  traceparentHeader,
  tracestateHeader,
  validTraceparent,
} from "./trace.js";
export {
  decodeStatus,
  type Status,
  StatusError,
  type StatusStage,
  statusStages,
  statusSubject,
  statusUpdate,
} from "./status.js";
export {
  AbortedError,
  gate,
  newProposalId,
  ToolGate,
  validateToolSpec,
  type Change,
  type GuardedTool,
  type Identity,
  type Proposer,
  type ToolGateOptions,
  type ToolSpec,
} from "./gate.js";
export {
  AwaitingOperatorError,
  BadProposalError,
  checkVerdict,
  GatedError,
  IdReusedError,
  InvalidConfigError,
  InvalidToolSpecError,
  isFinal,
  MalformedVerdictError,
  NoVerdictError,
  NotApprovedError,
  NotFoundError,
  NotGatedError,
  NotThisProposalError,
  ProposalInvalidError,
  ReviewBlockedError,
  ReviewFailedError,
  ReviewRejectedError,
  ReviewTimeoutError,
  ServiceError,
  ServiceUnavailableError,
  TenantMismatchError,
  TransportError,
  UnconfirmedApprovalError,
  VerdictError,
} from "./errors.js";
export {
  addressKey,
  addressOf,
  answer,
  confirmApproval,
  decodeReviewReply,
  decodeStoredVerdict,
  decodeVerdict,
  decodeVerdictValue,
  encodeProposal,
  proposalDigest,
  proposalSubject,
  schemaVersion,
  validAction,
  validID,
  validTenant,
  verdictLookupSubject,
  verdictMessage,
  verdictSubject,
  wire,
  type WireReply,
} from "./wire.js";
export type * from "./types.js";
