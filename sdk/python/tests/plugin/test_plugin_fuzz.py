"""Fuzz-style tests of every decoder of gated.plugin: whatever the host
sends, the result is the decoded value or the SDK's own error, never
another exception, and never an approval made up by the SDK."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gated.plugin import Decision, Gate, HandshakeError, MalformedRequest, Response
from gated.plugin._server import _Broker, _Plugin
from gated.plugin._wire import negotiate_version, read_client_cert, request_from_wire, response_to_wire
from gated.plugin.goplugin import goplugin_pb2 as gp
from gated.plugin.v1 import reviewer_pb2 as pb

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
json_bytes = json_values.map(lambda v: json.dumps(v).encode())
any_bytes = st.binary(max_size=256) | json_bytes | st.sampled_from([b"", b"{}", b"[]", b"null", b"[" * 5000, b"{\"a\":1} x"])


@settings(max_examples=150, deadline=None)
@given(proposal=any_bytes, run=any_bytes, history=any_bytes, deadline=st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_request_from_wire(proposal: bytes, run: bytes, history: bytes, deadline: int) -> None:
    m = pb.ReviewRequest(review_id="rv", proposal_json=proposal, deadline_unix_ms=deadline,
                         policy=pb.PolicyContext(run_json=run, history_json=history))
    try:
        req = request_from_wire(m)
    except MalformedRequest:
        return
    assert isinstance(req.proposal, dict) and req.proposal_json == proposal
    assert req.run is None or isinstance(req.run, dict)
    assert isinstance(req.policy.history, list)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40) | st.none())
def test_negotiate_version(offered: str | None) -> None:
    try:
        assert negotiate_version(offered) == 1
    except HandshakeError:
        assert offered is None or "1" not in [p.strip() for p in offered.split(",")] or not all(
            p.strip().isascii() and p.strip().isdigit() for p in offered.split(",")
        )


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: "-----BEGIN CERTIFICATE-----\n" + b.hex() + "\n-----END CERTIFICATE-----\n"))
def test_read_client_cert(pem: str) -> None:
    try:
        read_client_cert(pem)
    except HandshakeError:
        return
    raise AssertionError(f"accepted {pem!r} as a certificate")


@settings(max_examples=150, deadline=None)
@given(service_id=st.integers(min_value=0, max_value=(1 << 32) - 1), network=st.text(max_size=8) | st.sampled_from(["unix", "tcp"]),
       address=st.text(max_size=64), knock=st.booleans())
def test_broker_learn(service_id: int, network: str, address: str, knock: bool) -> None:
    b = _Broker(_Plugin.__new__(_Plugin))
    info = gp.ConnInfo(service_id=service_id, network=network, address=address)
    if knock:
        info.knock.knock = True
    b.learn(info)
    if service_id in b.known:
        assert not knock and service_id != 0 and b.known[service_id] == (network, address) and network in ("unix", "tcp")


@settings(max_examples=150, deadline=None)
@given(text=st.text(), gates=st.lists(st.tuples(st.text(max_size=10), st.booleans(), st.text(max_size=10)), max_size=3),
       turns=st.integers(), decision=st.sampled_from([Decision.APPROVE, Decision.REJECT, "maybe", None]))
def test_response_to_wire(text: str, gates: list[tuple[str, bool, str]], turns: int, decision: object) -> None:
    r = Response(text=text, decision=decision, gates=[Gate(*g) for g in gates], turns=turns)  # type: ignore[arg-type]
    out = pb.ReviewResponse.FromString(response_to_wire(r).SerializeToString())
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        # Text travels byte for byte.
        assert out.text == text
    want = {Decision.APPROVE: pb.DECISION_APPROVE, Decision.REJECT: pb.DECISION_REJECT}.get(decision, pb.DECISION_UNSPECIFIED)  # type: ignore[call-overload]
    assert out.decision == want
    assert 0 <= out.turns < 1 << 32


def test_call_tool_sync_on_the_event_loop_is_refused() -> None:
    """An async reviewer that calls the synchronous form would block the
    loop that makes the call: it gets an error instead of a hang."""
    import asyncio
    from datetime import UTC, datetime

    from gated.plugin import Persona, PluginError, Policy, Request

    async def call(name: str, args: bytes) -> bytes:
        return b"{}"

    async def main() -> None:
        req = Request(review_id="rv", proposal={}, proposal_json=b"{}", persona=Persona(), policy=Policy(),
                      deadline=datetime.now(UTC), _call=call, _loop=asyncio.get_running_loop())
        assert await req.call_tool("t") == {}
        try:
            req.call_tool_sync("t")
        except PluginError as e:
            assert "event loop" in str(e)
        else:
            raise AssertionError("call_tool_sync on the loop did not raise")
        assert await asyncio.to_thread(req.call_tool_sync, "t") == {}

    asyncio.run(main())
