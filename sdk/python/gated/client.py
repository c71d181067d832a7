"""The asyncio fleet client: publish proposals, wait for verdicts, believe
only what gated stored.

It mirrors the Go client (bus/fleet): it subscribes to the verdict subject
and flushes before it publishes, publishes on JetStream with Nats-Msg-Id
<tenant>.<id>, skips anything on the verdict subject that is not a verdict
for this proposal, refuses a verdict for other bytes, and believes an
approval only once the stored verdict confirms it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gated.errors import (
    BadProposal,
    ConnectionLost,
    GatedError,
    GrantRefused,
    InvalidConfig,
    KeySetError,
    Malformed,
    NoVerdict,
    PublishError,
    ServiceUnavailable,
    StatusError,
    StoreError,
    service_error,
)
from gated.grant import Claims, Expected, KeySet, header_kid, outcome_report, read_use_reply, use_request, verify
from gated.proposal import Proposal
from gated.status import Status, status_update
from gated.tracing import trace_headers
from gated.verdict import (
    Verdict,
    answer,
    confirm_approval,
    decode_review_reply,
    decode_stored_verdict,
    verdict_message,
)
from gated.wire import (
    DEFAULT_API_PREFIX,
    GRANT_KEYS_SUBJECT,
    MSG_ID_HEADER,
    OUTCOME_STATUSES,
    SERVICE_ERROR_CODE_HEADER,
    SERVICE_ERROR_HEADER,
    STATUS_HEADER,
    Address,
    address_of,
    digest,
    encode_proposal,
    grant_use_subject,
    outcome_subject,
    proposal_subject,
    review_subject,
    status_subject,
    status_watch_subject,
    valid_id,
    valid_tenant,
    verdict_lookup_subject,
    verdict_subject,
)

WATCH_ASK = 5.0
"""How long, in seconds, a watch waits for gated to answer its ask."""

StatusCallback = Callable[[Status | StatusError], None]
"""What ``on_status`` is called with: a status, or the StatusError of a
malformed one."""

DEFAULT_WAIT = 90.0
"""Seconds a call waits for its verdict when it is given no timeout."""

POLL_INTERVAL = 2.0
"""Seconds between look-ups of the stored verdict while waiting: the
verdict message is core NATS and can be lost; the stored verdict is not."""

INBOX_SIZE = 256
"""Messages on a proposal's verdict subject kept while it waits."""

CLOSED_CHECK = 0.25
"""Seconds between checks, while waiting, that the connection is open."""

HOLD_GRACE = 60.0
"""Seconds :meth:`Client.await_decision` waits past a hold's deadline when
it is given no timeout: gated times the hold out at the deadline, and
publishes the timeout a moment later."""

LOOKUP_WAIT = 5.0
"""Seconds one look-up of the stored verdict may take: one that goes
unanswered must not keep a wait from the verdict subject."""

GRANT_WAIT = 10.0
"""Seconds a grant call (the key set, a use, an outcome report) waits for
gated's answer when it is given no timeout."""

KEYS_MAX_AGE = 300.0
"""Seconds a fetched grant key set is used before it is fetched again. A
grant signed by a key the cached set lacks makes the client fetch the set
at once, so a key rotation never waits for this."""


class Client:
    """The fleet side of gated on one NATS connection. Safe for concurrent
    use by the tasks of one event loop.

    Build one with :meth:`connect`, or wrap a connection you made with
    ``Client(nc)``. Every call takes ``timeout`` in seconds (default: the
    client's ``default_wait``); the deadline is kept exactly, and a call
    that runs out of it raises :class:`NoVerdict`.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        default_wait: float = DEFAULT_WAIT,
        api_prefix: str = DEFAULT_API_PREFIX,
        poll_interval: float = POLL_INTERVAL,
        grant_keys: KeySet | None = None,
        agent: str | None = None,
    ) -> None:
        """``grant_keys`` is the key set grants are verified with (for
        example ``KeySet.from_file`` of what `gated grants keys` printed);
        by default the client fetches gated's from gated.grants.keys.

        ``agent`` puts grant uses and outcome reports on that agent's
        subjects, gated.grants.<tenant>.use.<agent> and
        gated.outcomes.<tenant>.<id>.<agent>, where gated accepts only a
        grant issued to the agent (the proposal's requested_by.agent). Give
        it where each agent connects as a NATS user of its own that may
        publish on its own subjects alone (docs/NATS.md): then no agent of
        the tenant can use or report for another's grants. It must be a
        token, [A-Za-z0-9_-]{1,128}. Default: the tenant's subjects."""
        if not default_wait > 0:
            raise InvalidConfig(f"default wait {default_wait} must be positive")
        if not poll_interval > 0:
            raise InvalidConfig(f"poll interval {poll_interval} must be positive")
        api_prefix = api_prefix.removesuffix(".")
        if not api_prefix or any(c in api_prefix for c in " *>"):
            raise InvalidConfig(f"JetStream API prefix {api_prefix!r}")
        self.nc = nc
        self.default_wait = default_wait
        self.api_prefix = api_prefix
        self.poll_interval = poll_interval
        self._owned = False
        # The loop the connection runs on, for blocking callers in other
        # threads (gated.gate's synchronous tools).
        self.loop: asyncio.AbstractEventLoop | None
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self._subs: dict[str, Subscription] = {}
        self._sub_locks: dict[str, asyncio.Lock] = {}
        self._waiters: dict[str, set[asyncio.Queue[bytes]]] = {}
        if grant_keys is not None and not isinstance(grant_keys, KeySet):
            raise InvalidConfig(f"grant_keys is a {type(grant_keys).__name__}, not a gated.KeySet")
        if agent is not None and not valid_id(agent):
            raise InvalidConfig(f"agent {agent!r} must match [A-Za-z0-9_-]{{1,128}} to be a subject token")
        self.agent = agent
        self._fixed_keys = grant_keys
        self._keys: KeySet | None = None
        self._keys_at = 0.0
        self._keys_lock: asyncio.Lock | None = None

    @classmethod
    async def connect(
        cls,
        servers: str | list[str] = "nats://127.0.0.1:4222",
        *,
        default_wait: float = DEFAULT_WAIT,
        api_prefix: str = DEFAULT_API_PREFIX,
        poll_interval: float = POLL_INTERVAL,
        grant_keys: KeySet | None = None,
        agent: str | None = None,
        **nats_options: Any,
    ) -> Client:
        """Connect to NATS (``nats_options`` go to ``nats.connect``) and
        return a client that closes the connection on :meth:`close`."""
        c = cls.__new__(cls)
        # Validate the options before connecting.
        cls.__init__(
            c, NATS(), default_wait=default_wait, api_prefix=api_prefix, poll_interval=poll_interval,
            grant_keys=grant_keys, agent=agent,
        )
        c.nc = await nats.connect(servers, **nats_options)
        c._owned = True
        c.loop = asyncio.get_running_loop()
        return c

    async def close(self) -> None:
        """Close the connection if :meth:`connect` made it."""
        if self._owned and not self.nc.is_closed:
            try:
                await self.nc.close()
            except (nats.errors.Error, OSError):
                pass  # the connection is gone already: nothing left to close

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _wait(self, timeout: float | None) -> float:
        if timeout is None:
            return self.default_wait
        if not timeout > 0:
            raise InvalidConfig(f"timeout {timeout} must be positive")
        return timeout

    async def propose(
        self,
        proposal: Proposal | Mapping[str, Any],
        *,
        timeout: float | None = None,
        on_status: StatusCallback | None = None,
    ) -> Verdict:
        """Publish a proposal and wait for its verdict. It fails closed: it
        returns only an approval; any other verdict raises the
        :class:`~gated.errors.NotApproved` subclass of its outcome, which
        carries it.

        The proposal is encoded byte-exactly as the Go client encodes it
        (v set to 1 when absent), so proposing it again from any language is
        idempotent. Raises BadProposal, NoVerdict, IDReused, NotApproved,
        NotGated, Unconfirmed, PublishError.

        ``on_status`` is called with each status event of the proposal while
        the call waits (see :meth:`watch`), or with a StatusError for a
        malformed one: the status subject is subscribed before the proposal
        is published, and every status that arrived before the verdict is
        handed over before the call returns."""
        if isinstance(proposal, Proposal):
            a, data = proposal.encode()
        elif isinstance(proposal, Mapping):
            a, data = encode_proposal(dict(proposal))
        else:
            raise BadProposal(f"a proposal is a gated.Proposal or a mapping, not a {type(proposal).__name__}")
        v = await self._propose(a, data, self._wait(timeout), on_status)
        return v.check()

    async def propose_raw(
        self, data: bytes, *, timeout: float | None = None, on_status: StatusCallback | None = None
    ) -> Verdict:
        """Publish a raw proposal and wait for its verdict. Unlike
        :meth:`propose` it returns every verdict, whatever its outcome: call
        ``verdict.check()`` before acting on it. ``on_status`` is as in
        :meth:`propose`."""
        a = address_of(data)
        return await self._propose(a, bytes(data), self._wait(timeout), on_status)

    def watch(self, tenant: str, id: str) -> StatusWatch:
        """Follow the progress of tenant's proposal id: gated publishes each
        stage on gated.status.<tenant>.<id> (received, policy_decided,
        review_started, awaiting_operator, decided). The watch is an async
        iterator and an async context manager::

            async with client.watch("acme", "p-1") as statuses:
                # subscribed: publish the proposal now
                async for st in statuses:
                    ...

        Enter it (or ``await watch.start()``) before the proposal is
        published so no stage is missed: entering subscribes and asks gated
        for the proposal's statuses on gated.watch.<tenant>.<id>, waiting
        for its answer. A malformed event raises StatusError from the
        iteration; the watch stays open. Statuses show progress; only a
        verdict says what may run. The tenant's NATS user needs to subscribe
        to gated.status.<tenant>.> and to request on
        gated.watch.<tenant>.*. Raises BadProposal for a bad token."""
        if not valid_tenant(tenant):
            raise BadProposal(f"tenant {tenant!r} must match [a-z0-9_-]{{1,64}}")
        if not valid_id(id):
            raise BadProposal(f"id {id!r} must match [A-Za-z0-9_-]{{1,128}}")
        return StatusWatch(self.nc, tenant, id)

    async def await_decision(self, held: Verdict, *, timeout: float | None = None) -> Verdict:
        """Wait for the verdict that replaces ``held``, a verdict held for an
        operator (``held.is_final`` is False; :meth:`propose` raises it as
        :class:`~gated.errors.AwaitingOperator`, whose ``verdict`` it is),
        and return it when it approves. It fails closed as :meth:`propose`
        does: an operator's rejection raises ReviewRejected, the hold's
        deadline passing raises ReviewTimeout (never an approval), each
        carrying the final verdict. A ``held`` that is final already is
        checked and returned (or raised) as it is.

        Only the stored verdict, which only gated can write, is believed:
        the client listens on the verdict subject and on the proposal's
        status subject, but a message there is a hint to read the stored
        verdict again, an approval counts only once the stored verdict
        confirms it, and a verdict for other bytes under the id raises
        IDReused. The stored verdict is also read every ``poll_interval``.
        The tenant's NATS user needs nothing beyond what :meth:`propose`
        needs (and the status subject, if it is to hint).

        ``timeout`` in seconds; by default until the hold's deadline and a
        minute more, else the client's ``default_wait``. Raises NoVerdict
        when it passes first (the proposal may still be decided: never act
        on it before), ConnectionLost, BadProposal when ``held`` is not a
        verdict with valid tokens."""
        if not isinstance(held, Verdict):
            raise BadProposal(f"await_decision needs the held Verdict, not a {type(held).__name__}")
        if held.is_final:
            return held.check()
        if not valid_tenant(held.tenant) or not valid_id(held.proposal_id):
            raise BadProposal(f"held verdict names {held.tenant!r}.{held.proposal_id!r}: not valid tokens")
        if timeout is None and held.awaiting_operator is not None:
            wait = _until(held.awaiting_operator.deadline) + HOLD_GRACE
            if not wait > 0:
                wait = HOLD_GRACE
        else:
            wait = self._wait(timeout)
        a = Address(held.tenant, held.proposal_id, held.action)
        self.loop = self.loop or asyncio.get_running_loop()
        try:
            async with asyncio.timeout(wait):
                v = await self._await_within(a, held.proposal_sha256)
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise NoVerdict(
                f"no decision on proposal {a.key}, held for an operator, within {wait:g}s: "
                "it may still be decided; never act on it before"
            ) from None
        return v.check()

    async def _await_within(self, a: Address, sha: str) -> Verdict:
        """The final verdict of a held proposal, confirmed by the stored
        one; the caller bounds the wait."""
        nc = self.nc
        inbox: asyncio.Queue[bytes] = asyncio.Queue(maxsize=INBOX_SIZE)
        hint = asyncio.Event()

        async def on_status(msg: Msg) -> None:
            hint.set()

        waiters = self._waiters.setdefault(a.key, set())
        waiters.add(inbox)
        status_sub: Subscription | None = None
        try:
            await self._verdicts(a.tenant)
            try:
                status_sub = await nc.subscribe(status_subject(a.tenant, a.id), cb=on_status)
                await nc.flush(timeout=3600)
            except nats.errors.ConnectionClosedError:
                raise ConnectionLost(f"waiting for the decision on {a.key}: the NATS connection is closed") from None

            async def look() -> Verdict | None:
                # A look-up that fails is no answer: look again later.
                try:
                    stored = await self._stored(a)
                except StoreError:
                    return None
                v = answer(a, sha, stored)  # other bytes under the id: IDReused
                return v if v.is_final else None

            # The decision may have come before the subscriptions: look first.
            loop = asyncio.get_running_loop()
            next_poll = loop.time()
            while True:
                if hint.is_set() or loop.time() >= next_poll:
                    hint.clear()
                    next_poll = loop.time() + self.poll_interval
                    if nc.is_closed:
                        raise ConnectionLost(f"waiting for the decision on {a.key}: the NATS connection closed")
                    v = await look()
                    if v is not None:
                        return v
                try:
                    # Wake now and then to notice a closed connection.
                    async with asyncio.timeout(max(0.0, min(next_poll - loop.time(), CLOSED_CHECK))):
                        data = await inbox.get()
                except TimeoutError:
                    if nc.is_closed:
                        raise ConnectionLost(f"waiting for the decision on {a.key}: the NATS connection closed") from None
                    continue
                m = verdict_message(a, data)
                if m is None or not m.is_final:
                    continue
                # A refusal is taken as it comes; an approval only once the
                # stored verdict confirms it. A message that does not hold
                # up (forged, for other bytes, not confirmed) ends nothing.
                try:
                    v = await confirm_approval(a, sha, m, lambda: self._stored(a))
                except GatedError:
                    continue
                if v.is_final:
                    return v
        finally:
            waiters.discard(inbox)
            if not waiters:
                self._waiters.pop(a.key, None)
            if status_sub is not None:
                with contextlib.suppress(nats.errors.Error):
                    await status_sub.unsubscribe()

    async def _propose(self, a: Address, data: bytes, wait: float, on_status: StatusCallback | None = None) -> Verdict:
        self.loop = self.loop or asyncio.get_running_loop()
        try:
            async with asyncio.timeout(wait):
                if on_status is None:
                    return await self._propose_within(a, data)
                return await self._propose_watched(a, data, on_status)
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise NoVerdict(f"no verdict for proposal {a.key} within {wait:g}s") from None

    async def _request(self, subject: str, data: bytes, headers: dict[str, str] | None = None) -> Msg:
        """One request and its reply, on an inbox of its own that the read
        loop answers directly (no task between the reply and this one).
        Raises nats.errors.NoRespondersError; the caller bounds the wait."""
        nc = self.nc
        reply: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, future=reply, max_msgs=1)
        try:
            await sub.unsubscribe(limit=1)
            await nc.publish(subject, data, reply=inbox, headers=headers)
            msg = await reply
        finally:
            if not reply.done():
                reply.cancel()
                try:
                    await sub.unsubscribe()
                except nats.errors.Error:
                    pass
        if not msg.data and msg.headers and msg.headers.get("Status") == "503":
            raise nats.errors.NoRespondersError
        return msg

    async def _verdicts(self, tenant: str) -> None:
        """Make sure the tenant's verdict subscription is in place on the
        server: one subscription to gated.verdicts.<tenant>.* per tenant,
        made and flushed once, shared by every proposal of the tenant."""
        if tenant in self._subs:
            return
        lock = self._sub_locks.setdefault(tenant, asyncio.Lock())
        async with lock:
            if tenant in self._subs:
                return
            prefix = verdict_subject(tenant, "")

            async def dispatch(msg: Msg) -> None:
                waiters = self._waiters.get(tenant + "." + msg.subject[len(prefix) :])
                if waiters:
                    for q in waiters:
                        # A flood on the subject cannot grow memory without
                        # bound: what does not fit is dropped, and the wait
                        # reads the stored verdict at its next poll.
                        with contextlib.suppress(asyncio.QueueFull):
                            q.put_nowait(msg.data)

            try:
                sub = await self.nc.subscribe(prefix + "*", cb=dispatch)
            except nats.errors.ConnectionClosedError:
                raise ConnectionLost(f"subscribing to the verdicts of {tenant}: the NATS connection is closed") from None
            # The subscription must be in place on the server before a
            # proposal can be decided, or a fast verdict is missed.
            await self.nc.flush(timeout=3600)
            self._subs[tenant] = sub

    async def _propose_watched(self, a: Address, data: bytes, on_status: StatusCallback) -> Verdict:
        """_propose_within with the proposal's status subject subscribed
        first, each status handed to on_status as it comes."""

        async def deliver(msg: Msg) -> None:
            # No await in here: the subscription's task takes a message off
            # its queue and hands it over in one step, which the drain
            # below relies on.
            try:
                st: Status | StatusError = status_update(a.tenant, a.id, msg.data)
            except StatusError as e:
                st = e
            on_status(st)

        try:
            sub = await self.nc.subscribe(status_subject(a.tenant, a.id), cb=deliver)
        except nats.errors.ConnectionClosedError:
            raise ConnectionLost(f"subscribing to the status of {a.key}: the NATS connection is closed") from None
        try:
            await self.nc.flush(timeout=3600)
            v = await self._propose_within(a, data, follow=True)
            # gated publishes the decided status before the verdict, on one
            # connection: it is queued here already; let it be handed over.
            while sub.pending_msgs > 0:
                await asyncio.sleep(0)
            return v
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def _propose_within(self, a: Address, data: bytes, follow: bool = False) -> Verdict:
        """Publish the proposal and wait for its verdict. With follow, the
        proposal carries Gated-Status: 1, so that gated sends its status
        events on any server (docs/FLEET.md)."""
        nc = self.nc
        inbox: asyncio.Queue[bytes] = asyncio.Queue(maxsize=INBOX_SIZE)
        waiters = self._waiters.setdefault(a.key, set())
        waiters.add(inbox)
        try:
            # Subscribed before publishing: the waiter is registered, and
            # the tenant's subscription is flushed to the server.
            await self._verdicts(a.tenant)
            sha = digest(data)
            try:
                # The current OpenTelemetry span, if any, parents gated's
                # spans for the proposal (traceparent, tracestate).
                headers = {**trace_headers(), MSG_ID_HEADER: a.key}
                if follow:
                    headers[STATUS_HEADER] = "1"
                reply = await self._request(proposal_subject(a.tenant, a.action), data, headers)
            except nats.errors.NoRespondersError:
                raise PublishError(
                    f"publishing proposal {a.key}: no JetStream stream captures "
                    f"{proposal_subject(a.tenant, a.action)}: is gated serve running?"
                ) from None
            except nats.errors.ConnectionClosedError:
                raise ConnectionLost(f"proposal {a.key}: the NATS connection closed before it was acknowledged") from None
            if _pub_ack(a, reply.data):
                # A duplicate: its verdict may have been published before
                # this client subscribed; the stored verdict is not lost.
                try:
                    return answer(a, sha, await self._stored(a))
                except StoreError:
                    pass
            loop = asyncio.get_running_loop()
            next_poll = loop.time() + self.poll_interval
            while True:
                now = loop.time()
                if now < next_poll:
                    try:
                        # Wake now and then to notice a closed connection.
                        async with asyncio.timeout(min(next_poll - now, CLOSED_CHECK)):
                            msg = await inbox.get()
                    except TimeoutError:
                        if nc.is_closed:
                            raise ConnectionLost(
                                f"proposal {a.key}: the NATS connection closed while waiting for its verdict"
                            ) from None
                        continue
                    # Anything else on the verdict subject is skipped, not
                    # taken as a failure: another client can have a reply
                    # sent there, and must not be able to fail this wait.
                    v = verdict_message(a, msg)
                    if v is None:
                        continue
                    return await confirm_approval(a, sha, v, lambda: self._stored(a))
                # The verdict message is core NATS: it is lost when it is
                # published while this connection reconnects. The stored
                # verdict is not.
                next_poll = loop.time() + self.poll_interval
                if nc.is_closed:
                    raise ConnectionLost(f"proposal {a.key}: the NATS connection closed while waiting for its verdict")
                try:
                    stored = await self._stored(a)
                except StoreError:
                    continue
                return answer(a, sha, stored)
        finally:
            waiters.discard(inbox)
            if not waiters:
                self._waiters.pop(a.key, None)

    async def _stored(self, a: Address) -> Verdict:
        try:
            async with asyncio.timeout(LOOKUP_WAIT):
                return await self._lookup(a.tenant, a.id)
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise StoreError(f"reading verdict {a.key}: no answer within {LOOKUP_WAIT:g}s") from None

    async def _lookup(self, tenant: str, id: str) -> Verdict:
        subject = verdict_lookup_subject(self.api_prefix, tenant, id)
        try:
            m = await self._request(subject, b"")
        except nats.errors.NoRespondersError:
            raise StoreError(
                f"reading verdict {tenant}.{id}: nothing answers {subject}: is gated's bucket set up, "
                "and may this user read it?"
            ) from None
        except nats.errors.ConnectionClosedError:
            raise StoreError(f"reading verdict {tenant}.{id}: the NATS connection is closed") from None
        except nats.errors.Error as e:
            raise StoreError(f"reading verdict {tenant}.{id}: {e!r}") from None
        return decode_stored_verdict(tenant, id, m.headers, m.data)

    async def verdict(self, tenant: str, id: str, *, timeout: float | None = None) -> Verdict:
        """Look up a stored verdict with one JetStream direct get of its key.
        Raises NotFound when none is stored, BadProposal for a bad token,
        StoreError when it cannot be read, NoVerdict past the timeout."""
        if not valid_tenant(tenant):
            raise BadProposal(f"tenant {tenant!r} must match [a-z0-9_-]{{1,64}}")
        if not valid_id(id):
            raise BadProposal(f"id {id!r} must match [A-Za-z0-9_-]{{1,128}}")
        wait = self._wait(timeout)
        try:
            async with asyncio.timeout(wait):
                return await self._lookup(tenant, id)
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise NoVerdict(f"reading verdict {tenant}.{id}: no answer within {wait:g}s") from None

    async def request_review(self, data: bytes, *, timeout: float | None = None) -> Verdict:
        """Send a raw proposal to gated's review service on
        gated.review.<tenant> and return the verdict of the reply, whatever
        its outcome (like :meth:`propose_raw`); an approval is confirmed
        against the stored verdict first. Raises BadProposal, a
        ServiceError (also BadProposal, TenantMismatch, IDReused,
        ServiceUnavailable or NoVerdict by its code), ServiceUnavailable
        when nothing serves the endpoint, Malformed, NoVerdict."""
        a = address_of(data)
        wait = self._wait(timeout)
        try:
            async with asyncio.timeout(wait):
                try:
                    m = await self._request(review_subject(a.tenant), bytes(data))
                except nats.errors.NoRespondersError:
                    raise ServiceUnavailable(
                        f"nothing serves {review_subject(a.tenant)} (is gated serve running with --review-service?)"
                    ) from None
                except nats.errors.ConnectionClosedError:
                    raise ConnectionLost(f"proposal {a.key}: the NATS connection is closed") from None
                v = decode_review_reply(m.headers, m.data)
                return await confirm_approval(a, digest(data), v, lambda: self._stored(a))
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise NoVerdict(f"no verdict for proposal {a.key} within {wait:g}s") from None


    # -- grants -------------------------------------------------------------

    def _grant_wait(self, timeout: float | None) -> float:
        if timeout is None:
            return GRANT_WAIT
        if not timeout > 0:
            raise InvalidConfig(f"timeout {timeout} must be positive")
        return timeout

    async def _ask(self, subject: str, data: bytes, wait: float, headers: dict[str, str] | None = None) -> Msg:
        """One request to gated, bounded by wait. Raises ServiceUnavailable
        when nothing answers or nothing answers in time, ConnectionLost,
        and the ServiceError of a micro error reply."""
        try:
            async with asyncio.timeout(wait):
                m = await self._request(subject, data, headers)
        except nats.errors.NoRespondersError:
            raise ServiceUnavailable(f"nothing answers {subject}: is gated serve running, with grants?") from None
        except nats.errors.ConnectionClosedError:
            raise ConnectionLost(f"asking {subject}: the NATS connection is closed") from None
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise ServiceUnavailable(f"no answer on {subject} within {wait:g}s") from None
        code = (m.headers or {}).get(SERVICE_ERROR_CODE_HEADER, "")
        if code:
            n = int(code) if code.isdigit() and len(code) <= 3 else 500
            raise service_error(n, (m.headers or {}).get(SERVICE_ERROR_HEADER, "") or "no description")
        return m

    async def grant_keys(self, *, refresh: bool = False, timeout: float | None = None) -> KeySet:
        """The key set grants are verified with: the one the client was
        given (``grant_keys=``), else gated's, fetched from
        gated.grants.keys and kept for :data:`KEYS_MAX_AGE` seconds;
        ``refresh`` fetches it again (concurrent fetches are one). Raises
        ServiceUnavailable, KeySetError, ServiceError."""
        if self._fixed_keys is not None:
            return self._fixed_keys
        loop = asyncio.get_running_loop()
        asked = loop.time()
        if not refresh and self._keys is not None and asked - self._keys_at < KEYS_MAX_AGE:
            return self._keys
        if self._keys_lock is None:
            self._keys_lock = asyncio.Lock()
        async with self._keys_lock:
            if self._keys is not None and self._keys_at >= asked:
                return self._keys  # fetched while this call waited for the lock
            m = await self._ask(GRANT_KEYS_SUBJECT, b"", self._grant_wait(timeout))
            try:
                keys = KeySet.from_json(m.data)
            except KeySetError as e:
                raise KeySetError(e.member, f"{e.problem} (from {GRANT_KEYS_SUBJECT})") from None
            self._keys, self._keys_at = keys, loop.time()
            return keys

    async def verify_grant(self, grant: str, expect: Expected, *, now: float | None = None) -> Claims:
        """Verify a grant for what is about to run (see
        :func:`gated.grant.verify`) with :meth:`grant_keys`; a grant signed
        by a key the cached set lacks makes the client fetch the set once
        more. Returns the claims; raises GrantRefused naming the member at
        fault, or the error of fetching the keys. It does not use the
        grant."""
        kid = header_kid(grant)
        keys = await self.grant_keys()
        if keys.get(kid) is None and self._fixed_keys is None:
            keys = await self.grant_keys(refresh=True)
        return verify(grant, keys, time.time() if now is None else now, expect)

    async def use_grant(self, tenant: str, grant: str, *, by: str, timeout: float | None = None) -> str:
        """Use a grant, once: gated verifies it against its own keys and
        moves its record from issued to used by compare-and-set, so a
        second use fails. Returns the grant's gid. Raises GrantUseRefused
        with gated's reason (``already used at ... by ...``, ``expired``,
        ``unknown grant``, a signature error), ServiceUnavailable when no
        answer comes (the grant may then be used or not: never run the
        tool), Malformed, BadProposal for a bad tenant token. ``by`` is
        free text naming who uses it; gated audits it. A client made with
        ``agent`` asks on that agent's subject, where gated also refuses a
        grant issued to another agent."""
        if not valid_tenant(tenant):
            raise BadProposal(f"tenant {tenant!r} must match [a-z0-9_-]{{1,64}}")
        m = await self._ask(grant_use_subject(tenant, self.agent), use_request(grant, by), self._grant_wait(timeout))
        return read_use_reply(m.data)

    async def accept_grant(
        self,
        grant: str,
        *,
        tenant: str,
        action: str,
        target: Any,
        by: str,
        proposal_id: str | None = None,
        proposal_sha256: str | None = None,
        timeout: float | None = None,
    ) -> Claims:
        """The tool-side check, for a service that is handed a grant and
        is about to act on ``target`` (a JSON value, or JSON text; None for
        no target) for ``tenant``'s ``action``: verify the grant (signature,
        expiry, key rules, and that it names this tenant, action and target,
        and the proposal id and digest when given), then use it once. Act
        only when it returns the claims; report what happened with
        :meth:`report_outcome`. Raises GrantRefused (GrantUseRefused when
        gated refuses the use) and the errors of :meth:`use_grant`. A grant
        refused here, with a proposal_id given, is reported to gated
        (status refused), which audits it as the executor's refusal; a
        report that fails does not change the refusal."""
        expect = Expected.of(
            tenant=tenant, action=action, target=target, proposal_id=proposal_id, proposal_sha256=proposal_sha256
        )
        try:
            claims = await self.verify_grant(grant, expect)
        except GrantRefused as e:
            if proposal_id is not None and valid_tenant(tenant) and valid_id(proposal_id):
                with contextlib.suppress(GatedError):
                    await self.report_outcome(tenant, proposal_id, "", "refused", str(e), timeout=timeout)
            raise
        gid = await self.use_grant(claims.tenant, grant, by=by, timeout=timeout)
        if gid != claims.gid:
            raise Malformed(f"gated used grant {gid}, not the grant handed over ({claims.gid})")
        return claims

    async def report_outcome(
        self,
        tenant: str,
        proposal_id: str,
        gid: str,
        status: str,
        error: str = "",
        *,
        timeout: float | None = None,
    ) -> None:
        """Report what happened to a used grant's action: ``started``
        before it runs, ``succeeded`` or ``failed`` (with the error's text,
        cut to 1,024 characters) after; or ``refused`` with the reason (gid
        empty when the token did not verify) for a grant the executor
        refused. Published on JetStream on
        gated.outcomes.<tenant>.<proposal_id> (a client made with ``agent``:
        gated.outcomes.<tenant>.<proposal_id>.<agent>) with Nats-Msg-Id
        <tenant>.<proposal_id>.<status>.<nonce>, a random nonce of this
        report's, so that nobody can have the stream drop it by sending
        another under its id first. gated audits it and the policy sees it.
        Raises PublishError when JetStream does not take it, BadProposal
        for bad tokens or status."""
        if not valid_tenant(tenant):
            raise BadProposal(f"tenant {tenant!r} must match [a-z0-9_-]{{1,64}}")
        if not valid_id(proposal_id):
            raise BadProposal(f"id {proposal_id!r} must match [A-Za-z0-9_-]{{1,128}}")
        if status not in OUTCOME_STATUSES:
            raise BadProposal(f"outcome status {status!r}: want one of {', '.join(OUTCOME_STATUSES)}")
        at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        data = outcome_report(tenant, proposal_id, gid, status, error, at)
        subject = outcome_subject(tenant, proposal_id, self.agent)
        key = f"{tenant}.{proposal_id}.{status}"
        msg_id = f"{key}.{base64.urlsafe_b64encode(os.urandom(16)).rstrip(b'=').decode('ascii')}"
        wait = self._grant_wait(timeout)
        try:
            async with asyncio.timeout(wait):
                m = await self._request(subject, data, {MSG_ID_HEADER: msg_id})
        except nats.errors.NoRespondersError:
            raise PublishError(f"reporting outcome {key}: no JetStream stream captures {subject}: is gated running?") from None
        except nats.errors.ConnectionClosedError:
            raise PublishError(f"reporting outcome {key}: the NATS connection is closed") from None
        except TimeoutError as e:
            if isinstance(e, GatedError):
                raise
            raise PublishError(f"reporting outcome {key}: no acknowledgement within {wait:g}s") from None
        _js_ack(f"outcome {key}", m.data)

def _until(rfc3339: str) -> float:
    """Seconds from now until an RFC 3339 time (negative once past; 0 for
    one that cannot be read)."""
    try:
        t = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return (t - datetime.now(timezone.utc)).total_seconds()


def _pub_ack(a: Address, data: bytes) -> bool:
    """Read a JetStream publish acknowledgement; True for a duplicate."""
    return _js_ack(f"proposal {a.key}", data)


def _js_ack(what: str, data: bytes) -> bool:
    """Read the JetStream acknowledgement of publishing what; True for a
    duplicate. Raises PublishError."""
    try:
        ack = json.loads(data)
    except ValueError:
        raise PublishError(f"publishing {what}: the acknowledgement is not JSON") from None
    if not isinstance(ack, dict):
        raise PublishError(f"publishing {what}: the acknowledgement is not an object")
    err = ack.get("error")
    if err is not None:
        raise PublishError(f"publishing {what}: JetStream refused it: {err}")
    if not isinstance(ack.get("stream"), str):
        raise PublishError(f"publishing {what}: not a JetStream acknowledgement")
    return ack.get("duplicate") is True


class StatusWatch:
    """The status events of one proposal (:meth:`Client.watch`): an async
    iterator of :class:`~gated.status.Status`, and an async context manager
    that subscribes on entry and unsubscribes on exit."""

    def __init__(self, nc: NATS, tenant: str, id: str) -> None:
        self.nc = nc
        self.tenant = tenant
        self.id = id
        self._sub: Subscription | None = None
        self._closed = False

    async def start(self) -> StatusWatch:
        """Subscribe, and make sure the server has the subscription. Safe to
        call again."""
        if self._sub is None and not self._closed:
            try:
                self._sub = await self.nc.subscribe(status_subject(self.tenant, self.id))
                await self.nc.flush(timeout=3600)
            except nats.errors.ConnectionClosedError:
                raise ConnectionLost(
                    f"subscribing to the status of {self.tenant}.{self.id}: the NATS connection is closed"
                ) from None
            # gated sends a status only when somebody asked for it (or, on
            # its embedded server, subscribes): ask, and wait for the first
            # gated's answer. An ask nobody answers or that NATS refuses
            # leaves the watch to the statuses gated sends anyway.
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await self.nc.request(status_watch_subject(self.tenant, self.id), b"", timeout=WATCH_ASK)
        return self

    async def close(self) -> None:
        """Unsubscribe; the iteration then ends."""
        self._closed = True
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()

    async def __aenter__(self) -> StatusWatch:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> StatusWatch:
        return self

    async def __anext__(self) -> Status:
        """The next status. Raises StatusError for a malformed message (the
        watch stays open), StopAsyncIteration once closed."""
        await self.start()
        if self._closed or self._sub is None:
            raise StopAsyncIteration
        try:
            msg = await self._sub.next_msg(timeout=None)
        except (nats.errors.ConnectionClosedError, asyncio.CancelledError) as e:
            if isinstance(e, asyncio.CancelledError) and not self._closed:
                raise
            raise StopAsyncIteration from None
        return status_update(self.tenant, self.id, msg.data)
