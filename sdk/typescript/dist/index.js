// @gated/client: gated's fleet client for TypeScript and JavaScript.
//
// A fleet publishes a proposal before it acts and runs the action only on
// an approval that gated's stored verdict confirms. Client does that with
// every check of the Go client (bus/fleet), and awaitDecision waits for an
// operator's decision on a held verdict; ToolGate and gate() wrap an
// agent's tools so that write and destructive calls run only on approval.
export { acceptGrant, Client, defaultWaitMs, holdGraceMs, StatusWatch, } from "./client.js";
export { traceHeaders, traceparentHeader, tracestateHeader, validTraceparent, } from "./trace.js";
export { decodeStatus, StatusError, statusStages, statusSubject, statusUpdate, } from "./status.js";
export { boundUTF8, CanonicalJSONError, canonicalJSON, canonicalJSONText, decodeGrant, decodeGrantKeySet, decodeGrantUseReply, encodeOutcome, GrantError, grantKeyID, grantKeyIDOf, GrantKeySetError, GrantUseError, grantUseSubject, grantWire, outcomeSubject, targetDigest, verifyGrant, } from "./grant.js";
export { AbortedError, gate, newProposalId, ToolGate, validateToolSpec, } from "./gate.js";
export { AwaitingOperatorError, BadProposalError, checkVerdict, FoldedKeysError, GatedError, IdReusedError, InvalidArgumentsError, InvalidConfigError, InvalidToolSpecError, isFinal, MalformedVerdictError, NoVerdictError, NotApprovedError, NotFoundError, NotGatedError, NotThisProposalError, ProposalInvalidError, ReviewBlockedError, ReviewFailedError, ReviewRejectedError, ReviewTimeoutError, ServiceError, ServiceUnavailableError, TenantMismatchError, TransportError, UnconfirmedApprovalError, VerdictError, } from "./errors.js";
export { addressKey, addressOf, answer, confirmApproval, decodeReviewReply, decodeStoredVerdict, decodeVerdict, decodeVerdictValue, encodeProposal, proposalDigest, proposalSubject, schemaVersion, validAction, validID, validTenant, verdictLookupSubject, verdictMessage, verdictSubject, wire, } from "./wire.js";
export { equalFold, findFoldedKeys, foldKey, simpleFold } from "./fold.js";
export { foldUnicodeVersion } from "./foldtable.js";
