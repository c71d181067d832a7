"""Held actions through a real `gated serve`, its policy and real operator
decisions signed with `gated operator decide`: the Python client waits for
the decision, believes only the stored verdict, and never takes a held
verdict or a deadline for an approval."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import gated
from gatedkit import HoldGated, dns_proposal, start_hold_gated


@pytest.fixture(scope="module")
def holds(gated_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HoldGated]:
    h = start_hold_gated(gated_bin, Path(tmp_path_factory.mktemp("holds")))
    yield h
    h.gated.kill_hard()


@pytest.fixture(scope="module")
async def client(holds: HoldGated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(holds.gated.nats_url)
    yield c
    await c.close()


async def propose_held(client: gated.Client, id: str, action: str = "dns_delete_record") -> gated.Verdict:
    """Propose, and check that the verdict is held for an operator."""
    with pytest.raises(gated.AwaitingOperator) as e:
        await client.propose(dns_proposal(id, action), timeout=60)
    held = e.value.verdict
    assert isinstance(e.value, gated.ReviewBlocked)
    assert held.outcome == "blocked" and not held.approved and not held.is_final
    assert held.awaiting_operator is not None and held.awaiting_operator.deadline
    return held


async def decide(holds: HoldGated, id: str, *flags: str) -> None:
    out = await asyncio.to_thread(holds.decide, id, *flags)
    assert out.returncode == 0, out.stdout + out.stderr


async def test_approved_by_the_operator(holds: HoldGated) -> None:
    # Polling the store only once an hour: the approval must come through
    # the verdict subject and the stored verdict's confirmation.
    nc = await gated.Client.connect(holds.gated.nats_url)
    try:
        client = gated.Client(nc.nc, poll_interval=3600)
        held = await propose_held(client, "py-hold-approve")
        assert held.awaiting_operator is not None and held.awaiting_operator.rule == "hold_listed_action"
        wait = asyncio.create_task(client.await_decision(held, timeout=60))
        await decide(holds, held.proposal_id, "--approve", "--reason", "change CHG-7 agreed")
        v = await wait
    finally:
        await nc.close()
    assert v.is_approval and v.is_final and v.stage == "operator"
    assert v.operator_decision is not None
    assert v.operator_decision.id == "alice" and v.operator_decision.decision == "approve"
    assert v.operator_decision.key.startswith("U") and v.operator_decision.reason == "change CHG-7 agreed"
    assert v.proposal_sha256 == held.proposal_sha256


async def test_rejected_before_the_wait(holds: HoldGated, client: gated.Client) -> None:
    held = await propose_held(client, "py-hold-reject")
    await decide(holds, held.proposal_id, "--reject", "--reason", "not in a change window")
    with pytest.raises(gated.ReviewRejected) as e:
        await client.await_decision(held, timeout=60)
    v = e.value.verdict
    assert not v.approved and v.stage == "operator"
    assert v.operator_decision is not None and v.operator_decision.decision == "reject"


async def test_deadline_is_a_timeout(holds: HoldGated, client: gated.Client) -> None:
    held = await propose_held(client, "py-hold-timeout", "dns_flush_cache")
    assert held.awaiting_operator is not None and held.awaiting_operator.rule == "hold_cache_flush"
    with pytest.raises(gated.ReviewTimeout) as e:
        await client.await_decision(held)  # until the deadline and a minute more
    assert e.value.verdict.outcome == "timeout" and not e.value.verdict.approved
    assert e.value.verdict.stage == "operator"
    # No decision is taken after it.
    out = await asyncio.to_thread(holds.decide, held.proposal_id, "--approve")
    assert out.returncode == 3, out.stdout + out.stderr
    assert (await client.verdict("acme", held.proposal_id)).outcome == "timeout"


async def test_forged_approval_is_not_believed(client: gated.Client) -> None:
    """Approvals published on the verdict subject while the stored verdict
    is still held are no decision: the wait ends without a verdict."""
    held = await propose_held(client, "py-hold-forged")
    forged = dict(held.raw, outcome="approved", approved=True, stage="operator", awaiting_operator=None)
    stop = asyncio.Event()

    async def forge() -> None:
        while not stop.is_set():
            await client.nc.publish(f"gated.verdicts.acme.{held.proposal_id}", json.dumps(forged).encode())
            await client.nc.publish(f"gated.status.acme.{held.proposal_id}", b'{"v":1}')
            await asyncio.sleep(0.1)

    forger = asyncio.create_task(forge())
    try:
        with pytest.raises(gated.NoVerdict):
            await client.await_decision(held, timeout=3)
    finally:
        stop.set()
        await forger
    still = await client.verdict("acme", held.proposal_id)
    assert still.outcome == "blocked" and not still.is_final


async def test_a_held_verdict_of_other_bytes_is_refused(client: gated.Client) -> None:
    held = await propose_held(client, "py-hold-other")
    other = dataclasses.replace(held, proposal_sha256="0" * 64)
    with pytest.raises(gated.IDReused):
        await client.await_decision(other, timeout=10)


async def test_await_decision_refuses_what_is_not_a_verdict(client: gated.Client) -> None:
    with pytest.raises(gated.BadProposal):
        await client.await_decision({"tenant": "acme"}, timeout=1)  # type: ignore[arg-type]


def test_tool_gate_waits_only_when_asked(holds: HoldGated) -> None:
    ran: list[str] = []
    with gated.SyncClient.connect(holds.gated.nats_url) as client:
        spec = gated.ToolSpec(
            "dns_delete_record", "write",
            lambda record: gated.Change(target={"zone": "example.org", "record": record}, reason="retire a record",
                                        blast_radius="single_device"),
        )
        ident = gated.Identity(tenant="acme", agent="dns-bot", session="s-1")

        # By default a held call is not approved, and the tool does not run.
        plain = gated.ToolGate(client, ident, new_id=lambda: "py-gate-held-1")

        @plain.guard(spec)
        def delete(record: str) -> str:
            ran.append(record)
            return record

        with pytest.raises(gated.AwaitingOperator):
            delete("r-1")
        assert ran == []

        # Asked to wait, it runs once the operator approves.
        waiting = gated.ToolGate(client, ident, new_id=lambda: "py-gate-held-2", await_operator=True, operator_timeout=60)
        @waiting.guard(spec)
        def delete_when_approved(record: str) -> str:
            ran.append(record)
            return record

        result: list[object] = []
        t = threading.Thread(target=lambda: result.append(_call(delete_when_approved, "r-2")))
        t.start()
        for _ in range(600):  # until gated holds it
            try:
                if not client.verdict("acme", "py-gate-held-2", timeout=5).is_final:
                    break
            except gated.NotFound:
                pass
            time.sleep(0.1)
        else:
            pytest.fail("the guarded call's proposal was never held")
        out = holds.decide("py-gate-held-2", "--approve", "--reason", "fine")
        assert out.returncode == 0, out.stdout + out.stderr
        t.join(timeout=90)
        assert result == ["r-2"] and ran == ["r-2"]

        with pytest.raises(gated.InvalidConfig):
            gated.ToolGate(object(), ident, await_operator=True)


def _call(fn: object, arg: str) -> object:
    try:
        return fn(arg)  # type: ignore[operator]
    except gated.GatedError as e:
        return e


def test_sync_await_decision(holds: HoldGated) -> None:
    with gated.SyncClient.connect(holds.gated.nats_url) as client:
        try:
            client.propose(dns_proposal("py-sync-hold"), timeout=60)
        except gated.AwaitingOperator as e:
            held = e.verdict
        else:
            pytest.fail("the proposal was not held")
        out = holds.decide(held.proposal_id, "--reject")
        assert out.returncode == 0, out.stdout + out.stderr
        with pytest.raises(gated.ReviewRejected):
            client.await_decision(held, timeout=60)
