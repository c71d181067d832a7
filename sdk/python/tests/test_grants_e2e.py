"""Grants against a real gated: an approved proposal's tool runs once, its
grant used and its outcomes audited; a second use, a tampered grant, an
other tenant's use and an expired grant are refused, by the client and by
gated."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

import gated
from gated import Change, Identity, ToolGate, ToolSpec
from gated.grant import Expected, KeySet, b64url, b64url_decode
from gated.wire import encode_proposal
from gatedkit import Gated, start_gated


@pytest.fixture(scope="module")
async def client(server: Gated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(server.nats_url)
    yield c
    await c.close()


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def record_json(data: bytes) -> dict[str, Any]:
    """The JSON of an audit record's body: gated stores a record as one
    zstd frame of its JSON unless serve runs with --audit-compress=false
    (docs/AUDIT.md), and no record decompresses to more than 8 MiB."""
    if data.startswith(ZSTD_MAGIC):
        data = zstandard.ZstdDecompressor().decompress(data, max_output_size=8 << 20)
    r: dict[str, Any] = json.loads(data)
    return r


def record_events(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of an audit record: a record of version 3 holds several,
    each whole, and one of version 2 several under one envelope
    (docs/AUDIT.md); one of version 1 is its event."""
    if r.get("v") == 3:
        events: list[dict[str, Any]] = r.get("events", [])
        return events
    if r.get("v") != 2:
        return [r]
    return [{**e, "tenant": r.get("tenant"), "proposal_id": r.get("proposal_id")} for e in r.get("events", [])]


class AuditTap:
    """The grant.* audit events of tenant acme, as gated publishes them."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def start(self, c: gated.Client) -> AuditTap:
        async def on(msg: Any) -> None:
            self.events.extend(record_events(record_json(msg.data)))

        await c.nc.subscribe("gated.audit.acme.grant.>", cb=on)
        await c.nc.flush()
        return self

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e.get("event") == event)

    async def wait_for(
        self, event: str, proposal_id: str | None, n: int = 1, within: float = 15.0
    ) -> list[dict[str, Any]]:
        """The first n events named event of proposal_id (of any proposal
        when None: a refusal of a forged grant may name none)."""
        deadline = time.monotonic() + within
        while True:
            got = [e for e in self.events
                   if e.get("event") == event and proposal_id in (None, e.get("proposal_id"))]
            if len(got) >= n:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"no {n} {event} events for {proposal_id}; saw {self.events}")
            await asyncio.sleep(0.05)


def restart_change(device: int, id: str) -> Change:
    return Change(
        target={"device_id": device, "service": "nginx", "tags": ["production"]},
        reason=f"nginx on device {device} stopped answering health checks",
        blast_radius="single_device",
        id=id,
    )


def restart_proposal(device: int, id: str) -> dict[str, Any]:
    return {
        "id": id, "tenant": "acme", "kind": "action", "action": "host_restart_service", "class": "write",
        "target": {"device_id": device, "service": "nginx", "tags": ["production"]},
        "reason": f"nginx on device {device} stopped answering health checks", "blast_radius": "single_device",
        "requested_by": {"agent": "py-grant-agent", "session": ""},
    }


async def test_an_approved_tool_runs_once_through_its_grant(client: gated.Client) -> None:
    tap = await AuditTap().start(client)
    seen: list[gated.Verdict] = []
    gate = ToolGate(client, Identity(tenant="acme", agent="py-grant-agent"), observe=lambda p, v: seen.append(v))
    runs: list[int] = []

    @gate.guard(ToolSpec("host_restart_service", "write", lambda d: restart_change(d, "py-grant-1")))
    async def restart(device: int) -> str:
        runs.append(device)
        return "restarted"

    assert await restart(9501) == "restarted"
    assert runs == [9501]
    v = seen[-1]
    assert v.is_approval and v.grant
    # The proposal the gate sent: the change, and the call's arguments.
    sent = restart_proposal(9501, "py-grant-1") | {"arguments": {"device": 9501}}
    claims = await client.verify_grant(v.grant, Expected.of_proposal(encode_proposal(sent)[1]))
    assert (claims.tenant, claims.proposal_id, claims.action) == ("acme", "py-grant-1", "host_restart_service")
    assert claims.proposal_sha256 == v.proposal_sha256 and claims.exp - claims.iat == 300

    used = await tap.wait_for("grant.used", "py-grant-1")
    assert used[0]["data"]["gid"] == claims.gid
    outcomes = await tap.wait_for("grant.outcome", "py-grant-1", n=2)
    assert sorted(e["data"]["status"] for e in outcomes) == ["started", "succeeded"]
    assert all(e["data"]["gid"] == claims.gid for e in outcomes)

    # The same grant a second time: gated refuses, and audits the refusal.
    before = tap.count("grant.refused")
    with pytest.raises(gated.GrantUseRefused, match="already used"):
        await client.use_grant("acme", v.grant, by="py-grant-agent, again")
    await tap.wait_for("grant.refused", None, n=before + 1)


async def test_a_failed_tool_reports_its_error(client: gated.Client) -> None:
    tap = await AuditTap().start(client)
    gate = ToolGate(client, Identity(tenant="acme", agent="py-grant-agent"))

    @gate.guard(ToolSpec("host_restart_service", "write", lambda d: restart_change(d, "py-grant-2")))
    async def restart(device: int) -> str:
        raise RuntimeError("systemctl: unit nginx.service not found")

    with pytest.raises(RuntimeError):
        await restart(9502)
    outcomes = await tap.wait_for("grant.outcome", "py-grant-2", n=2)
    failed = [e["data"] for e in outcomes if e["data"]["status"] == "failed"]
    assert failed and "unit nginx.service not found" in failed[0]["error"]


async def test_the_tool_side_check(client: gated.Client, server: Gated, gated_bin: str, tmp_path: Path) -> None:
    """A service handed a grant checks it with the key set `gated grants
    keys` printed: a tampered grant is refused locally and by gated; the
    grant as issued is accepted once."""
    tap = await AuditTap().start(client)
    p = restart_proposal(9503, "py-grant-3")
    v = await client.propose(p)
    assert v.grant

    printed = subprocess.run(
        [gated_bin, "grants", "keys", "--nats-url", server.nats_url], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    keyfile = tmp_path / "grant-keys.json"
    keyfile.write_text(printed)
    assert KeySet.from_file(keyfile) == await client.grant_keys(refresh=True)

    async with await gated.Client.connect(server.nats_url, grant_keys=KeySet.from_file(keyfile)) as service:
        h, body, sig = v.grant.split(".")
        claims = json.loads(b64url_decode(body))
        claims["target_sha256"] = "0" * 64
        tampered = ".".join((h, b64url(json.dumps(claims).encode()), sig))
        with pytest.raises(gated.GrantRefused) as e:
            await service.accept_grant(tampered, tenant="acme", action="host_restart_service", target=p["target"],
                                       by="restart-service")
        assert e.value.member == "signature"
        before = tap.count("grant.refused")
        with pytest.raises(gated.GrantUseRefused):
            await service.use_grant("acme", tampered, by="restart-service")
        await tap.wait_for("grant.refused", None, n=before + 1)

        # Another target than the grant's: refused before gated is asked.
        with pytest.raises(gated.GrantRefused) as e:
            await service.accept_grant(v.grant, tenant="acme", action="host_restart_service",
                                       target={"device_id": 1, "service": "nginx", "tags": ["production"]},
                                       by="restart-service")
        assert e.value.member == "target_sha256"
        # Another tenant's endpoint: gated refuses.
        with pytest.raises(gated.GrantUseRefused):
            await service.use_grant("globex", v.grant, by="restart-service")

        ok = await service.accept_grant(v.grant, tenant="acme", action="host_restart_service",
                                        target=json.dumps(p["target"]), by="restart-service")
        assert ok.proposal_id == "py-grant-3"
        await service.report_outcome("acme", ok.proposal_id, ok.gid, "started")
        await service.report_outcome("acme", ok.proposal_id, ok.gid, "succeeded")
        with pytest.raises(gated.GrantUseRefused, match="already used"):
            await service.accept_grant(v.grant, tenant="acme", action="host_restart_service", target=p["target"],
                                       by="restart-service")
    outcomes = await tap.wait_for("grant.outcome", "py-grant-3", n=2)
    assert {e["data"]["status"] for e in outcomes} == {"started", "succeeded"}


async def test_an_outcome_of_an_unused_grant_is_refused(client: gated.Client) -> None:
    tap = await AuditTap().start(client)
    v = await client.propose(restart_proposal(9504, "py-grant-4"))
    claims = await client.verify_grant(v.grant, Expected.of_proposal(encode_proposal(restart_proposal(9504, "py-grant-4"))[1]))
    await client.report_outcome("acme", "py-grant-4", claims.gid, "succeeded")
    await tap.wait_for("grant.outcome_refused", "py-grant-4")


@pytest.fixture(scope="module")
def short_lived(gated_bin: str) -> Iterator[Gated]:
    g = start_gated(gated_bin, "--grant-ttl", "5s")
    yield g
    g.kill_hard()


async def test_an_expired_grant_is_refused(short_lived: Gated) -> None:
    async with await gated.Client.connect(short_lived.nats_url) as c:
        p = restart_proposal(9505, "py-grant-5")
        v = await c.propose(p)
        expect = Expected.of_proposal(encode_proposal(p)[1])
        claims = await c.verify_grant(v.grant, expect)
        assert claims.exp - claims.iat == 5
        await asyncio.sleep(max(0.0, claims.exp - time.time()) + 1)
        with pytest.raises(gated.GrantRefused) as e:
            await c.verify_grant(v.grant, expect)
        assert e.value.member == "exp"
        with pytest.raises(gated.GrantUseRefused, match="expired"):
            await c.use_grant("acme", v.grant, by="late agent")



async def test_a_grant_refused_by_the_executor_is_audited(client: gated.Client) -> None:
    """A grant the client refuses itself never reaches gated's use
    endpoint, but gated hears of it: the ToolGate and the tool-side check
    report the refusal, audited as grant.refused by the executor."""
    tap = await AuditTap().start(client)

    class Tampering:
        """Proposes through the real client and hands the gate the
        verdict with another target's grant."""

        def __init__(self, other: str) -> None:
            self.other = other

        async def propose(self, p: Any, *, timeout: float | None = None) -> gated.Verdict:
            v = await client.propose(p, timeout=timeout)
            return dataclasses.replace(v, grant=self.other)

        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

    other = await client.propose(restart_proposal(9507, "py-grant-7-other"))
    gate = ToolGate(Tampering(other.grant), Identity(tenant="acme", agent="py-grant-agent"))  # type: ignore[arg-type]
    with pytest.raises(gated.GrantRefused):
        await gate.authorize("host_restart_service", "write", restart_change(9508, "py-grant-7"))
    refused = await tap.wait_for("grant.refused", "py-grant-7")
    assert refused[0]["data"]["by"] == "executor"
    assert "proposal_id" in refused[0]["data"]["reason"]

    # The tool-side check, handed a grant for another target.
    p = restart_proposal(9509, "py-grant-8")
    v = await client.propose(p)
    with pytest.raises(gated.GrantRefused) as e:
        await client.accept_grant(v.grant, tenant="acme", action="host_restart_service",
                                  target={"device_id": 1}, proposal_id="py-grant-8", by="restart-service")
    assert e.value.member == "target_sha256"
    refused = await tap.wait_for("grant.refused", "py-grant-8")
    assert refused[0]["data"]["by"] == "executor" and "target_sha256" in refused[0]["data"]["reason"]


async def test_an_agent_uses_and_reports_on_its_own_subjects(client: gated.Client, server: Gated) -> None:
    """A client made with agent= asks on the agent's subjects: its ToolGate
    runs the agent's approved tool and reports as the agent; another
    agent's client can neither use that agent's grant nor report its
    outcome; and each report carries a Nats-Msg-Id of its own."""
    tap = await AuditTap().start(client)
    msg_ids: list[tuple[str, str]] = []

    async def on(msg: Any) -> None:
        msg_ids.append((msg.subject, (msg.headers or {}).get("Nats-Msg-Id", "")))

    await client.nc.subscribe("gated.outcomes.acme.>", cb=on)
    await client.nc.flush()
    with pytest.raises(gated.InvalidConfig):
        gated.Client(client.nc, agent="py.grant.agent")
    async with await gated.Client.connect(server.nats_url, agent="py-grant-agent") as mine, \
            await gated.Client.connect(server.nats_url, agent="py-other-agent") as other:
        # The other agent's client: the proposal names py-grant-agent.
        v = await other.propose(restart_proposal(9511, "py-grant-11"))
        with pytest.raises(gated.GrantUseRefused, match='not issued to agent "py-other-agent"'):
            await other.use_grant("acme", v.grant, by="py-other-agent")
        refused = await tap.wait_for("grant.refused", "py-grant-11")
        assert refused[0]["data"]["as"] == "py-other-agent"

        gid = await mine.use_grant("acme", v.grant, by="py-grant-agent")
        used = await tap.wait_for("grant.used", "py-grant-11")
        assert used[0]["data"]["as"] == "py-grant-agent" and used[0]["data"]["gid"] == gid
        await other.report_outcome("acme", "py-grant-11", gid, "failed", "made up")
        made_up = await tap.wait_for("grant.outcome_refused", "py-grant-11")
        assert made_up[0]["data"]["as"] == "py-other-agent"
        await mine.report_outcome("acme", "py-grant-11", gid, "failed", "nginx did not come back")
        taken = await tap.wait_for("grant.outcome", "py-grant-11")
        assert taken[0]["data"]["as"] == "py-grant-agent" and taken[0]["data"]["error"] == "nginx did not come back"

        # The ToolGate of the agent's own client.
        gate = ToolGate(mine, Identity(tenant="acme", agent="py-grant-agent"))
        runs: list[int] = []

        @gate.guard(ToolSpec("host_restart_service", "write", lambda d: restart_change(d, "py-grant-12")))
        async def restart(device: int) -> str:
            runs.append(device)
            return "restarted"

        assert await restart(9512) == "restarted" and runs == [9512]
        outcomes = await tap.wait_for("grant.outcome", "py-grant-12", n=2)
        assert {e["data"]["as"] for e in outcomes} == {"py-grant-agent"}
    subjects = {s for s, _ in msg_ids}
    assert subjects <= {"gated.outcomes.acme.py-grant-11.py-other-agent", "gated.outcomes.acme.py-grant-11.py-grant-agent",
                        "gated.outcomes.acme.py-grant-12.py-grant-agent"}, subjects
    ids = [i for _, i in msg_ids]
    assert len(ids) == len(set(ids)) >= 4, ids
    assert all(len(i.split(".")) == 4 and len(i.split(".")[3]) == 22 for i in ids), ids
