"""The asyncio client against a real `gated serve`: its policy, its SOP
reviewer process, its verdict bucket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats
import pytest

import gated
from gatedkit import Gated, example_proposal
from gated.wire import digest, verdict_subject


@pytest.fixture(scope="module")
async def client(server: Gated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(server.nats_url)
    yield c
    await c.close()


def approvable(id: str, device: int) -> dict[str, object]:
    """approved.json under a new id and a target of its own (the policy
    refuses a second change to the same target moments later)."""
    return example_proposal("approved.json", id=id, target={"device_id": device, "service": "nginx", "tags": ["production"]})


async def test_approval(client: gated.Client) -> None:
    v = await client.propose(approvable("py-approve-1", 9001), timeout=30)
    assert v.is_approval and v.outcome == "approved"
    assert v.tenant == "acme" and v.proposal_id == "py-approve-1"
    assert v.reviews and v.reviews[0]["plugin"] == "sop"


async def test_typed_proposal_approval(client: gated.Client) -> None:
    p = gated.Proposal(
        id="py-typed-1", tenant="acme", action="host_restart_service", class_="write",
        target={"device_id": 9002, "service": "nginx", "tags": ["production"]},
        reason="nginx stopped answering health checks", blast_radius="single_device",
        operator=gated.Operator("alice", ["sre"]), requested_by=gated.RequestedBy("ops-agent", "s-1"),
        incident_id="INC-1042",
    )
    v = await client.propose(p, timeout=30)
    assert v.is_approval
    # The bytes gated decided are the bytes Python sent.
    _, data = p.encode()
    assert v.proposal_sha256 == digest(data)


@pytest.mark.parametrize(
    ("note", "proposal", "error", "stage"),
    [
        ("rejected at policy", example_proposal("rejected-skip-review.json", id="py-rej-policy-1"), gated.ReviewRejected, "policy"),
        ("rejected by the reviewer", example_proposal("rejected-no-sop.json", id="py-rej-review-1"), gated.ReviewRejected, "review"),
        (
            "blocked: no such persona",
            example_proposal("approved.json", id="py-blocked-1", reviewer="no-such-persona", target={"device_id": 9003}),
            gated.ReviewBlocked,
            "review",
        ),
        ("invalid class", example_proposal("approved.json", id="py-invalid-1", **{"class": "maybe"}), gated.ProposalInvalid, "validation"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
async def test_rejections(client: gated.Client, note: str, proposal: dict[str, object], error: type[gated.NotApproved], stage: str) -> None:
    with pytest.raises(error) as e:
        await client.propose(proposal, timeout=30)
    v = e.value.verdict
    assert type(e.value) is error, note
    assert v.outcome == error.outcome and not v.approved
    assert v.stage == stage
    assert v.reason


async def test_propose_raw_returns_every_verdict(client: gated.Client) -> None:
    data = json.dumps(example_proposal("rejected-skip-review.json", id="py-raw-1")).encode()
    v = await client.propose_raw(data, timeout=30)
    assert v.outcome == "rejected"
    assert v.proposal_sha256 == digest(data)
    with pytest.raises(gated.ReviewRejected):
        v.check()


async def test_bad_proposal_never_published(client: gated.Client) -> None:
    with pytest.raises(gated.BadProposal):
        await client.propose(example_proposal("approved.json", id="has.dot"))
    with pytest.raises(gated.BadProposal):
        await client.propose_raw(b"not json")
    with pytest.raises(gated.BadProposal):
        await client.propose(example_proposal("approved.json", id="py-unknown-1", colour="red"))


async def test_idempotent_replay_and_id_reuse(client: gated.Client) -> None:
    p = approvable("py-replay-1", 9004)
    first = await client.propose(p, timeout=30)
    # The same bytes again: the stream drops the duplicate and the client
    # answers with the stored verdict.
    again = await client.propose(p, timeout=30)
    assert again.audit_seq == first.audit_seq and again.is_approval
    # The same id with other bytes is never decided.
    with pytest.raises(gated.IDReused):
        await client.propose({**p, "reason": "something else"}, timeout=30)


async def test_verdict_lookup(client: gated.Client) -> None:
    v = await client.propose(approvable("py-lookup-1", 9005), timeout=30)
    stored = await client.verdict("acme", "py-lookup-1", timeout=10)
    assert stored.audit_seq == v.audit_seq and stored.is_approval
    with pytest.raises(gated.NotFound):
        await client.verdict("acme", "py-never-proposed", timeout=10)
    with pytest.raises(gated.BadProposal):
        await client.verdict("ACME", "x")


async def test_review_service(client: gated.Client) -> None:
    data = json.dumps(approvable("py-service-1", 9006)).encode()
    v = await client.request_review(data, timeout=30)
    assert v.is_approval
    data = json.dumps(example_proposal("rejected-skip-review.json", id="py-service-2")).encode()
    v = await client.request_review(data, timeout=30)
    assert v.outcome == "rejected"


async def test_forged_approval_refused(server: Gated, client: gated.Client) -> None:
    """An attacker who may publish on the verdict subject floods it with an
    approval of the proposal's exact bytes, from before the client proposes
    until it has its answer: the client must never believe it. Whether the
    client reads a forgery before gated's real verdict is a race, so the
    attack is repeated until it has: every attempt ends without an approval,
    and at least one with the forgery refused as unconfirmed (a forgery read
    after gated stored its verdict meets the stored rejection instead)."""
    attacker = await nats.connect(server.nats_url)
    refused: list[str] = []
    try:
        for i in range(50):
            pid = f"py-forged-{i}"
            doc = example_proposal("rejected-no-sop.json", id=pid, target={"device_id": 9101 + i, "service": "nginx"})
            _, wire_bytes = gated.encode_proposal(doc)
            fake = json.dumps({
                "v": 1, "proposal_id": pid, "tenant": "acme", "action": doc["action"], "kind": "action",
                "outcome": "approved", "approved": True, "stage": "review", "reason": "looks fine to me",
                "decided_at": "2026-11-25T10:00:00Z", "latency_ms": 1, "audit_seq": 1,
                "proposal_sha256": digest(wire_bytes),
            }).encode()
            subject = verdict_subject("acme", pid)
            flowing = asyncio.Event()

            async def seen(_msg: nats.aio.msg.Msg, flowing: asyncio.Event = flowing) -> None:
                flowing.set()

            spy = await attacker.subscribe(subject, cb=seen, max_msgs=1)

            async def flood(subject: str = subject, fake: bytes = fake) -> None:
                while True:
                    await attacker.publish(subject, fake)
                    await asyncio.sleep(0.001)

            flooding = asyncio.create_task(flood())
            try:
                await asyncio.wait_for(flowing.wait(), 10)
                with pytest.raises((gated.Unconfirmed, gated.ReviewRejected)) as e:
                    await client.propose(doc, timeout=30)
                if isinstance(e.value, gated.ReviewRejected):
                    assert e.value.verdict.stage in ("policy", "review")
                refused.append(type(e.value).__name__)
            finally:
                flooding.cancel()
                await spy.unsubscribe()
            if refused[-1] == "Unconfirmed":
                # The stored verdict is gated's own, whatever the client saw
                # first (it may be stored only after the client refused the
                # forgery).
                for _ in range(300):
                    try:
                        stored = await client.verdict("acme", pid)
                        break
                    except gated.NotFound:
                        await asyncio.sleep(0.1)
                assert stored.outcome == "rejected"
                break
        assert "Unconfirmed" in refused, f"the client never read a forgery first: {refused}"
    finally:
        await attacker.close()


async def test_foreign_messages_skipped(server: Gated, client: gated.Client) -> None:
    """Garbage and verdicts of other proposals on the verdict subject do
    not end the wait; the real verdict does."""
    noisy = await nats.connect(server.nats_url)

    async def noise(msg: nats.aio.msg.Msg) -> None:
        subj = verdict_subject("acme", "py-noise-1")
        for junk in (b"", b"garbage", b"[1,2]", b'{"tenant":"globex","proposal_id":"py-noise-1","outcome":"approved","approved":true}', b'{"stream":"X","seq":1}'):
            await noisy.publish(subj, junk)

    await noisy.subscribe("gated.proposals.acme.*", cb=noise)
    await noisy.flush()
    try:
        with pytest.raises(gated.ReviewRejected):
            await client.propose(example_proposal("rejected-skip-review.json", id="py-noise-1"), timeout=30)
    finally:
        await noisy.close()


def test_sync_client(server: Gated) -> None:
    with gated_sync(server) as c:
        v = c.propose(approvable("py-sync-1", 9007), timeout=30)
        assert v.is_approval
        with pytest.raises(gated.ReviewRejected):
            c.propose(example_proposal("rejected-skip-review.json", id="py-sync-2"), timeout=30)
        assert c.verdict("acme", "py-sync-1").is_approval


def gated_sync(g: Gated) -> gated.SyncClient:
    return gated.SyncClient.connect(g.nats_url)


async def test_concurrent_proposals(client: gated.Client) -> None:
    """Proposals in flight at once on one client, the same one twice among
    them, each get their own verdict."""
    approvals = [approvable(f"py-conc-a{i}", 9500 + i) for i in range(12)]
    rejections = [example_proposal("rejected-skip-review.json", id=f"py-conc-r{i}", target={"device_id": 9600 + i}) for i in range(12)]
    twice = approvable("py-conc-twice", 9700)
    results = await asyncio.gather(
        *(client.propose(p, timeout=30) for p in [*approvals, *rejections, twice, twice]), return_exceptions=True
    )
    for p, r in zip([*approvals, *rejections, twice, twice], results, strict=True):
        if p["id"].startswith("py-conc-r"):
            assert isinstance(r, gated.ReviewRejected) and r.verdict.proposal_id == p["id"], r
        else:
            assert isinstance(r, gated.Verdict) and r.is_approval and r.proposal_id == p["id"], r
