"""A proposal's status through a real `gated serve`, its policy and its
SOP reviewer process: every stage, in order, before the verdict."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.msg import Msg

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


def status_events_total(server: Gated) -> int:
    """gated_status_events_total on gated's /metrics: the statuses sent."""
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("gated_status_events_total "):
                return int(float(line.split()[1]))
    raise AssertionError("no gated_status_events_total on /metrics")


async def test_no_status_when_nobody_listens(server: Gated, client: gated.Client) -> None:
    """A proposal nobody follows sends no status; one proposed with a
    status callback carries Gated-Status: 1 and gets every stage."""
    headers: dict[str, str | None] = {}

    async def seen(msg: Msg) -> None:
        headers[json.loads(msg.data)["id"]] = (msg.headers or {}).get("Gated-Status")

    listener = await nats.connect(server.nats_url)
    try:
        await listener.subscribe("gated.proposals.acme.>", cb=seen)
        await listener.flush()
        before = status_events_total(server)
        v = await client.propose(approvable("py-quiet-1", 9104), timeout=60)
        assert v.outcome == "approved"
        assert status_events_total(server) == before
        stages: list[gated.Status | gated.StatusError] = []
        await client.propose(approvable("py-loud-1", 9105), timeout=60, on_status=stages.append)
        assert [s.stage for s in stages if isinstance(s, gated.Status)] == REVIEWED
        assert status_events_total(server) == before + len(REVIEWED)
        await listener.flush()
        assert headers == {"py-quiet-1": None, "py-loud-1": "1"}
    finally:
        await listener.close()


async def test_watch_asks_gated(server: Gated, client: gated.Client) -> None:
    """Entering a watch asks gated on gated.watch.<tenant>.<id> and has its
    answer before it returns."""
    listener = await nats.connect(server.nats_url)
    try:
        asks = await listener.subscribe("gated.watch.>")
        await listener.flush()
        async with client.watch("acme", "py-asked-1"):
            msg = await asks.next_msg(timeout=10)
            assert msg.subject == "gated.watch.acme.py-asked-1" and msg.reply
    finally:
        await listener.close()
