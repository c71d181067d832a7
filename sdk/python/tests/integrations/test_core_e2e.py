"""The shared core against a real gated, without a framework: what runs is
what was reviewed even when the caller's arguments change during the
review, and each way a call does not run is its typed refusal."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import gated
from integrationkit import CATALOG, ProposalTap
from gated.integrations import Gate, ToolCall, ToolDenied, ToolHeld
from gatedkit import HoldGated


def new_gate(client: gated.Client, **kw: Any) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent="core-agent"), catalog=CATALOG, **kw)


async def test_the_reviewed_arguments_run_whatever_the_caller_changes(
    client: gated.Client, proposals: ProposalTap
) -> None:
    gate = new_gate(client)
    args: dict[str, Any] = {"device_id": 9701, "service": "nginx", "_reason": "nginx on device 9701 is wedged"}
    call = ToolCall("restart_service", args, "call-core-2")
    pid = gate.proposal_id(call)
    got: list[dict[str, Any]] = []
    run = asyncio.create_task(gate.run(call, lambda a: got.append(a) or "ok"))
    while pid not in proposals.by_id:
        await asyncio.sleep(0.01)
    args["service"] = "sshd"  # after the proposal left, before the tool runs
    assert await run == "ok"
    assert got == [{"device_id": 9701, "service": "nginx"}] == [proposals.by_id[pid]["arguments"]]


async def test_a_read_runs_without_a_proposal(client: gated.Client, proposals: ProposalTap) -> None:
    gate = new_gate(client)
    call = ToolCall("list_services", {"host": "web-1", "_reason": "look"}, "call-core-3")
    assert await gate.run(call, lambda a: a) == {"host": "web-1"}
    await client.nc.flush()
    assert gate.proposal_id(call) not in proposals.by_id


async def test_a_tool_that_fails_is_reported_failed(client: gated.Client) -> None:
    from test_grants_e2e import AuditTap

    tap = await AuditTap().start(client)
    gate = new_gate(client)
    call = ToolCall("restart_service", {"device_id": 9702, "service": "nginx", "_reason": "wedged"}, "call-core-4")

    def boom(a: dict[str, Any]) -> None:
        raise RuntimeError("device unreachable")

    with pytest.raises(RuntimeError):
        await gate.run(call, boom)
    pid = gate.proposal_id(call)
    outcomes = await tap.wait_for("grant.outcome", pid, n=2)
    failed = [e["data"] for e in outcomes if e["data"]["status"] == "failed"]
    assert failed and "device unreachable" in failed[0]["error"]


async def test_the_same_call_again_does_not_run_twice(client: gated.Client) -> None:
    # The same framework call id proposed again (a replay of the run) is
    # the same proposal: its grant was used, so nothing runs again.
    gate = new_gate(client)
    call = ToolCall("restart_service", {"device_id": 9703, "service": "nginx", "_reason": "wedged"}, "call-core-5")
    runs: list[int] = []
    await gate.run(call, lambda a: runs.append(1))
    with pytest.raises(ToolDenied) as e:
        await gate.run(call, lambda a: runs.append(2))
    assert runs == [1] and "grant" in str(e.value)


async def test_held_waits_for_the_operator_when_asked(client: gated.Client, holds: HoldGated) -> None:
    gate = new_gate(client)
    call = ToolCall("delete_record", {"zone": "example.org", "record": "core-wait"}, "call-core-6")
    with pytest.raises(ToolHeld):
        await gate.run(call, lambda a: a)
    waiting = asyncio.create_task(gate.run(call, lambda a: "deleted", wait_for_operator=True))
    d = await asyncio.to_thread(holds.decide, gate.proposal_id(call), "--approve", "--reason", "CHG-13")
    assert d.returncode == 0, d.stderr
    assert await waiting == "deleted"
