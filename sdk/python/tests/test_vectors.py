"""The shared vectors (test/vectors): the Python client must make of every
case exactly what the Go client makes of it."""

from __future__ import annotations

from typing import Any

import pytest

from gatedkit import vectors
from gated.errors import GatedError, NotFound, ServiceError, StatusError, StoreError
from gated.status import decode_status, status_update
from gated.verdict import (
    Verdict,
    answer,
    confirm_approval,
    decode_review_reply,
    decode_stored_verdict,
    verdict_message,
)
from gated.wire import SERVICE_ERROR_CODE_HEADER, SERVICE_ERROR_HEADER, Address, address_of, digest, encode_proposal

PROPOSALS = vectors("proposals.json")
ADDRESSES = vectors("addresses.json")
VERDICTS = vectors("verdicts.json")


@pytest.mark.parametrize("case", PROPOSALS["cases"], ids=lambda c: c["name"])
def test_proposal_vectors(case: dict[str, Any]) -> None:
    a, data = encode_proposal(case["input"])
    assert data.decode("utf-8") == case["wire"]
    assert digest(case["wire"].encode("utf-8")) == case["sha256"]
    assert a == Address(**case["address"])
    assert address_of(case["wire"].encode("utf-8")) == a


def test_proposal_vectors_exist() -> None:
    assert len(PROPOSALS["cases"]) >= 5


@pytest.mark.parametrize("case", ADDRESSES["cases"], ids=lambda c: c["name"])
def test_address_vectors(case: dict[str, Any]) -> None:
    data = case["proposal"].encode("utf-8")
    if case["address"] is None:
        with pytest.raises(GatedError) as e:
            address_of(data)
        assert e.value.kind == "bad_proposal"
    else:
        assert address_of(data) == Address(**case["address"])


def test_address_vectors_hold_both() -> None:
    refused = sum(1 for c in ADDRESSES["cases"] if c["address"] is None)
    assert 0 < refused < len(ADDRESSES["cases"])


async def judge(via: str, message: str | None, stored: str | None) -> dict[str, str]:
    """What the Python client makes of one vector, by its own code."""
    proposal = VERDICTS["proposal"].encode("utf-8")
    a = address_of(proposal)
    sha = digest(proposal)

    async def lookup() -> Verdict:
        if stored is None:
            return decode_stored_verdict(a.tenant, a.id, {"Status": "404", "Description": "Message Not Found"}, b"")
        return decode_stored_verdict(a.tenant, a.id, {}, stored.encode("utf-8"))

    try:
        if via == "subject":
            assert message is not None
            m = verdict_message(a, message.encode("utf-8"))
            if m is None:
                return {"result": "skip"}
            v = await confirm_approval(a, sha, m, lookup)
        elif via == "service":
            assert message is not None
            v = await confirm_approval(a, sha, decode_review_reply({}, message.encode("utf-8")), lookup)
        elif via == "stored":
            try:
                s = await lookup()
            except StoreError:
                return {"result": "pending"}  # the client keeps waiting
            v = answer(a, sha, s)
        else:
            return {"result": "unknown via " + via}
    except GatedError as e:
        return {"result": "error", "error": e.kind}
    if not v.is_final:
        return {"result": "held", "outcome": v.outcome}
    if not v.is_approval:
        return {"result": "not_approved", "outcome": v.outcome}
    return {"result": "approved"}


def test_verdict_vectors_digest() -> None:
    assert digest(VERDICTS["proposal"].encode("utf-8")) == VERDICTS["proposal_sha256"]
    results = {c["expect"]["result"] for c in VERDICTS["cases"]}
    assert results >= {"skip", "pending", "approved", "not_approved", "held", "error"}


@pytest.mark.parametrize("case", VERDICTS["cases"], ids=lambda c: c["name"])
async def test_verdict_vectors(case: dict[str, Any]) -> None:
    assert await judge(case["via"], case["message"], case["stored"]) == case["expect"]


@pytest.mark.parametrize("case", VERDICTS["service_errors"], ids=lambda c: "service error " + c["code"])
def test_service_error_vectors(case: dict[str, Any]) -> None:
    headers = {SERVICE_ERROR_CODE_HEADER: case["code"], SERVICE_ERROR_HEADER: case["description"]}
    with pytest.raises(ServiceError) as e:
        decode_review_reply(headers, b"")
    assert e.value.kind == case["error"]


def test_not_approved_carries_the_verdict() -> None:
    """check() raises the subclass of the outcome, carrying the verdict."""
    import gated

    for outcome, cls in [
        ("rejected", gated.ReviewRejected),
        ("blocked", gated.ReviewBlocked),
        ("error", gated.ReviewError),
        ("timeout", gated.ReviewTimeout),
        ("invalid", gated.ProposalInvalid),
        ("maybe", gated.NotApproved),
        ("approved", gated.NotApproved),  # approved false
    ]:
        v = Verdict(proposal_id="p-1", tenant="acme", outcome=outcome, approved=False, reason="r")
        with pytest.raises(gated.NotApproved) as e:
            v.check()
        assert type(e.value) is cls
        assert e.value.verdict is v


def test_held_verdict_is_awaiting_operator() -> None:
    """A verdict held for an operator raises AwaitingOperator, which is a
    ReviewBlocked; a blocked verdict that awaits nobody is final."""
    import gated
    from gated.verdict import OperatorHold

    for name, v in [
        ("action", Verdict(proposal_id="p-1", tenant="acme", outcome="blocked", approved=False,
                           awaiting_operator=OperatorHold(deadline="2026-11-25T11:00:00Z"))),
        ("run", Verdict(proposal_id="p-1", tenant="acme", outcome="blocked", approved=False,
                        run={"awaiting_operator": ["ui"]})),
    ]:
        assert not v.is_final, name
        with pytest.raises(gated.AwaitingOperator) as e:
            v.check()
        assert isinstance(e.value, gated.ReviewBlocked) and e.value.verdict is v
    final = Verdict(proposal_id="p-1", tenant="acme", outcome="blocked", approved=False, run={"awaiting_operator": []})
    assert final.is_final
    with pytest.raises(gated.ReviewBlocked) as e2:
        final.check()
    assert type(e2.value) is gated.ReviewBlocked


def test_stored_not_found_is_typed() -> None:
    with pytest.raises(NotFound):
        decode_stored_verdict("acme", "p-1", {"Status": "404"}, b"")
    with pytest.raises(NotFound):
        decode_stored_verdict("acme", "p-1", {"KV-Operation": "DEL"}, b"")
    with pytest.raises(StoreError):
        decode_stored_verdict("acme", "p-1", {"Nats-Subject": "$KV.GATED_VERDICTS.acme.p-2"}, b"{}")


STATUSES = vectors("statuses.json")


@pytest.mark.parametrize("case", STATUSES["cases"], ids=lambda c: c["name"])
def test_status_vectors(case: dict[str, Any]) -> None:
    data = case["message"].encode("utf-8")
    if case["status"] is None:
        with pytest.raises(StatusError) as e:
            status_update("acme", "p-1", data)
        assert e.value.kind == "bad_status"
        assert e.value.field == case["field"]
        return
    st = status_update("acme", "p-1", data)
    got = {
        "stage": st.stage,
        "reviewer": st.reviewer,
        "reason": st.reason,
        "outcome": st.verdict.outcome if st.verdict else "",
        "deadline": st.deadline != "",
    }
    assert got == case["status"]
    assert (st.tenant, st.id) == ("acme", "p-1")


def test_status_vectors_hold_both() -> None:
    refused = sum(1 for c in STATUSES["cases"] if c["status"] is None)
    assert 0 < refused < len(STATUSES["cases"])


def test_status_not_utf8() -> None:
    with pytest.raises(StatusError) as e:
        decode_status(b'{"\xff":1}')
    assert e.value.field == ""
