"""A small synchronous wrapper of :class:`gated.client.Client` for scripts.

It runs the asyncio client on an event loop of its own in a background
thread, so it also works where another loop is running (a notebook, a
synchronous tool called from async code).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from gated.client import DEFAULT_WAIT, Client, StatusCallback, StatusWatch
from gated.grant import Claims, Expected, KeySet
from gated.proposal import Proposal
from gated.status import Status
from gated.verdict import Verdict
from gated.wire import DEFAULT_API_PREFIX

T = TypeVar("T")


class SyncClient:
    """The fleet client with blocking calls. Build one with
    :meth:`connect`; close it (or use it in a ``with`` block) when done."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self.client = client
        self._loop = loop
        self._thread = thread

    @classmethod
    def connect(
        cls,
        servers: str | list[str] = "nats://127.0.0.1:4222",
        *,
        default_wait: float = DEFAULT_WAIT,
        api_prefix: str = DEFAULT_API_PREFIX,
        grant_keys: KeySet | None = None,
        **nats_options: Any,
    ) -> SyncClient:
        """Connect to NATS on a loop of its own; see Client.connect."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="gated-sync-client", daemon=True)
        thread.start()
        try:
            client = asyncio.run_coroutine_threadsafe(
                Client.connect(
                    servers, default_wait=default_wait, api_prefix=api_prefix, grant_keys=grant_keys, **nats_options
                ),
                loop,
            ).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            raise
        return cls(client, loop, thread)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and wait for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a SyncClient call was made on its own event loop thread: it would block forever")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def propose(
        self,
        proposal: Proposal | Mapping[str, Any],
        *,
        timeout: float | None = None,
        on_status: StatusCallback | None = None,
    ) -> Verdict:
        """Client.propose, blocking. ``on_status`` is called on the client's
        loop thread."""
        return self.run(self.client.propose(proposal, timeout=timeout, on_status=on_status))

    def propose_raw(
        self, data: bytes, *, timeout: float | None = None, on_status: StatusCallback | None = None
    ) -> Verdict:
        """Client.propose_raw, blocking. ``on_status`` is called on the
        client's loop thread."""
        return self.run(self.client.propose_raw(data, timeout=timeout, on_status=on_status))

    def watch(self, tenant: str, id: str) -> SyncStatusWatch:
        """Client.watch, blocking: a context manager that subscribes on entry,
        and an iterator of the statuses::

            with client.watch("acme", "p-1") as statuses:
                # subscribed: publish the proposal now
                for st in statuses:
                    ...
        """
        return SyncStatusWatch(self, self.client.watch(tenant, id))

    def await_decision(self, held: Verdict, *, timeout: float | None = None) -> Verdict:
        """Client.await_decision, blocking: the approval that replaces a
        held verdict, or the typed error of a rejection or timeout."""
        return self.run(self.client.await_decision(held, timeout=timeout))

    def verdict(self, tenant: str, id: str, *, timeout: float | None = None) -> Verdict:
        """Client.verdict, blocking."""
        return self.run(self.client.verdict(tenant, id, timeout=timeout))

    def request_review(self, data: bytes, *, timeout: float | None = None) -> Verdict:
        """Client.request_review, blocking."""
        return self.run(self.client.request_review(data, timeout=timeout))

    def grant_keys(self, *, refresh: bool = False, timeout: float | None = None) -> KeySet:
        """Client.grant_keys, blocking."""
        return self.run(self.client.grant_keys(refresh=refresh, timeout=timeout))

    def verify_grant(self, grant: str, expect: Expected, *, now: float | None = None) -> Claims:
        """Client.verify_grant, blocking."""
        return self.run(self.client.verify_grant(grant, expect, now=now))

    def use_grant(self, tenant: str, grant: str, *, by: str, timeout: float | None = None) -> str:
        """Client.use_grant, blocking."""
        return self.run(self.client.use_grant(tenant, grant, by=by, timeout=timeout))

    def accept_grant(
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
        """Client.accept_grant, blocking: the tool-side check of a grant a
        service is handed."""
        return self.run(
            self.client.accept_grant(
                grant, tenant=tenant, action=action, target=target, by=by,
                proposal_id=proposal_id, proposal_sha256=proposal_sha256, timeout=timeout,
            )
        )

    def report_outcome(
        self, tenant: str, proposal_id: str, gid: str, status: str, error: str = "", *, timeout: float | None = None
    ) -> None:
        """Client.report_outcome, blocking."""
        self.run(self.client.report_outcome(tenant, proposal_id, gid, status, error, timeout=timeout))

    def close(self) -> None:
        """Close the connection and stop the loop."""
        if self._loop.is_closed():
            return
        try:
            self.run(self.client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(servers: str | list[str] = "nats://127.0.0.1:4222", **options: Any) -> SyncClient:
    """Shorthand for SyncClient.connect."""
    return SyncClient.connect(servers, **options)


class SyncStatusWatch:
    """A :class:`~gated.client.StatusWatch` with blocking calls."""

    def __init__(self, client: SyncClient, watch: StatusWatch) -> None:
        self._client = client
        self._watch = watch

    def start(self) -> SyncStatusWatch:
        """Subscribe; see StatusWatch.start."""
        self._client.run(self._watch.start())
        return self

    def close(self) -> None:
        """Unsubscribe; the iteration then ends."""
        self._client.run(self._watch.close())

    def __enter__(self) -> SyncStatusWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> SyncStatusWatch:
        return self

    def __next__(self) -> Status:
        """The next status; raises StatusError for a malformed message."""
        try:
            return self._client.run(self._watch.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None
