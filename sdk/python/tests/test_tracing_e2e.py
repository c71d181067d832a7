"""W3C trace context on the proposals the Python client publishes: the
current OpenTelemetry span's traceparent when there is one, none when
not, and nothing at all without opentelemetry-api."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import gated
from gatedkit import Gated, example_proposal

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$")
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7


@pytest.fixture(scope="module")
async def client(server: Gated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(server.nats_url)
    yield c
    await c.close()


async def published(server: Gated, client: gated.Client, proposal: dict[str, object], span: SpanContext | None) -> Msg:
    """Propose under span (or none) and return the message as published."""
    nc = await nats.connect(server.nats_url)
    got: asyncio.Queue[Msg] = asyncio.Queue()

    async def keep(m: Msg) -> None:
        await got.put(m)

    try:
        await nc.subscribe(f"gated.proposals.acme.{proposal['action']}", cb=keep)
        await nc.flush()
        if span is None:
            await client.propose_raw(gated.encode_proposal(proposal)[1], timeout=30)
        else:
            with trace.use_span(NonRecordingSpan(span)):
                await client.propose_raw(gated.encode_proposal(proposal)[1], timeout=30)
        async with asyncio.timeout(10):
            while True:
                m = await got.get()
                if (m.headers or {}).get("Nats-Msg-Id") == f"acme.{proposal['id']}":
                    return m
    finally:
        await nc.close()


async def test_publish_carries_the_current_span(server: Gated, client: gated.Client) -> None:
    span = SpanContext(trace_id=TRACE_ID, span_id=SPAN_ID, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    p = example_proposal("approved.json", id="py-traced-1", target={"device_id": 9301, "service": "nginx", "tags": ["production"]})
    m = await published(server, client, p, span)
    tp = (m.headers or {}).get("traceparent", "")
    assert TRACEPARENT.match(tp), tp
    assert tp == f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"


async def test_publish_without_a_span_carries_none(server: Gated, client: gated.Client) -> None:
    p = example_proposal("approved.json", id="py-untraced-1", target={"device_id": 9302, "service": "nginx", "tags": ["production"]})
    m = await published(server, client, p, None)
    assert "traceparent" not in (m.headers or {})
    assert "tracestate" not in (m.headers or {})


def test_without_opentelemetry_nothing_changes() -> None:
    # A fresh interpreter where importing opentelemetry fails, as it does
    # where the optional package is not installed.
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import gated.tracing as t\n"
        "assert not t.available() and t.trace_headers() == {}, t.trace_headers()\n"
        "import gated.client\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
