"""`gated mcp` in front of an MCP server written in Python (mcp_upstream.py:
the `mcp` package's low-level server, reading its arguments with json),
driven by the `mcp` package's client, with a real `gated serve`.

The catalog names only the host as the target (a JSON Pointer); the tool
also acts on the service. Whatever the server receives must be in the
proposal gated decided, read from the exact bytes published (their SHA-256
is the stored verdict's proposal_sha256); a call whose member names differ
only by case is refused and never reaches the server."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

import gated
from gatedkit import Gated
from gated.wire import address_of, digest

UPSTREAM = Path(__file__).with_name("mcp_upstream.py")
CATALOG = "tools:\n  restart: {action: host_restart_service, class: write, target: {host: /host}}\n"


@dataclass
class Proxy:
    """A session of the mcp client with `gated mcp`, which runs the Python
    server; the proposals published for acme, as gated received them; and
    the server's log of the calls it acted on."""

    mcp: Client
    client: gated.Client
    published: list[bytes]
    log: Path

    def acted(self) -> list[dict[str, Any]]:
        """What the server acted on, call by call."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def proposal(self, id: str) -> bytes:
        """The bytes published for proposal id."""
        found = [data for data in self.published if address_of(data).id == id]
        assert len(found) == 1, f"{len(found)} proposals published as {id}"
        return found[0]


@pytest.fixture(scope="module")
async def proxy(server: Gated, gated_bin: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Proxy]:
    dir = tmp_path_factory.mktemp("mcp-upstream")
    (dir / "catalog.yaml").write_text(CATALOG)
    log = dir / "calls.jsonl"
    client = await gated.Client.connect(server.nats_url)
    published: list[bytes] = []

    async def tap(msg: Any) -> None:
        published.append(msg.data)

    await client.nc.subscribe("gated.proposals.acme.>", cb=tap)
    await client.nc.flush()
    params = StdioServerParameters(
        command=gated_bin,
        args=["mcp", "--tenant", "acme", "--agent", "py-mcp-agent", "--nats-url", server.nats_url,
              "--catalog", str(dir / "catalog.yaml"), "--wait", "60s",
              "--", sys.executable, str(UPSTREAM), "--log", str(log)],
    )
    # The session is entered and left in a task of its own: anyio's scopes
    # must be, and a fixture's setup and teardown run in different tasks.
    session: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold() -> None:
        try:
            async with Client(params, read_timeout_seconds=90) as mcp:
                session.set_result(mcp)
                await done.wait()
        except BaseException as e:
            if not session.done():
                session.set_exception(e)
            raise

    holder = asyncio.create_task(hold())
    try:
        yield Proxy(await session, client, published, log)
    finally:
        done.set()
        await holder
        await client.close()


def text(res: CallToolResult) -> str:
    return " ".join(c.text for c in res.content if isinstance(c, TextContent))


async def test_the_server_acts_only_on_members_gated_decided(proxy: Proxy) -> None:
    """An approved call: every member the server received, the service it
    acted on as well as the host the target names, is in the arguments of
    the proposal gated approved."""
    res = await proxy.mcp.call_tool("restart", {"host": "web-py-1", "service": "postgres", "_reason": "wedged"})
    assert not res.is_error, text(res)
    assert text(res) == "restarted postgres on web-py-1"
    verdict = (res.meta or {})["gated/verdict"]
    data = proxy.proposal(verdict["proposal_id"])
    stored = await proxy.client.verdict("acme", verdict["proposal_id"])
    assert stored.is_approval and stored.proposal_sha256 == digest(data)
    proposal = json.loads(data)
    [call] = proxy.acted()
    assert call["host"] == proposal["target"]["host"] == "web-py-1"
    decided = proposal.get("arguments", {})
    received = call["arguments"]
    nowhere = {k: v for k, v in received.items() if proposal["target"].get(k) != v and decided.get(k) != v}
    assert nowhere == {}, f"the server received and acted on {nowhere}, which is in no part of the proposal gated decided: {data.decode()}"
    assert received == decided == {"host": "web-py-1", "service": "postgres"}


@pytest.mark.parametrize(("args", "names"), [
    ({"host": "web-py-2", "HOST": "db-prod", "service": "nginx"}, '"HOST" and "host"'),
    ({"host": "web-py-3", "ho\u017ft": "db-prod", "service": "nginx"}, '"host" and "ho\u017ft"'),
    ({"host": "web-py-4", "service": "nginx", "opts": {"kind": "a", "\u212aind": "b"}}, "/opts"),
], ids=["ascii case", "long s", "kelvin sign, nested"])
async def test_names_equal_under_case_folding_never_reach_the_server(
    proxy: Proxy, args: dict[str, Any], names: str
) -> None:
    """The server reads names without case: forwarded, such a call would
    make it restart another host than the one reviewed. gated mcp refuses
    it, names both members, proposes nothing, and the server never sees
    it."""
    before, published = len(proxy.acted()), len(proxy.published)
    res = await proxy.mcp.call_tool("restart", args)
    acted = proxy.acted()[before:]
    assert acted == [], f"the server acted on {acted}; the call's target was host {args['host']}"
    assert res.is_error and "gated refused the call of restart" in text(res) and names in text(res), text(res)
    await proxy.client.nc.flush()
    assert proxy.published[published:] == []
