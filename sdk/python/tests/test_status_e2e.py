"""A proposal's status through a real `gated serve`, its policy and its
SOP reviewer process: every stage, in order, before the verdict."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import gated
from gatedkit import Gated, example_proposal


@pytest.fixture(scope="module")
async def client(server: Gated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(server.nats_url)
    yield c
    await c.close()


def approvable(id: str, device: int) -> dict[str, object]:
    return example_proposal("approved.json", id=id, target={"device_id": device, "service": "nginx"})


REVIEWED = ["received", "policy_decided", "review_started", "decided"]


async def test_on_status_sees_every_stage(client: gated.Client) -> None:
    seen: list[gated.Status | gated.StatusError] = []
    v = await client.propose(approvable("py-status-1", 9101), timeout=60, on_status=seen.append)
    assert all(isinstance(s, gated.Status) for s in seen), seen
    statuses = [s for s in seen if isinstance(s, gated.Status)]
    assert [s.stage for s in statuses] == REVIEWED
    assert statuses[2].reviewer == v.reviews[0]["persona"] and statuses[2].deadline
    decided = statuses[3].verdict
    assert decided is not None and decided.outcome == "approved" and decided.audit_seq == v.audit_seq


async def test_watch_async_iterator(client: gated.Client) -> None:
    stages: list[str] = []
    errors: list[str] = []
    async with client.watch("acme", "py-watch-1") as statuses:
        await client.nc.publish("gated.status.acme.py-watch-1", b"not json")
        verdict = asyncio.create_task(client.propose(approvable("py-watch-1", 9102), timeout=60))
        while not stages or stages[-1] != "decided":
            try:
                st = await asyncio.wait_for(statuses.__anext__(), 60)
            except gated.StatusError as e:
                errors.append(e.field)
                continue
            stages.append(st.stage)
    assert errors == [""]
    assert stages == REVIEWED
    assert (await verdict).outcome == "approved"
    with pytest.raises(StopAsyncIteration):
        await statuses.__anext__()


def test_sync_watch(server: Gated) -> None:
    with gated.SyncClient.connect(server.nats_url) as client:
        with client.watch("acme", "py-sync-watch-1") as statuses:
            v = client.propose(approvable("py-sync-watch-1", 9103), timeout=60)
            stages = []
            for st in statuses:
                stages.append(st.stage)
                if st.stage == "decided":
                    break
        assert v.outcome == "approved"
        assert stages == REVIEWED


async def test_watch_refuses_bad_tokens(client: gated.Client) -> None:
    for tenant, id in ((">", "p1"), ("acme", "p.1"), ("acme", "")):
        with pytest.raises(gated.BadProposal):
            client.watch(tenant, id)
