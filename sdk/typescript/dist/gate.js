// The tool gate: put gated in front of an agent runtime's tools. It mirrors
// the Go ToolGate (bus/fleet/toolgate.go).
import { randomBytes } from "node:crypto";
import { AwaitingOperatorError, FoldedKeysError, GatedError, InvalidArgumentsError, InvalidConfigError, InvalidToolSpecError, NotApprovedError, VerdictError, checkVerdict, } from "./errors.js";
import { defaultWaitMs } from "./client.js";
import { decodeGrant, GrantError, GrantUseError } from "./grant.js";
import { findFoldedKeys } from "./fold.js";
import { describe as typeOf, goMap, isPlainObject, JSONValueError, parseJSON } from "./json.js";
import { encodeProposal, schemaVersion, validAction, validTenant } from "./wire.js";
/** The approval came, but the caller aborted before the tool could run. The tool did not run. */
export class AbortedError extends GatedError {
    code = "aborted";
}
/** Throws InvalidToolSpecError unless spec is usable. */
export function validateToolSpec(spec) {
    if (!validAction(spec?.action)) {
        throw new InvalidToolSpecError(`invalid tool spec: action ${JSON.stringify(spec?.action)} must match [A-Za-z0-9_-]{1,128}`);
    }
    switch (spec.class) {
        case "read":
            if (spec.labels?.length && typeof spec.describe !== "function") {
                throw new InvalidToolSpecError(`invalid tool spec: read tool ${spec.action} has labels and needs describe to say what a call reads`);
            }
            return;
        case "write":
        case "destructive":
            if (typeof spec.describe !== "function") {
                throw new InvalidToolSpecError(`invalid tool spec: ${spec.class} tool ${spec.action} needs describe to say what a call changes`);
            }
            return;
        default:
            throw new InvalidToolSpecError(`invalid tool spec: tool ${spec.action} has class ${JSON.stringify(spec.class)}; want read, write or destructive`);
    }
}
/** A fresh proposal id: a millisecond timestamp in base 36 (ids sort by time) and 64 random bits. */
export function newProposalId() {
    return Date.now().toString(36) + "-" + randomBytes(8).toString("hex");
}
/**
 * Puts gated in front of an agent runtime's tools: read tools run at once;
 * write and destructive tools run only after gated approves a proposal
 * describing the call.
 */
export class ToolGate {
    proposer;
    id;
    timeoutMs;
    newId;
    observe;
    awaitOperator;
    operatorTimeoutMs;
    allowUngranted;
    by;
    onReportError;
    /** Throws InvalidConfigError for an unusable identity or option. */
    constructor(proposer, identity, opts = {}) {
        if (!proposer || typeof proposer.propose !== "function") {
            throw new InvalidConfigError("invalid fleet client configuration: a ToolGate needs a Proposer such as a Client");
        }
        const id = identity ?? {};
        if (!validTenant(id.tenant)) {
            throw new InvalidConfigError(`invalid fleet client configuration: identity tenant ${JSON.stringify(id.tenant)} must match [a-z0-9_-]{1,64}`);
        }
        if (typeof id.agent !== "string" || id.agent.trim() === "") {
            throw new InvalidConfigError("invalid fleet client configuration: identity needs an agent name");
        }
        if (id.operator && (typeof id.operator.id !== "string" || id.operator.id.trim() === "")) {
            throw new InvalidConfigError("invalid fleet client configuration: identity operator needs an id");
        }
        if (id.reviewer !== undefined && id.reviewer !== "" && !validTenant(id.reviewer)) {
            throw new InvalidConfigError(`invalid fleet client configuration: identity reviewer ${JSON.stringify(id.reviewer)} must be a persona name matching [a-z0-9_-]{1,64}`);
        }
        const t = opts.reviewTimeoutMs ?? defaultWaitMs;
        if (!(t > 0) || !Number.isFinite(t)) {
            throw new InvalidConfigError(`invalid fleet client configuration: review timeout ${t} ms must be positive`);
        }
        if (opts.awaitOperator && typeof proposer.awaitDecision !== "function") {
            throw new InvalidConfigError("invalid fleet client configuration: awaitOperator needs a Proposer with awaitDecision, such as a Client");
        }
        const ot = opts.operatorTimeoutMs;
        if (ot !== undefined && (!(ot > 0) || !Number.isFinite(ot))) {
            throw new InvalidConfigError(`invalid fleet client configuration: operator timeout ${ot} ms must be positive`);
        }
        this.allowUngranted = opts.allowUngrantedApprovals === true;
        if (!this.allowUngranted && (typeof proposer.verifyGrant !== "function" || typeof proposer.useGrant !== "function")) {
            throw new InvalidConfigError("invalid fleet client configuration: a ToolGate needs a Proposer that verifies and uses grants (verifyGrant, useGrant), such as a Client, unless allowUngrantedApprovals is set");
        }
        if (opts.by !== undefined && (typeof opts.by !== "string" || opts.by.trim() === "")) {
            throw new InvalidConfigError("invalid fleet client configuration: by must name who uses grants");
        }
        this.by = opts.by ?? (id.session ? `${id.agent}/${id.session}` : id.agent);
        this.onReportError = opts.onReportError;
        this.proposer = proposer;
        this.awaitOperator = opts.awaitOperator === true;
        this.operatorTimeoutMs = ot;
        this.id = {
            ...id,
            operator: id.operator ? { ...id.operator, roles: id.operator.roles ? [...id.operator.roles] : undefined } : undefined,
        };
        this.timeoutMs = t;
        this.newId = opts.newId ?? newProposalId;
        this.observe = opts.observe;
    }
    /**
     * Wraps fn, a tool of the given spec, so that it runs only when gated
     * allows it: a read tool at once, a write or destructive tool once and
     * only on approval of a proposal built from the identity and
     * spec.describe(args), after the approval's grant verifies against that
     * proposal and gated takes its single use; it then reports the outcome
     * (started before fn runs, succeeded or failed after).
     *
     * A write or destructive call's arguments must be a JSON object. They
     * are encoded once, when the call is made, and the proposal carries them
     * whole (its arguments); describe and fn each get their own copy parsed
     * from exactly those bytes, never the caller's object, so fn acts on what
     * gated reviewed even if the caller changes its object while the review
     * is pending, and on no member the proposal did not show. The copy holds
     * what JSON holds: a member whose value is undefined is left out of it.
     *
     * Otherwise the guarded tool throws without running fn: an
     * InvalidArgumentsError for arguments that are not a JSON object, hold a
     * value JSON cannot write, or two member names equal under case folding
     * (nothing is proposed), a GrantError or GrantUseError
     * for a grant that is missing, does not hold or is used already, a
     * VerdictError for a verdict that is not an approval (an
     * AwaitingOperatorError for one held for an operator, unless the gate
     * was built with awaitOperator),
     * NoVerdictError when the review outlives the wait, InvalidToolSpecError,
     * or a transport error. fn gets the caller's abort signal.
     */
    guard(spec, fn) {
        let invalid;
        try {
            validateToolSpec(spec);
            if (typeof fn !== "function") {
                throw new InvalidToolSpecError(`invalid tool spec: tool ${spec.action} has no function`);
            }
        }
        catch (err) {
            invalid = err;
        }
        return async (args, opts) => {
            if (invalid) {
                throw invalid;
            }
            if (spec.class === "read" && !spec.labels?.length) {
                return await fn(args, { signal: opts?.signal });
            }
            // The arguments are read once, here: what is proposed, described
            // and run is parsed from these bytes, whatever becomes of args.
            const text = encodeArguments(spec.action, args);
            const change = spec.describe(JSON.parse(text));
            if (change?.arguments !== undefined) {
                throw new InvalidToolSpecError(`invalid tool spec: describe of ${spec.action} sets arguments; the gate proposes the call's own`);
            }
            const { claims } = await this.authorizeCall(spec.action, spec.class, change, opts, text);
            const reviewed = JSON.parse(text);
            if (!claims) {
                return await fn(reviewed, { signal: opts?.signal });
            }
            // The grant is used: say so before the tool runs. A report that
            // cannot be made stops the call here, before anything happened.
            await this.report(claims, "started", undefined, opts);
            let result;
            try {
                result = await fn(reviewed, { signal: opts?.signal });
            }
            catch (err) {
                await this.reportAfter(claims, "failed", errorText(err), opts);
                throw err;
            }
            await this.reportAfter(claims, "succeeded", undefined, opts);
            return result;
        };
    }
    /**
     * Reports what became of a call that authorize let run, on its
     * verdict's grant: started before the tool runs, then succeeded or failed
     * (with the error's text). A guarded tool does this itself. Throws
     * GrantError when the verdict has no grant, TransportError when the
     * report is not acknowledged.
     */
    async reportOutcome(v, status, error, opts) {
        if (typeof v?.grant !== "string" || v.grant === "") {
            throw new GrantError("grant", "grant: the verdict carries no grant to report an outcome on");
        }
        await this.report(decodeGrant(v.grant).claims, status, error, opts);
    }
    async report(c, status, error, opts) {
        if (typeof this.proposer.reportOutcome !== "function") {
            return;
        }
        await this.proposer.reportOutcome({ gid: c.gid, tenant: c.tenant, proposal_id: c.proposal_id, status, error }, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
    }
    /**
     * Tells gated this gate refused p's grant (status refused), which gated
     * audits as the executor's refusal. The refusal stands whether or not
     * the report gets through.
     */
    async reportRefusal(p, refusal, opts) {
        if (typeof this.proposer.reportOutcome !== "function") {
            return;
        }
        try {
            await this.proposer.reportOutcome({ gid: "", tenant: p.tenant, proposal_id: p.id, status: "refused", error: refusal.message }, { timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
        }
        catch {
            // Nothing runs either way.
        }
    }
    /** Reports the end of a call that ran: a failure to report must not hide the tool's result or error. */
    async reportAfter(c, status, error, opts) {
        try {
            // Not the caller's signal: the tool ran, and its outcome is owed even to a caller that gave up.
            await this.report(c, status, error, { timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
        }
        catch (err) {
            try {
                this.onReportError?.(err, { gid: c.gid, tenant: c.tenant, proposal_id: c.proposal_id, status, error });
            }
            catch {
                // the observer's own failure changes nothing
            }
        }
    }
    /**
     * Asks gated whether a call of action, of class, may make change, for
     * runtimes that dispatch tools dynamically. Resolves when the call may
     * run: at once with null for class read, else with the approval, whose
     * grant is verified and used by then (report the outcome with
     * reportOutcome). Throws as a guarded tool does.
     *
     * change.arguments, when set, are encoded once, when authorize is
     * called, and the proposal carries them: the runtime must then run the
     * tool with exactly these, as JSON (parse the tool's arguments from the
     * text it serialized and pass that copy both here and to the tool), and
     * with nothing beside them. A guarded tool does this itself.
     */
    async authorize(action, cls, change, opts) {
        const text = change?.arguments === undefined ? undefined : encodeArguments(action, change.arguments);
        return (await this.authorizeCall(action, cls, change, opts, text)).verdict;
    }
    async authorizeCall(action, cls, change, opts, argumentsText) {
        switch (cls) {
            case "read":
                if (!change?.labels?.length) {
                    return { verdict: null, claims: null };
                }
                break;
            case "write":
            case "destructive":
                break;
            default:
                throw new InvalidToolSpecError(`invalid tool spec: tool ${action} has class ${JSON.stringify(cls)}; want read, write or destructive`);
        }
        const p = this.proposal(action, cls, change ?? {}, argumentsText);
        let v;
        try {
            try {
                v = await this.proposer.propose(p, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
            }
            catch (err) {
                if (!(err instanceof AwaitingOperatorError) || !this.awaitOperator) {
                    throw err;
                }
                // Held: a person decides. Only the final verdict counts.
                this.observe?.(p, err.verdict);
                v = await this.proposer.awaitDecision(err.verdict, { signal: opts?.signal, timeoutMs: this.operatorTimeoutMs });
            }
        }
        catch (err) {
            if (err instanceof VerdictError) {
                this.observe?.(p, err.verdict);
            }
            throw err;
        }
        this.observe?.(p, v);
        // Trust nothing but an approval of exactly this proposal, whatever the Proposer says.
        checkVerdict(v);
        if (v.tenant !== p.tenant || v.proposal_id !== p.id || v.action !== p.action) {
            throw new NotApprovedError(`proposal not approved: the approval names ${v.tenant}.${v.proposal_id} (${v.action}), not proposal ${p.tenant}.${p.id} (${p.action})`);
        }
        if (v.grant === undefined || v.grant === "") {
            if (!this.allowUngranted) {
                const missing = new GrantError("grant", `grant: the approval of ${p.tenant}.${p.id} carries no grant, and gated signs every approval; ${action} does not run`);
                await this.reportRefusal(p, missing, opts);
                throw missing;
            }
            if (opts?.signal?.aborted) {
                throw new AbortedError(`approved, but the call was aborted before ${action} ran`, { cause: opts.signal.reason });
            }
            return { verdict: v, claims: null };
        }
        if (typeof this.proposer.verifyGrant !== "function" || typeof this.proposer.useGrant !== "function") {
            throw new GrantError("grant", `grant: the approval of ${p.tenant}.${p.id} carries a grant this gate's Proposer cannot verify; ${action} does not run`);
        }
        // The grant must name exactly what is about to run: these bytes, this
        // tenant, id, action and target (as sent, so as gated digested it).
        const { text, bytes } = encodeProposal(p);
        const sent = parseJSON(text);
        const expect = {
            tenant: p.tenant,
            proposal_id: p.id,
            action: p.action,
            proposal: bytes,
            target: sent["target"] ?? {},
        };
        let claims;
        try {
            claims = await this.proposer.verifyGrant(v.grant, expect, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
        }
        catch (err) {
            if (err instanceof GrantError && !(err instanceof GrantUseError)) {
                await this.reportRefusal(p, err, opts);
            }
            throw err;
        }
        if (opts?.signal?.aborted) {
            throw new AbortedError(`approved, but the call was aborted before ${action} ran`, { cause: opts.signal.reason });
        }
        await this.proposer.useGrant(v.grant, this.by, { signal: opts?.signal, timeoutMs: opts?.timeoutMs ?? this.timeoutMs });
        return { verdict: v, claims };
    }
    proposal(action, cls, c, argumentsText) {
        const p = {
            v: schemaVersion,
            id: c.id || this.newId(),
            tenant: this.id.tenant,
            kind: "action",
            action,
            class: cls,
            target: c.target,
            reason: c.reason,
            blast_radius: c.blast_radius,
            requested_by: { agent: this.id.agent, session: this.id.session },
            incident_id: c.incident_id,
            context_summary: c.context_summary,
            flags: { ...c.flags },
            reviewer: c.reviewer || this.id.reviewer,
        };
        if (c.labels?.length) {
            p.labels = [...c.labels];
        }
        if (this.id.operator) {
            p.operator = { ...this.id.operator };
        }
        if (argumentsText !== undefined) {
            // Fixed for the proposal's life: the Proposer, the observer and the
            // grant check all read these, and none can change them.
            Object.defineProperty(p, "arguments", { value: frozen(JSON.parse(argumentsText)), enumerable: true, writable: false, configurable: false });
        }
        return p;
    }
}
/**
 * Wraps fn so that it runs only when gated allows it (ToolGate.guard): a
 * read tool at once, a write or destructive tool only on approval.
 */
export function gate(toolGate, spec, fn) {
    if (!(toolGate instanceof ToolGate)) {
        const err = new InvalidToolSpecError(`invalid tool spec: tool ${String(spec?.action)} guarded without a ToolGate`);
        return () => Promise.reject(err);
    }
    return toolGate.guard(spec, fn);
}
/**
 * Encodes a call's arguments once, as the proposal carries them. Throws
 * InvalidArgumentsError for what is not a JSON object, holds what JSON
 * cannot write, or has two member names equal under case folding.
 */
function encodeArguments(action, args) {
    if (!isPlainObject(args)) {
        throw new InvalidArgumentsError("arguments", `invalid arguments: ${action} was called with a ${typeOf(args)}; a write or destructive tool takes a JSON object, which its proposal carries whole`);
    }
    let text;
    try {
        text = goMap(args, "arguments");
    }
    catch (err) {
        const path = err instanceof JSONValueError ? err.path : "arguments";
        throw new InvalidArgumentsError(path, `invalid arguments of ${action}: ${err.message}`, { cause: err });
    }
    const found = findFoldedKeys(JSON.parse(text));
    if (found) {
        const folded = new FoldedKeysError(`invalid arguments of ${action}`, found);
        throw new InvalidArgumentsError(folded.path, folded.message, { cause: folded });
    }
    return text;
}
/** Freezes v, a value JSON.parse returned, at every depth. */
function frozen(v) {
    if (typeof v === "object" && v !== null) {
        for (const e of Object.values(v)) {
            frozen(e);
        }
        Object.freeze(v);
    }
    return v;
}
/** The text of a tool's error, for a failed outcome. */
function errorText(err) {
    if (err instanceof Error) {
        return err.message || err.name;
    }
    try {
        return String(err);
    }
    catch {
        return "unprintable error";
    }
}
