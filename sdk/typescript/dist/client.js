// The fleet client: publish a proposal, wait for its verdict, and believe
// an approval only when gated's stored verdict confirms it. It mirrors the
// Go client (bus/fleet/client.go) check for check.
import { randomBytes } from "node:crypto";
import { errors as natsErrors, headers as natsHeaders } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import { BadProposalError, GatedError, InvalidConfigError, NoVerdictError, ServiceUnavailableError, TransportError, checkVerdict, isFinal, } from "./errors.js";
import { decodeGrant, decodeGrantKeySet, decodeGrantUseReply, encodeOutcome, GrantError, grantKeyIDOf, grantUseSubject, grantWire, outcomeSubject, verifyGrant, } from "./grant.js";
import { StatusError, statusSubject, statusUpdate, statusWatchSubject } from "./status.js";
import { traceHeaders } from "./trace.js";
import { addressKey, addressOf, answer, confirmApproval, decodeReviewReply, decodeStoredVerdict, encodeProposal, proposalDigest, proposalSubject, validID, validTenant, verdictLookupSubject, verdictMessage, verdictSubject, wire, } from "./wire.js";
/** How long a call waits for its verdict unless it says otherwise: 90 s, as the Go client. */
export const defaultWaitMs = 90_000;
/** How long a watch waits for gated to answer its ask for a proposal's statuses: 5 s, as the Go client. */
const watchAskMs = 5_000;
/**
 * How long Client.awaitDecision waits past a hold's deadline when it names no
 * timeoutMs: gated times the hold out at the deadline and publishes the
 * timeout a moment later. 60 s, as the Go client.
 */
export const holdGraceMs = 60_000;
/**
 * The status events of one proposal, as an async iterator: for await (const
 * st of watch). A malformed event makes next() throw a StatusError; the
 * watch stays open, and the next call to next() reads on. It ends when
 * closed, when its signal aborts, or when the connection closes.
 */
export class StatusWatch {
    sub;
    tenant;
    id;
    queue = [];
    wake;
    done = false;
    /** @internal Built by Client.watch. */
    constructor(sub, tenant, id, signal) {
        this.sub = sub;
        this.tenant = tenant;
        this.id = id;
        signal?.addEventListener("abort", () => void this.close(), { once: true });
        void sub.closed.then(() => this.finish());
    }
    /** @internal The subscription's callback. */
    push(data) {
        this.queue.push(data);
        this.wake?.();
    }
    finish() {
        this.done = true;
        this.wake?.();
    }
    [Symbol.asyncIterator]() {
        return this;
    }
    /** The next status; throws StatusError for a malformed message. */
    async next() {
        for (;;) {
            const data = this.queue.shift();
            if (data !== undefined) {
                return { value: statusUpdate(this.tenant, this.id, data), done: false };
            }
            if (this.done) {
                return { value: undefined, done: true };
            }
            await new Promise((resolve) => {
                this.wake = resolve;
            });
            this.wake = undefined;
        }
    }
    /** Ends the watch (a for await loop that breaks calls it). */
    async return() {
        await this.close();
        return { value: undefined, done: true };
    }
    /** Unsubscribes; statuses queued already are still read. */
    async close() {
        try {
            this.sub.unsubscribe();
        }
        catch {
            // the connection is closed: nothing to unsubscribe
        }
        this.finish();
    }
}
/** A deadline and an abort signal, as one. */
class Wait {
    deadline;
    signal;
    controller = new AbortController();
    timer;
    unlink;
    constructor(timeoutMs, outer) {
        this.deadline = Date.now() + timeoutMs;
        this.signal = this.controller.signal;
        this.timer = setTimeout(() => this.controller.abort(new Error(`deadline of ${timeoutMs} ms passed`)), timeoutMs);
        const onAbort = () => this.controller.abort(outer?.reason ?? new Error("aborted"));
        if (outer?.aborted) {
            onAbort();
        }
        outer?.addEventListener("abort", onAbort, { once: true });
        this.unlink = () => outer?.removeEventListener("abort", onAbort);
    }
    /** Milliseconds left, at least 1 (NATS refuses a zero timeout). */
    remaining(cap = Infinity) {
        return Math.max(1, Math.min(cap, this.deadline - Date.now()));
    }
    /** Why the wait ended, for an error message. */
    reason() {
        const r = this.signal.reason;
        return r instanceof Error ? r.message : String(r);
    }
    /** Rejects with the abort, or resolves with p, whichever comes first. */
    race(p) {
        if (this.signal.aborted) {
            p.catch(() => { });
            return Promise.reject(this.signal.reason);
        }
        return new Promise((resolve, reject) => {
            const onAbort = () => reject(this.signal.reason);
            this.signal.addEventListener("abort", onAbort, { once: true });
            p.then((v) => {
                this.signal.removeEventListener("abort", onAbort);
                resolve(v);
            }, (e) => {
                this.signal.removeEventListener("abort", onAbort);
                reject(e);
            });
        });
    }
    close() {
        clearTimeout(this.timer);
        this.unlink();
    }
}
function headerOf(h) {
    return (name) => {
        const v = h?.get(name);
        return v === undefined || v === "" ? undefined : v;
    };
}
/**
 * The fleet side of gated: it publishes proposals and waits for their
 * verdicts. Safe for concurrent calls. It makes no request when built, so
 * a tenant without JetStream API rights can use it (docs/FLEET.md lists
 * the subjects a tenant's NATS user needs).
 */
export class Client {
    nc;
    js;
    waitMs;
    apiPrefix;
    pollMs;
    fixedKeys;
    keysSubject;
    keys;
    propagator;
    agent;
    /** Wraps a connection from @nats-io/transport-node's connect(). Throws InvalidConfigError for an unusable option. */
    constructor(nc, opts = {}) {
        const wait = opts.defaultWaitMs ?? defaultWaitMs;
        if (!(wait > 0) || !Number.isFinite(wait)) {
            throw new InvalidConfigError(`invalid fleet client configuration: default wait ${wait} ms must be positive`);
        }
        const poll = opts.pollIntervalMs ?? 2000;
        if (!(poll > 0) || !Number.isFinite(poll)) {
            throw new InvalidConfigError(`invalid fleet client configuration: poll interval ${poll} ms must be positive`);
        }
        const prefix = (opts.apiPrefix ?? wire.defaultAPIPrefix).replace(/\.$/, "");
        if (prefix === "" || /[ *>]/.test(prefix)) {
            throw new InvalidConfigError(`invalid fleet client configuration: JetStream API prefix ${JSON.stringify(prefix)}`);
        }
        this.nc = nc;
        this.js = jetstream(nc, { apiPrefix: prefix });
        this.waitMs = wait;
        this.apiPrefix = prefix;
        this.pollMs = poll;
        const keysSubject = opts.grantKeysSubject ?? grantWire.keysSubject;
        if (typeof keysSubject !== "string" || !/^[^\s*>.]+(\.[^\s*>.]+)*$/.test(keysSubject)) {
            throw new InvalidConfigError(`invalid fleet client configuration: grant keys subject ${JSON.stringify(keysSubject)}`);
        }
        this.keysSubject = keysSubject;
        if (opts.grantKeySet !== undefined) {
            try {
                this.fixedKeys = decodeGrantKeySet(opts.grantKeySet);
            }
            catch (err) {
                throw new InvalidConfigError(`invalid fleet client configuration: ${err.message}`, { cause: err });
            }
        }
        if (opts.propagator !== undefined && typeof opts.propagator !== "function") {
            throw new InvalidConfigError("invalid fleet client configuration: propagator must be a function");
        }
        this.propagator = opts.propagator;
        if (opts.agent !== undefined && !validID(opts.agent)) {
            throw new InvalidConfigError(`invalid fleet client configuration: agent ${JSON.stringify(opts.agent)} must match [A-Za-z0-9_-]{1,128} to be a subject token`);
        }
        this.agent = opts.agent;
    }
    wait(opts) {
        const t = opts?.timeoutMs ?? this.waitMs;
        if (!(t > 0) || !Number.isFinite(t)) {
            throw new InvalidConfigError(`invalid call option: timeoutMs ${t} must be positive`);
        }
        return new Wait(t, opts?.signal);
    }
    /**
     * Publishes p and waits for its verdict. It fails closed: it resolves
     * only for an approval. Any other verdict throws a VerdictError (a
     * ReviewRejectedError, ReviewBlockedError, ReviewFailedError,
     * ReviewTimeoutError, ProposalInvalidError) carrying it. p is sent as the
     * Go client sends it (encodeProposal), so proposing it again is
     * idempotent. Throws BadProposalError, NoVerdictError, IdReusedError,
     * UnconfirmedApprovalError, NotGatedError, TransportError.
     */
    async propose(p, opts) {
        const { address, bytes } = encodeProposal(p);
        const v = await this.send(address, bytes, opts);
        checkVerdict(v);
        return v;
    }
    /**
     * Publishes a raw proposal (its JSON bytes or text) and waits for its
     * verdict. Unlike propose it resolves with every verdict, whatever its
     * outcome: call checkVerdict before acting on it. Throws
     * BadProposalError, NoVerdictError, IdReusedError and the errors of an
     * untrustworthy verdict (UnconfirmedApprovalError, NotGatedError).
     */
    async proposeRaw(data, opts) {
        const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
        return this.send(addressOf(bytes), bytes, opts);
    }
    /** The trace headers of one publish, or undefined when there are none. */
    traceHeaders(explicit) {
        const t = traceHeaders(explicit, this.propagator);
        const keys = Object.keys(t);
        if (keys.length === 0) {
            return undefined;
        }
        const h = natsHeaders();
        for (const k of keys) {
            h.set(k, t[k]);
        }
        return h;
    }
    async send(a, bytes, opts) {
        // A malformed trace context is refused before anything is subscribed.
        traceHeaders(opts?.trace, undefined);
        const w = this.wait(opts);
        const queue = [];
        let wake;
        let sub;
        let statusSub;
        try {
            const onStatus = opts?.onStatus;
            if (onStatus) {
                // Subscribed before the verdict subject: NATS calls a connection's
                // callbacks in the order its messages arrive, and gated publishes
                // the decided status before the verdict.
                statusSub = this.nc.subscribe(statusSubject(a.tenant, a.id), {
                    callback: (err, m) => {
                        if (err) {
                            return;
                        }
                        let st;
                        try {
                            st = statusUpdate(a.tenant, a.id, m.data);
                        }
                        catch (e) {
                            st = e instanceof StatusError ? e : new StatusError("", String(e));
                        }
                        onStatus(st);
                    },
                });
            }
            sub = this.nc.subscribe(verdictSubject(a.tenant, a.id), {
                callback: (err, m) => {
                    if (!err) {
                        queue.push(m);
                        wake?.();
                    }
                },
            });
            // The subscription must be in place on the server before the
            // proposal can be decided, or a fast verdict is missed. The server
            // handles a connection's SUB, PING and PUB in the order they were
            // sent, so the flush is sent before the proposal and both are
            // awaited together: waiting for the PONG before publishing would
            // cost a round trip and add nothing to that order. A flush that
            // fails fails the call, as in the Go client.
            const flushed = this.nc.flush().then(() => undefined, (err) => err ?? new Error("flush failed"));
            const digest = proposalDigest(bytes);
            let hdrs = this.traceHeaders(opts?.trace);
            if (onStatus) {
                // gated sends the statuses of a proposal whose proposer says it
                // follows them, on any server.
                hdrs ??= natsHeaders();
                hdrs.set(wire.statusHeader, "1");
            }
            let ack;
            try {
                ack = await w.race(this.js.publish(proposalSubject(a.tenant, a.action), bytes, { msgID: addressKey(a), timeout: w.remaining(), headers: hdrs }));
            }
            catch (err) {
                const flushErr = await Promise.race([flushed, Promise.resolve(undefined)]);
                if (flushErr !== undefined) {
                    throw this.failed(w, a, "subscribing to verdicts", flushErr);
                }
                throw this.failed(w, a, `publishing proposal ${addressKey(a)}`, err);
            }
            const flushErr = await w.race(flushed).catch((err) => err);
            if (flushErr !== undefined) {
                throw this.failed(w, a, "subscribing to verdicts", flushErr);
            }
            if (ack.duplicate) {
                const v = await this.storedOrNull(a, w);
                if (v) {
                    return answer(a, digest, v);
                }
            }
            // A duplicate's verdict may have been published before this client
            // subscribed, and a verdict message can be lost; poll the bucket now
            // and then as well.
            let nextPoll = Date.now() + this.pollMs;
            const closed = this.nc.closed().then(() => undefined);
            for (;;) {
                let m;
                while ((m = queue.shift()) !== undefined) {
                    // Anything else on the verdict subject is skipped, not taken as a
                    // failure: another client must not be able to fail this wait.
                    const v = verdictMessage(a, m.data);
                    if (v) {
                        return await confirmApproval(a, digest, v, () => this.stored(a, w));
                    }
                }
                if (Date.now() >= nextPoll) {
                    // The verdict message is core NATS: lost while the connection
                    // reconnects. The stored verdict is not.
                    const v = await this.storedOrNull(a, w);
                    if (v) {
                        return answer(a, digest, v);
                    }
                    nextPoll = Date.now() + this.pollMs;
                    continue;
                }
                if (this.nc.isClosed()) {
                    throw new NoVerdictError(`no verdict before the deadline: proposal ${addressKey(a)}: the connection is closed`);
                }
                const woken = new Promise((resolve) => {
                    wake = resolve;
                });
                let timer;
                const polled = new Promise((resolve) => {
                    timer = setTimeout(resolve, Math.max(0, nextPoll - Date.now()));
                });
                try {
                    await w.race(Promise.race([woken, polled, closed]));
                }
                catch {
                    throw new NoVerdictError(`no verdict before the deadline: proposal ${addressKey(a)}: ${w.reason()}`);
                }
                finally {
                    clearTimeout(timer);
                    wake = undefined;
                }
            }
        }
        finally {
            w.close();
            try {
                sub?.unsubscribe();
                statusSub?.unsubscribe();
            }
            catch {
                // the connection is closed: nothing to unsubscribe
            }
        }
    }
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
    async awaitDecision(held, opts) {
        if (typeof held !== "object" || held === null || typeof held.outcome !== "string") {
            throw new BadProposalError("proposal cannot be addressed: awaitDecision needs the held verdict");
        }
        if (isFinal(held)) {
            checkVerdict(held);
            return held;
        }
        if (!validTenant(held.tenant) || !validID(held.proposal_id)) {
            throw new BadProposalError(`proposal cannot be addressed: the held verdict names ${JSON.stringify(held.tenant)}.${JSON.stringify(held.proposal_id)}`);
        }
        let timeoutMs = opts?.timeoutMs;
        if (timeoutMs === undefined && held.awaiting_operator?.deadline) {
            const until = Date.parse(held.awaiting_operator.deadline) - Date.now();
            timeoutMs = Number.isFinite(until) && until > 0 ? until + holdGraceMs : holdGraceMs;
        }
        const w = this.wait({ ...opts, timeoutMs });
        const a = { tenant: held.tenant, id: held.proposal_id, action: held.action ?? "" };
        const digest = held.proposal_sha256 ?? "";
        const queue = [];
        let hint = false;
        let wake;
        const subs = [];
        try {
            try {
                subs.push(this.nc.subscribe(verdictSubject(a.tenant, a.id), {
                    callback: (err, m) => {
                        if (!err) {
                            queue.push(m.data);
                            wake?.();
                        }
                    },
                }), this.nc.subscribe(statusSubject(a.tenant, a.id), {
                    callback: (err) => {
                        if (!err) {
                            hint = true;
                            wake?.();
                        }
                    },
                }));
                await w.race(this.nc.flush());
            }
            catch (err) {
                throw this.failed(w, a, "subscribing to verdicts", err);
            }
            // A look-up that fails is no answer: look again later. A stored
            // verdict for other bytes is an answer: IdReusedError.
            const look = async () => {
                const s = await this.storedOrNull(a, w);
                return s && isFinal(answer(a, digest, s)) ? s : null;
            };
            // The decision may have come before the subscriptions: look first.
            let nextPoll = 0;
            const closed = this.nc.closed().then(() => undefined);
            for (;;) {
                if (hint || Date.now() >= nextPoll) {
                    hint = false;
                    nextPoll = Date.now() + this.pollMs;
                    const v = await look();
                    if (v) {
                        checkVerdict(v);
                        return v;
                    }
                }
                let data;
                while ((data = queue.shift()) !== undefined) {
                    const m = verdictMessage(a, data);
                    if (!m || !isFinal(m)) {
                        continue;
                    }
                    // A refusal is taken as it comes, an approval only once the
                    // stored verdict confirms it; a message that does not hold up
                    // (forged, for other bytes, unconfirmed) ends nothing.
                    let v;
                    try {
                        v = await confirmApproval(a, digest, m, () => this.stored(a, w));
                    }
                    catch {
                        continue;
                    }
                    if (isFinal(v)) {
                        checkVerdict(v);
                        return v;
                    }
                }
                if (this.nc.isClosed()) {
                    throw new NoVerdictError(`no verdict before the deadline: held proposal ${addressKey(a)}: the connection is closed`);
                }
                if (hint) {
                    continue;
                }
                const woken = new Promise((resolve) => {
                    wake = resolve;
                });
                let timer;
                const polled = new Promise((resolve) => {
                    timer = setTimeout(resolve, Math.max(0, nextPoll - Date.now()));
                });
                try {
                    await w.race(Promise.race([woken, polled, closed]));
                }
                catch {
                    throw new NoVerdictError(`no verdict before the deadline: proposal ${addressKey(a)} is held for an operator: ${w.reason()}; it may still be decided, never act on it before`);
                }
                finally {
                    clearTimeout(timer);
                    wake = undefined;
                }
            }
        }
        finally {
            w.close();
            for (const sub of subs) {
                try {
                    sub.unsubscribe();
                }
                catch {
                    // the connection is closed: nothing to unsubscribe
                }
            }
        }
    }
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
    async watch(tenant, id, opts = {}) {
        if (!validTenant(tenant)) {
            throw new BadProposalError(`bad proposal: tenant ${JSON.stringify(tenant)} must match [a-z0-9_-]{1,64}`);
        }
        if (!validID(id)) {
            throw new BadProposalError(`bad proposal: id ${JSON.stringify(id)} must match [A-Za-z0-9_-]{1,128}`);
        }
        let watch;
        const early = [];
        let sub;
        try {
            sub = this.nc.subscribe(statusSubject(tenant, id), {
                callback: (err, m) => {
                    if (!err) {
                        if (watch) {
                            watch.push(m.data);
                        }
                        else {
                            early.push(m.data);
                        }
                    }
                },
            });
            await this.nc.flush();
        }
        catch (err) {
            throw new TransportError(`subscribing to the status of ${tenant}.${id}: ${String(err)}`, { cause: err });
        }
        // gated sends a status only when somebody asked for it (or, on its
        // embedded server, subscribes): ask, and wait for the first gated's
        // answer. An ask nobody answers or that NATS refuses leaves the watch
        // to the statuses gated sends anyway.
        await this.nc.request(statusWatchSubject(tenant, id), undefined, { timeout: watchAskMs }).catch(() => undefined);
        watch = new StatusWatch(sub, tenant, id, opts.signal);
        for (const data of early) {
            watch.push(data);
        }
        return watch;
    }
    /** The error of a failed step: NoVerdictError once the wait is over, else a TransportError. */
    failed(w, a, doing, err) {
        if (err instanceof GatedError) {
            return err;
        }
        if (w.signal.aborted) {
            return new NoVerdictError(`no verdict before the deadline: proposal ${addressKey(a)} not acknowledged: ${w.reason()}`, {
                cause: err,
            });
        }
        return new TransportError(`${doing}: ${err?.message ?? String(err)}`, { cause: err });
    }
    /** Reads the stored verdict of a, briefly (5 s at most): a look-up that goes unanswered must not keep a wait from the subject. */
    stored(a, w) {
        return this.lookup(a.tenant, a.id, w, 5000);
    }
    async storedOrNull(a, w) {
        try {
            return await this.stored(a, w);
        }
        catch {
            return null;
        }
    }
    /**
     * Looks up a stored verdict with one JetStream direct get of its key, so
     * it needs no right beyond reading that key. Throws NotFoundError when
     * none is stored, BadProposalError when tenant or id is not a valid
     * token, NoVerdictError when the wait ends first, TransportError.
     */
    async verdict(tenant, id, opts) {
        if (!validTenant(tenant)) {
            throw new BadProposalError(`proposal cannot be addressed: tenant ${JSON.stringify(tenant)} must match [a-z0-9_-]{1,64}`);
        }
        if (!validID(id)) {
            throw new BadProposalError(`proposal cannot be addressed: id ${JSON.stringify(id)} must match [A-Za-z0-9_-]{1,128}`);
        }
        const w = this.wait(opts);
        try {
            return await this.lookup(tenant, id, w, Infinity);
        }
        finally {
            w.close();
        }
    }
    async lookup(tenant, id, w, capMs) {
        const subject = verdictLookupSubject(this.apiPrefix, tenant, id);
        let m;
        try {
            m = await w.race(this.nc.request(subject, new Uint8Array(0), { timeout: w.remaining(capMs) }));
        }
        catch (err) {
            if (err instanceof natsErrors.NoRespondersError || err?.cause instanceof natsErrors.NoRespondersError) {
                throw new TransportError(`reading verdict ${tenant}.${id}: nothing answers ${subject}: is gated's bucket ${wire.verdictBucket} set up, and may this user read it?`, { cause: err });
            }
            if (w.signal.aborted) {
                throw new NoVerdictError(`no verdict before the deadline: reading verdict ${tenant}.${id}: ${w.reason()}`, { cause: err });
            }
            throw new TransportError(`reading verdict ${tenant}.${id}: ${err?.message ?? String(err)}`, { cause: err });
        }
        const h = m.headers;
        return decodeStoredVerdict(tenant, id, {
            data: m.data,
            status: h && h.code ? String(h.code) : "",
            description: h?.description ?? "",
            header: headerOf(h),
        });
    }
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
    async requestReview(data, opts) {
        const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
        const a = addressOf(bytes);
        const w = this.wait(opts);
        try {
            const subject = wire.reviewSubjectPrefix + a.tenant;
            let m;
            try {
                m = await w.race(this.nc.request(subject, bytes, { timeout: w.remaining() }));
            }
            catch (err) {
                if (err instanceof natsErrors.NoRespondersError || err?.cause instanceof natsErrors.NoRespondersError) {
                    throw new ServiceUnavailableError(`review service unavailable: nothing serves ${subject} (is gated serve running with --review-service?)`, { cause: err });
                }
                if (w.signal.aborted || err instanceof natsErrors.TimeoutError) {
                    const why = w.signal.aborted ? w.reason() : err.message;
                    throw new NoVerdictError(`no verdict before the deadline: proposal ${addressKey(a)}: ${why}`, { cause: err });
                }
                throw new TransportError(`requesting review of ${addressKey(a)}: ${err?.message ?? String(err)}`, { cause: err });
            }
            const v = decodeReviewReply(headerOf(m.headers), m.data);
            return await confirmApproval(a, proposalDigest(bytes), v, () => this.stored(a, w));
        }
        finally {
            w.close();
        }
    }
    /**
     * Requests gated's grant key set on gated.grants.keys and caches it for
     * verifyGrant. A client built with grantKeySet returns that set and
     * requests nothing. Throws GrantKeySetError for a reply that is not a key
     * set, TransportError when nothing answers or the request fails.
     */
    async fetchGrantKeys(opts) {
        if (this.fixedKeys) {
            return this.fixedKeys;
        }
        const w = this.wait(opts);
        const fetched = (async () => {
            let m;
            try {
                m = await w.race(this.nc.request(this.keysSubject, new Uint8Array(0), { timeout: w.remaining(10_000) }));
            }
            catch (err) {
                if (err instanceof natsErrors.NoRespondersError || err?.cause instanceof natsErrors.NoRespondersError) {
                    throw new TransportError(`fetching grant keys: nothing answers ${this.keysSubject}: is gated serving, and may this user request it?`, { cause: err });
                }
                throw new TransportError(`fetching grant keys: ${err?.message ?? String(err)}`, { cause: err });
            }
            finally {
                w.close();
            }
            return decodeGrantKeySet(m.data);
        })();
        this.keys = fetched;
        // A failed fetch is not cached: the next call asks again.
        fetched.catch(() => {
            if (this.keys === fetched) {
                this.keys = undefined;
            }
        });
        return fetched;
    }
    /** The cached key set, fetched on first use. */
    grantKeys(opts) {
        if (this.fixedKeys) {
            return Promise.resolve(this.fixedKeys);
        }
        return this.keys ?? this.fetchGrantKeys(opts);
    }
    /**
     * Verifies a grant with gated's key set (see verifyGrant in this
     * package) against what is about to run, and returns its claims. The key
     * set is fetched on first use and again, once, when the grant names a kid
     * the cached set does not hold (a key rotation). It does not take the
     * grant's use: useGrant does. Throws GrantError naming the member that
     * fails, GrantKeySetError, TransportError.
     */
    async verifyGrant(token, expect, opts) {
        const kid = grantKeyIDOf(token);
        let keys = await this.grantKeys(opts);
        if (!this.fixedKeys && kid !== undefined && !keys.keys.some((k) => k.kid === kid)) {
            keys = await this.fetchGrantKeys(opts);
        }
        return verifyGrant(token, keys, opts?.now ?? Date.now() / 1000, expect);
    }
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
    async useGrant(token, by, opts) {
        const { claims } = decodeGrant(token);
        if (!validTenant(claims.tenant)) {
            throw new GrantError("tenant", `tenant ${JSON.stringify(claims.tenant)} is not a tenant token`);
        }
        if (typeof by !== "string") {
            throw new InvalidConfigError("invalid call option: useGrant needs by, who uses the grant");
        }
        const subject = grantUseSubject(claims.tenant, this.agent);
        const w = this.wait(opts);
        let m;
        try {
            m = await w.race(this.nc.request(subject, new TextEncoder().encode(JSON.stringify({ grant: token, by })), { timeout: w.remaining() }));
        }
        catch (err) {
            const why = err instanceof natsErrors.NoRespondersError || err?.cause instanceof natsErrors.NoRespondersError
                ? `nothing answers ${subject}: is gated serving grants, and may this user request it?`
                : w.signal.aborted
                    ? w.reason()
                    : (err?.message ?? String(err));
            throw new TransportError(`using grant ${claims.gid} of ${claims.tenant}.${claims.proposal_id}: ${why}; do not act on it`, {
                cause: err,
            });
        }
        finally {
            w.close();
        }
        decodeGrantUseReply(m.data, claims.gid);
        return { gid: claims.gid, claims };
    }
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
    async reportOutcome(r, opts) {
        if (!validTenant(r?.tenant) || !validID(r?.proposal_id)) {
            throw new BadProposalError(`reporting an outcome: tenant ${JSON.stringify(r?.tenant)} and proposal id ${JSON.stringify(r?.proposal_id)} must be tokens`);
        }
        if (r.status !== "started" && r.status !== "succeeded" && r.status !== "failed" && r.status !== "refused") {
            throw new BadProposalError(`reporting an outcome: status ${JSON.stringify(r.status)}; want started, succeeded, failed or refused`);
        }
        if (typeof r.gid !== "string" || (r.gid === "" && r.status !== "refused")) {
            throw new BadProposalError("reporting an outcome: it names no grant (gid)");
        }
        const w = this.wait(opts);
        try {
            await w.race(this.js.publish(outcomeSubject(r.tenant, r.proposal_id, this.agent), encodeOutcome(r), {
                msgID: `${r.tenant}.${r.proposal_id}.${r.status}.${reportNonce()}`,
                timeout: w.remaining(),
            }));
        }
        catch (err) {
            throw new TransportError(`reporting outcome ${r.status} of ${r.tenant}.${r.proposal_id}: ${w.signal.aborted ? w.reason() : (err?.message ?? String(err))}`, { cause: err });
        }
        finally {
            w.close();
        }
    }
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
export async function acceptGrant(authority, token, expect, opts) {
    if (typeof opts?.by !== "string" || opts.by.trim() === "") {
        throw new InvalidConfigError("invalid call option: acceptGrant needs by, the service that uses the grant");
    }
    let claims;
    try {
        claims = await authority.verifyGrant(token, expect, opts);
    }
    catch (err) {
        if (err instanceof GrantError && typeof authority.reportOutcome === "function" && validTenant(expect?.tenant) && validID(expect?.proposal_id)) {
            try {
                await authority.reportOutcome({ gid: "", tenant: expect.tenant, proposal_id: expect.proposal_id, status: "refused", error: err.message }, { timeoutMs: opts?.timeoutMs });
            }
            catch {
                // The refusal stands whether or not gated hears of it.
            }
        }
        throw err;
    }
    await authority.useGrant(token, opts.by, opts);
    return claims;
}
/** A random nonce of one outcome report: 16 bytes, unpadded base64url. */
function reportNonce() {
    return randomBytes(16).toString("base64url");
}
