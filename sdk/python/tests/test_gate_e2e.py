"""The tool gate against a real gated: a read tool runs without a
proposal, a write tool runs once on approval and never otherwise, async and
sync tools alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import gated
from gatedkit import Gated
from gated import Change, Identity, ToolGate, ToolSpec
from gated.wire import digest, encode_proposal


@pytest.fixture(scope="module")
async def client(server: Gated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(server.nats_url)
    yield c
    await c.close()


def restart_change(device: int, service: str = "nginx") -> Change:
    return Change(
        target={"device_id": device, "service": service, "tags": ["production"]},
        reason=f"{service} on device {device} stopped answering health checks",
        blast_radius="single_device",
        incident_id="INC-1042",
    )


async def test_async_tools(client: gated.Client) -> None:
    seen: list[tuple[dict[str, Any], gated.Verdict]] = []
    gate = ToolGate(
        client,
        Identity(tenant="acme", agent="py-gate-agent", operator=gated.Operator("alice", ["sre"])),
        observe=lambda p, v: seen.append((p, v)),
    )
    runs: list[str] = []

    @gate.guard(ToolSpec("host_get_status", "read"))
    async def status(device: int) -> str:
        runs.append(f"status {device}")
        return "up"

    @gate.guard(ToolSpec("host_restart_service", "write", restart_change))
    async def restart(device: int, service: str = "nginx") -> str:
        runs.append(f"restart {device}")
        return "restarted"

    @gate.guard(ToolSpec("db_drop_table", "destructive", lambda table: Change(target={"table": table}, reason="unused", blast_radius="cluster")))
    async def drop(table: str) -> str:
        runs.append(f"drop {table}")
        return "dropped"

    assert await status(9401) == "up"
    assert seen == []  # a read proposes nothing
    assert await restart(9401) == "restarted"
    assert runs == ["status 9401", "restart 9401"]
    p, v = seen[-1]
    assert v.is_approval and p["requested_by"] == {"agent": "py-gate-agent", "session": ""}
    # The same target again, moments later: the policy's cooldown refuses it.
    with pytest.raises(gated.ReviewRejected):
        await restart(9401)
    # A destructive change goes to the dba persona, which rejects it.
    with pytest.raises(gated.ReviewRejected) as e:
        await drop("orders_2019")
    assert e.value.verdict.reviews[0]["persona"] == "dba"
    assert runs == ["status 9401", "restart 9401"]
    assert [v.outcome for _, v in seen] == ["approved", "rejected", "rejected"]


async def test_context_manager(client: gated.Client) -> None:
    gate = ToolGate(client, Identity(tenant="acme", agent="py-gate-agent"))
    ran = []
    async with gate.authorized("host_restart_service", "write", restart_change(9402)) as v:
        assert v is not None and v.is_approval
        ran.append(1)
    with pytest.raises(gated.ReviewRejected):
        async with gate.authorized("host_restart_service", "write", Change(target={"device_id": 9403}, reason="x", blast_radius="single_device", flags=gated.Flags(skip_review=True))):
            ran.append(2)
    async with gate.authorized("host_get_status", "read") as v:
        assert v is None
        ran.append(3)
    assert ran == [1, 3]


class Proposing:
    """gated.Client, with an event set as each proposal is sent."""

    def __init__(self, client: gated.Client) -> None:
        self.client = client
        self.proposing = asyncio.Event()

    async def propose(self, proposal: Any, *, timeout: float | None = None) -> gated.Verdict:
        self.proposing.set()
        return await self.client.propose(proposal, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


async def test_what_runs_is_what_gated_reviewed(client: gated.Client) -> None:
    """Another task changes the caller's dict while gated reviews the call:
    the tool runs with the arguments of the proposal gated approved, whose
    digest the stored verdict names, not with the changed dict."""
    proposer = Proposing(client)
    seen: list[tuple[dict[str, Any], gated.Verdict]] = []
    gate = ToolGate(proposer, Identity(tenant="acme", agent="py-gate-agent"), observe=lambda p, v: seen.append((p, v)))
    ran: list[dict[str, Any]] = []

    @gate.guard(ToolSpec("host_restart_service", "write", lambda cfg: restart_change(cfg["device_id"], cfg["service"])))
    async def restart(cfg: dict[str, Any]) -> str:
        ran.append(cfg)
        return "restarted"

    cfg: dict[str, Any] = {"device_id": 9410, "service": "nginx", "grace_s": 10}
    call = asyncio.create_task(restart(cfg))
    await proposer.proposing.wait()
    cfg.update(device_id=9411, service="postgres", drop_data=True)
    assert await call == "restarted"
    p, v = seen[-1]
    _, data = encode_proposal(p)
    stored = await client.verdict("acme", p["id"])
    assert v.is_approval and stored.proposal_sha256 == v.proposal_sha256 == digest(data)
    proposed = json.loads(data)
    assert proposed["target"]["device_id"] == 9410
    assert ran == [{"device_id": 9410, "service": "nginx", "grace_s": 10}], f"the tool ran with {ran}; gated reviewed device 9410"
    assert ran == [proposed["arguments"]["cfg"]]


def test_sync_tools(server: Gated) -> None:
    with gated.SyncClient.connect(server.nats_url) as c:
        gate = ToolGate(c, Identity(tenant="acme", agent="py-gate-sync"))
        runs = []

        @gate.guard(ToolSpec("host_restart_service", "write", restart_change))
        def restart(device: int) -> str:
            runs.append(device)
            return "restarted"

        assert restart(9404) == "restarted"
        with pytest.raises(gated.ReviewRejected):
            restart(9404)
        assert runs == [9404]
        with gate.authorized_sync("host_restart_service", "write", restart_change(9405)) as v:
            assert v is not None and v.is_approval


async def test_sync_tool_on_the_event_loop_is_refused(client: gated.Client) -> None:
    """A sync tool guarded by the async client, called on the running
    loop, would block it: it is refused, and the tool does not run."""
    gate = ToolGate(client, Identity(tenant="acme", agent="py-gate-agent"))
    runs = []

    @gate.guard(ToolSpec("host_restart_service", "write", restart_change))
    def restart(device: int) -> str:
        runs.append(device)
        return "restarted"

    with pytest.raises(gated.GatedError, match="running event loop"):
        restart(9406)
    # Off the loop, in a worker thread, it goes through the client's loop.
    assert await asyncio.to_thread(restart, 9407) == "restarted"
    assert runs == [9407]


def test_invalid_specs_and_identities() -> None:
    class Never:
        async def propose(self, proposal: Any, *, timeout: float | None = None) -> gated.Verdict:
            raise AssertionError("nothing may be proposed")

    with pytest.raises(gated.InvalidConfig):
        ToolGate(Never(), Identity(tenant="Acme", agent="a"))
    with pytest.raises(gated.InvalidConfig):
        ToolGate(Never(), Identity(tenant="acme", agent=" "))
    gate = ToolGate(Never(), Identity(tenant="acme", agent="a"))
    for spec in (ToolSpec("a.b", "read"), ToolSpec("x", "admin"), ToolSpec("x", "write")):
        with pytest.raises(gated.InvalidToolSpec):
            gate.guard(spec)


async def test_a_proposer_that_lies_is_not_believed() -> None:
    """Whatever the proposer says, only an approval of exactly this
    proposal lets the tool run."""

    class Liar:
        def __init__(self, v: gated.Verdict) -> None:
            self.v = v

        async def propose(self, proposal: Any, *, timeout: float | None = None) -> gated.Verdict:
            return self.v

    runs = []
    for v in (
        gated.Verdict(proposal_id="other", tenant="acme", outcome="approved", approved=True, action="host_restart_service"),
        gated.Verdict(proposal_id="p-1", tenant="acme", outcome="rejected", approved=True, action="host_restart_service"),
        gated.Verdict(proposal_id="p-1", tenant="acme", outcome="approved", approved=True, action="db_drop_table"),
    ):
        gate = ToolGate(Liar(v), Identity(tenant="acme", agent="a"), new_id=lambda: "p-1")

        @gate.guard(ToolSpec("host_restart_service", "write", restart_change))
        async def restart(device: int) -> None:
            runs.append(device)

        with pytest.raises(gated.NotApproved):
            await restart(1)
    assert runs == []
