"""Fuzz the decoders and the encoder with hypothesis: bad input is a typed
error, never a crash and never an approval."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gatedkit import vectors
from gated.errors import BadProposal, GatedError, Malformed, NotFound, ServiceError, StatusError, StoreError
from gated.status import status_update
from gated.verdict import _TIME, Verdict, confirm_approval, decode_review_reply, decode_stored_verdict, verdict_message
from gated.wire import Address, address_of, digest, encode_float, encode_proposal

VERDICTS = vectors("verdicts.json")
PROPOSAL = VERDICTS["proposal"].encode()
ADDRESS = address_of(PROPOSAL)
SHA = digest(PROPOSAL)
SEEDS = [c[k].encode() for c in VERDICTS["cases"] for k in ("message", "stored") if c[k]]
OBJECTS = [s for s in SEEDS if s.startswith(b'{"')]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A vector message with bytes flipped, cut, or fields replaced."""
    seed = draw(st.sampled_from(SEEDS))
    how = draw(st.integers(0, 3))
    if how == 0:
        i = draw(st.integers(0, len(seed) - 1))
        return seed[:i] + bytes([draw(st.integers(0, 255))]) + seed[i + 1 :]
    if how == 1:
        return seed[: draw(st.integers(0, len(seed)))]
    doc = json.loads(draw(st.sampled_from(OBJECTS)))
    key = draw(st.sampled_from(sorted(doc)))
    doc[key] = draw(json_values)
    return json.dumps(doc).encode()


inputs = st.binary(max_size=300) | mutated()


@settings(max_examples=400, deadline=None)
@given(inputs)
def test_address_of_only_refuses(data: bytes) -> None:
    try:
        a = address_of(data)
    except BadProposal:
        return
    a.check()


@settings(max_examples=400, deadline=None)
@given(inputs)
def test_verdict_message_skips_or_reads(data: bytes) -> None:
    v = verdict_message(ADDRESS, data)
    assert v is None or (v.tenant == ADDRESS.tenant and v.proposal_id == ADDRESS.id)
    if v is not None and not v.is_final:
        # Held: never an approval, and the hold is readable.
        assert v.outcome == "blocked" and not v.is_approval
        assert v.awaiting_operator is not None or v.run is not None
    if v is not None and v.awaiting_operator is not None:
        assert _TIME.fullmatch(v.awaiting_operator.deadline)


@settings(max_examples=400, deadline=None)
@given(inputs)
def test_stored_verdict_typed_errors(data: bytes) -> None:
    try:
        v = decode_stored_verdict(ADDRESS.tenant, ADDRESS.id, {}, data)
    except (StoreError, NotFound):
        return
    assert v.tenant == ADDRESS.tenant and v.proposal_id == ADDRESS.id


@settings(max_examples=400, deadline=None)
@given(inputs, st.one_of(st.none(), st.text(max_size=6)))
def test_review_reply_typed_errors(data: bytes, code: str | None) -> None:
    headers = {} if code is None else {"Nats-Service-Error-Code": code, "Nats-Service-Error": "x"}
    try:
        v = decode_review_reply(headers, data)
    except (Malformed, ServiceError):
        return
    assert code in (None, "") and v.proposal_id and v.tenant and v.outcome


@settings(max_examples=300, deadline=None)
@given(inputs, st.one_of(st.none(), inputs))
async def test_only_a_stored_approval_is_an_approval(message: bytes, stored: bytes | None) -> None:
    """Whatever arrives on the verdict subject and whatever the store holds,
    the client approves only when the store holds an approval of these
    exact bytes."""
    m = verdict_message(ADDRESS, message)
    if m is None:
        return

    async def lookup() -> Verdict:
        if stored is None:
            return decode_stored_verdict(ADDRESS.tenant, ADDRESS.id, {"Status": "404"}, b"")
        return decode_stored_verdict(ADDRESS.tenant, ADDRESS.id, {}, stored)

    try:
        v = await confirm_approval(ADDRESS, SHA, m, lookup)
    except GatedError:
        return
    if v.is_approval:
        assert stored is not None
        s = json.loads(stored)
        assert s["outcome"] == "approved" and s["approved"] is True and s["proposal_sha256"] == SHA


@settings(max_examples=300, deadline=None)
@given(json_values, st.text(), st.dictionaries(st.text(max_size=12), json_values, max_size=3))
def test_encode_proposal_round_trips(target: Any, reason: str, extra: dict[str, Any]) -> None:
    doc: dict[str, Any] = {"id": "p-1", "tenant": "acme", "action": "x", "class": "write", "reason": reason}
    if isinstance(target, dict):
        doc["target"] = target
    try:
        a, data = encode_proposal({**doc, **extra})
    except BadProposal:
        assert extra  # only the unknown or ill-typed extra fields are refused
        return
    assert a == Address("acme", "p-1", "x")
    text = data.decode("utf-8")
    assert not re.search("[<>&\u2028\u2029]", text)
    back = json.loads(text)
    assert back["v"] == 1 and list(back)[:3] == ["v", "id", "tenant"]
    if isinstance(target, dict) and target:
        assert back["target"] == json.loads(json.dumps(target), parse_int=float) or _close(back["target"], target)
    assert address_of(data) == a


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_close, a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str):
        return a == b.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return bool(a == b)


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_as_go_prints_them(f: float) -> None:
    s = encode_float(f)
    assert float(s) == f
    a = abs(f)
    assert ("e" in s) == (a != 0 and (a < 1e-6 or a >= 1e21))
    if "e" in s:
        assert re.fullmatch(r"-?\d(\.\d+)?e[-+]\d{1,3}", s) and not re.search(r"e[-+]0\d", s) or re.search(r"e\+\d{2,}", s)
    else:
        assert re.fullmatch(r"-?\d+(\.\d+)?", s)
    assert not math.isnan(float(s))


STATUS_SEEDS = [c["message"].encode() for c in vectors("statuses.json")["cases"]]


def _object(s: bytes) -> bool:
    try:
        return isinstance(json.loads(s), dict)
    except ValueError:
        return False


STATUS_OBJECTS = [s for s in STATUS_SEEDS if _object(s)]


@st.composite
def mutated_status(draw: st.DrawFn) -> bytes:
    """A status vector with a byte flipped, cut, or a member replaced."""
    seed = draw(st.sampled_from(STATUS_SEEDS))
    how = draw(st.integers(0, 2))
    if how == 0 and seed:
        i = draw(st.integers(0, len(seed) - 1))
        return seed[:i] + bytes([draw(st.integers(0, 255))]) + seed[i + 1 :]
    if how == 1:
        return seed[: draw(st.integers(0, len(seed)))]
    doc = json.loads(draw(st.sampled_from(STATUS_OBJECTS)))
    doc[draw(st.sampled_from(sorted(doc)))] = draw(json_values)
    return json.dumps(doc).encode()


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300) | mutated_status())
def test_status_update_reads_or_refuses(data: bytes) -> None:
    try:
        s = status_update("acme", "p-1", data)
    except StatusError as e:
        assert isinstance(e, GatedError)
        return
    assert (s.tenant, s.id) == ("acme", "p-1")
    assert (s.stage == "decided") == (s.verdict is not None)
