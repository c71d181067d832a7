import { type NatsConnection, type Subscription } from "@nats-io/nats-core";
import { type GrantClaims, type GrantExpectation, type GrantKeySet, type OutcomeReport } from "./grant.js";
import { type Status, StatusError } from "./status.js";
import { type Propagator, type TraceContext } from "./trace.js";
import type { Proposal, Verdict } from "./types.js";
/** How long a call waits for its verdict unless it says otherwise: 90 s, as the Go client. */
export declare const defaultWaitMs = 90000;
/**
 * How long Client.awaitDecision waits past a hold's deadline when it names no
 * timeoutMs: gated times the hold out at the deadline and publishes the
 * timeout a moment later. 60 s, as the Go client.
 */
export declare const holdGraceMs = 60000;
/** Options of a Client. */
export interface ClientOptions {
    /** How long a call waits for its verdict when it names no timeoutMs. Default 90 000 (90 s). */
    defaultWaitMs?: number;
    /** The JetStream API prefix of verdict look-ups, for accounts that import JetStream. Default "$JS.API". */
    apiPrefix?: string;
    /** How often a wait also reads the stored verdict, in case the verdict message was lost. Default 2000. */
    pollIntervalMs?: number;
    /**
     * Fills a carrier with the active trace context at each publish, so that
     * gated's spans for a proposal are children of the caller's span, e.g.
     * `(c) => propagation.inject(context.active(), c)` with
     * @opentelemetry/api. Default none: no trace headers unless a call names
     * its own (CallOptions.trace).
     */
    propagator?: Propagator;
    /**
     * gated's grant key set (the JSON `gated grants keys` prints, or the
     * object): grants are verified with it alone and it is never fetched.
     * Default: fetched from gated.grants.keys on first use, and again once
     * when a grant names a kid it does not hold.
     */
    grantKeySet?: GrantKeySet | string | Uint8Array;
    /**
     * The subject of gated's key set service, for an account that imports it
     * under another name. Default "gated.grants.keys".
     */
    grantKeysSubject?: string;
    /**
     * The agent this client's NATS user is: grant uses and outcome reports go
     * on its subjects, gated.grants.<tenant>.use.<agent> and
     * gated.outcomes.<tenant>.<proposal_id>.<agent>, where gated accepts only a
     * grant issued to the agent (the proposal's requested_by.agent). Give it
     * where each agent connects as a NATS user of its own that may publish on
     * its own subjects alone (docs/NATS.md): then no agent of the tenant can
     * use or report for another's grants. A token, [A-Za-z0-9_-]{1,128}.
     * Default: the tenant's subjects.
     */
    agent?: string;
}
/** Options of Client.verifyGrant and acceptGrant. */
export interface GrantCallOptions extends CallOptions {
    /** The verifier's clock, Unix seconds; default now. */
    now?: number;
}
/** gated's answer to a grant's use: it is the caller's, once. */
export interface GrantUse {
    /** The grant's gid. */
    gid: string;
    /** The grant's claims as decoded (verify them with verifyGrant first). */
    claims: GrantClaims;
}
/** Options of one call. */
export interface CallOptions {
    /** Stops the wait: the call then throws NoVerdictError. */
    signal?: AbortSignal;
    /** How long to wait for the verdict; default the client's defaultWaitMs. */
    timeoutMs?: number;
    /**
     * propose and proposeRaw only: called with each status event of the
     * proposal while the call waits (see Client.watch), or with a StatusError
     * for a malformed one. The status subject is subscribed before the
     * proposal is published, and NATS delivers gated's decided status before
     * its verdict, so every stage comes before the call resolves.
     */
    onStatus?: (status: Status | StatusError) => void;
    /**
     * propose and proposeRaw only: the W3C trace context the proposal
     * carries (headers traceparent and tracestate), the parent of gated's
     * spans for it; it takes precedence over ClientOptions.propagator. A
     * malformed traceparent throws InvalidConfigError.
     */
    trace?: TraceContext;
}
/** Options of Client.watch. */
export interface WatchOptions {
    /** Ends the watch: its iterator then finishes. */
    signal?: AbortSignal;
}
/**
 * The status events of one proposal, as an async iterator: for await (const
 * st of watch). A malformed event makes next() throw a StatusError; the
 * watch stays open, and the next call to next() reads on. It ends when
 * closed, when its signal aborts, or when the connection closes.
 */
export declare class StatusWatch implements AsyncIterableIterator<Status> {
    private readonly sub;
    private readonly tenant;
    private readonly id;
    private readonly queue;
    private wake;
    private done;
    /** @internal Built by Client.watch. */
    constructor(sub: Subscription, tenant: string, id: string, signal: AbortSignal | undefined);
    /** @internal The subscription's callback. */
    push(data: Uint8Array): void;
    private finish;
    [Symbol.asyncIterator](): StatusWatch;
    /** The next status; throws StatusError for a malformed message. */
    next(): Promise<IteratorResult<Status, undefined>>;
    /** Ends the watch (a for await loop that breaks calls it). */
    return(): Promise<IteratorResult<Status, undefined>>;
    /** Unsubscribes; statuses queued already are still read. */
    close(): Promise<void>;
}
/**
 * The fleet side of gated: it publishes proposals and waits for their
 * verdicts. Safe for concurrent calls. It makes no request when built, so
 * a tenant without JetStream API rights can use it (docs/FLEET.md lists
 * the subjects a tenant's NATS user needs).
 */
export declare class Client {
    private readonly nc;
    private readonly js;
    private readonly waitMs;
    private readonly apiPrefix;
    private readonly pollMs;
    private readonly fixedKeys;
    private readonly keysSubject;
    private keys;
    private readonly propagator;
    private readonly agent;
    /** Wraps a connection from @nats-io/transport-node's connect(). Throws InvalidConfigError for an unusable option. */
    constructor(nc: NatsConnection, opts?: ClientOptions);
    private wait;
    /**
     * Publishes p and waits for its verdict. It fails closed: it resolves
     * only for an approval. Any other verdict throws a VerdictError (a
     * ReviewRejectedError, ReviewBlockedError, ReviewFailedError,
     * ReviewTimeoutError, ProposalInvalidError) carrying it. p is sent as the
     * Go client sends it (encodeProposal), so proposing it again is
     * idempotent. Throws BadProposalError, NoVerdictError, IdReusedError,
     * UnconfirmedApprovalError, NotGatedError, TransportError.
     */
    propose(p: Proposal, opts?: CallOptions): Promise<Verdict>;
    /**
     * Publishes a raw proposal (its JSON bytes or text) and waits for its
     * verdict. Unlike propose it resolves with every verdict, whatever its
     * outcome: call checkVerdict before acting on it. Throws
     * BadProposalError, NoVerdictError, IdReusedError and the errors of an
     * untrustworthy verdict (UnconfirmedApprovalError, NotGatedError).
     */
    proposeRaw(data: Uint8Array | string, opts?: CallOptions): Promise<Verdict>;
    /** The trace headers of one publish, or undefined when there are none. */
    private traceHeaders;
    private send;
    /**
     * Waits for the verdict that replaces held, a verdict held for an
     * operator (isFinal(held) is false; propose throws it as an
     * AwaitingOperatorError, whose verdict it is), and resolves with it when it
     * approves. It fails closed as propose does: the operator's rejection
     * throws ReviewRejectedError, the hold's deadline passing throws
     * ReviewTimeoutError (never an approval), each carrying the final
     * verdict. A held verdict that is final already is checked as it is.
     *
     * Only the stored verdict, which only gated can write, is believed: a
     * message on the verdict subject or the proposal's status subject is a
     * hint to read it again, an approval counts only once the stored verdict
     * confirms it, and a verdict for other bytes under the id throws
     * IdReusedError. The stored verdict is also read every pollIntervalMs.
     * The tenant's NATS user needs nothing beyond what propose needs (and the
     * status subject, for the hints).
     *
     * opts.timeoutMs defaults to the hold's deadline and a minute more, else
     * the client's defaultWaitMs. Throws NoVerdictError when the wait ends
     * first (the action may still be decided: never act on it before),
     * BadProposalError when held is not a verdict with valid tokens,
     * TransportError.
     */
    awaitDecision(held: Verdict, opts?: CallOptions): Promise<Verdict>;
    /**
     * Follows the progress of tenant's proposal id: gated publishes each stage
     * on gated.status.<tenant>.<id> (received, policy_decided, review_started,
     * awaiting_operator, decided). The subscription is in place on the server
     * when the promise resolves, and gated has been asked for the proposal's
     * statuses (gated.watch.<tenant>.<id>), so a proposal published after it
     * loses no stage. Statuses are best effort and show progress; only a
     * verdict says what may run. The tenant's NATS user needs to subscribe to
     * gated.status.<tenant>.> and to request on gated.watch.<tenant>.*. Throws BadProposalError for a bad token,
     * TransportError when the subscription cannot be made.
     */
    watch(tenant: string, id: string, opts?: WatchOptions): Promise<StatusWatch>;
    /** The error of a failed step: NoVerdictError once the wait is over, else a TransportError. */
    private failed;
    /** Reads the stored verdict of a, briefly (5 s at most): a look-up that goes unanswered must not keep a wait from the subject. */
    private stored;
    private storedOrNull;
    /**
     * Looks up a stored verdict with one JetStream direct get of its key, so
     * it needs no right beyond reading that key. Throws NotFoundError when
     * none is stored, BadProposalError when tenant or id is not a valid
     * token, NoVerdictError when the wait ends first, TransportError.
     */
    verdict(tenant: string, id: string, opts?: CallOptions): Promise<Verdict>;
    private lookup;
    /**
     * Sends a raw proposal to gated's review service on
     * gated.review.<tenant> and resolves with the verdict of the reply,
     * whatever its outcome (like proposeRaw); an approval is confirmed with
     * the stored verdict first. Throws BadProposalError, a ServiceError
     * (instanceof also matches BadProposalError, TenantMismatchError,
     * IdReusedError, ServiceUnavailableError or NoVerdictError by its code),
     * ServiceUnavailableError when no gated serves the endpoint,
     * NoVerdictError when the wait ends first, MalformedVerdictError.
     */
    requestReview(data: Uint8Array | string, opts?: CallOptions): Promise<Verdict>;
    /**
     * Requests gated's grant key set on gated.grants.keys and caches it for
     * verifyGrant. A client built with grantKeySet returns that set and
     * requests nothing. Throws GrantKeySetError for a reply that is not a key
     * set, TransportError when nothing answers or the request fails.
     */
    fetchGrantKeys(opts?: CallOptions): Promise<GrantKeySet>;
    /** The cached key set, fetched on first use. */
    private grantKeys;
    /**
     * Verifies a grant with gated's key set (see verifyGrant in this
     * package) against what is about to run, and returns its claims. The key
     * set is fetched on first use and again, once, when the grant names a kid
     * the cached set does not hold (a key rotation). It does not take the
     * grant's use: useGrant does. Throws GrantError naming the member that
     * fails, GrantKeySetError, TransportError.
     */
    verifyGrant(token: string, expect: GrantExpectation, opts?: GrantCallOptions): Promise<GrantClaims>;
    /**
     * Takes a grant's single use: a request on gated.grants.<tenant>.use
     * (the grant's tenant; with ClientOptions.agent, the agent's subject
     * gated.grants.<tenant>.use.<agent>, where gated also refuses a grant
     * issued to another agent) with the token and by, free text naming who
     * uses it. gated checks the grant itself and moves its record from issued to
     * used by compare-and-set, so exactly one use of a grant succeeds. Verify
     * the grant first (verifyGrant) against what is about to run; run it only
     * after this resolves. Throws GrantUseError carrying gated's reason
     * (already used, expired, unknown grant, ...), GrantError for a token
     * that cannot be read or a reply that is not an answer, TransportError
     * when nothing answers or the request fails (the grant may then have been
     * used: do not run, propose again).
     */
    useGrant(token: string, by: string, opts?: CallOptions): Promise<GrantUse>;
    /**
     * Reports what became of an action run on a grant: a JetStream publish on
     * gated.outcomes.<tenant>.<proposal_id> (with ClientOptions.agent,
     * gated.outcomes.<tenant>.<proposal_id>.<agent>; stream GATED_OUTCOMES)
     * with Nats-Msg-Id <tenant>.<proposal_id>.<status>.<nonce>, a random nonce
     * of this report's, so that nobody can have the stream drop it by sending
     * another under its id first. started goes before the action runs; succeeded or failed
     * (with the error's text, cut to 4096 bytes) after. gated refuses a report
     * of a grant that was not used. Throws BadProposalError for bad tokens,
     * TransportError when JetStream does not acknowledge it.
     */
    reportOutcome(r: OutcomeReport, opts?: CallOptions): Promise<void>;
}
/** What acceptGrant needs: a Client. */
export interface GrantAuthority {
    verifyGrant(token: string, expect: GrantExpectation, opts?: GrantCallOptions): Promise<GrantClaims>;
    useGrant(token: string, by: string, opts?: CallOptions): Promise<GrantUse>;
    /** When present, a grant refused here is reported to gated (status refused). */
    reportOutcome?(r: OutcomeReport, opts?: CallOptions): Promise<void>;
}
/**
 * For a service that is handed a grant by the agent that asked for it and
 * acts on a target itself: verifies the grant against what the service is
 * about to do (expect: the tenant, proposal id and digest, action and
 * target), then takes its single use from gated, and resolves with the
 * claims. Act only after it resolves. Throws GrantError (forged, altered,
 * expired, another tenant's, another target's...), GrantUseError (used
 * already, expired, unknown to gated), GrantKeySetError, TransportError.
 * A grant refused here, when expect names the proposal id, is reported to
 * gated (status refused), which audits it as the executor's refusal; a
 * report that fails does not change the refusal.
 */
export declare function acceptGrant(authority: GrantAuthority, token: string, expect: GrantExpectation, opts: GrantCallOptions & {
    by: string;
}): Promise<GrantClaims>;
