"""What a guarded tool runs with: the arguments gated reviewed, decoded from
the bytes that were proposed, never the caller's objects; and what cannot
be proposed as arguments is refused before anything is."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gated
from dataclasses import replace

from gated import Change, Identity, ToolGate, ToolSpec
from gated.wire import digest, encode_proposal


class Reviewer:
    """A proposer that approves each proposal once the test lets it
    (``release``), and keeps the bytes the client would have published.
    ``during`` runs while the proposal is under review."""

    def __init__(self, during: Callable[[], None] | None = None) -> None:
        self.sent: list[bytes] = []
        self.under_review = asyncio.Event()
        self.release = asyncio.Event()
        self.during = during
        if during is not None:
            self.release.set()

    async def propose(self, proposal: Any, *, timeout: float | None = None) -> gated.Verdict:
        _, data = encode_proposal(dict(proposal))  # as gated.Client publishes it
        self.sent.append(data)
        self.under_review.set()
        if self.during is not None:
            self.during()
        await self.release.wait()
        return gated.Verdict(proposal_id=proposal["id"], tenant=proposal["tenant"], outcome="approved", approved=True,
                             action=proposal["action"], proposal_sha256=digest(data))

    def proposed(self, i: int = -1) -> dict[str, Any]:
        """A proposal as gated reads it: every number a float64."""
        doc: dict[str, Any] = json.loads(self.sent[i], parse_int=float)
        return doc


def gate_on(proposer: Any) -> ToolGate:
    return ToolGate(proposer, Identity(tenant="acme", agent="ops-agent"), require_grant=False)


def restart_change(cfg: dict[str, Any]) -> Change:
    return Change(target={"host": cfg["host"]}, reason="nginx is wedged", blast_radius="single_device")


async def test_a_dict_changed_during_the_review_is_not_what_runs() -> None:
    """Another task changes the caller's dict while gated reviews the call:
    the tool runs on the host that was reviewed, not on the new one."""
    reviewer = Reviewer()
    gate = gate_on(reviewer)
    ran: list[dict[str, Any]] = []

    @gate.guard(ToolSpec("host_restart_service", "write", restart_change))
    async def restart(cfg: dict[str, Any]) -> str:
        ran.append(json.loads(json.dumps(cfg)))
        return "restarted " + str(cfg["host"])

    cfg = {"host": "web-1", "service": "nginx"}
    call = asyncio.create_task(restart(cfg))
    await reviewer.under_review.wait()
    cfg["host"] = "db-prod"  # another task, while gated reviews
    reviewer.release.set()
    assert await call == "restarted web-1"
    assert ran == [{"host": "web-1", "service": "nginx"}], f"the tool ran on {ran}, gated reviewed host web-1"
    p = reviewer.proposed()
    assert p["target"] == {"host": "web-1"}
    assert p["arguments"] == {"cfg": {"host": "web-1", "service": "nginx"}}


def test_a_sync_tool_runs_on_what_was_reviewed() -> None:
    """The same for a sync tool: the caller's list changes during the
    review (here, from within it); the tool gets the reviewed one."""
    hosts = ["web-1", "web-2"]
    reviewer = Reviewer(during=lambda: hosts.append("db-prod"))
    gate = gate_on(reviewer)
    ran: list[list[str]] = []

    @gate.guard(ToolSpec("host_drain", "write", lambda hosts: Change(target={"hosts": list(hosts)}, reason="rollout",
                                                                     blast_radius="cluster")))
    def drain(hosts: list[str]) -> None:
        ran.append(list(hosts))

    drain(hosts)
    assert ran == [["web-1", "web-2"]], f"the tool ran on {ran}, gated reviewed web-1 and web-2"
    assert reviewer.proposed()["arguments"] == {"hosts": ["web-1", "web-2"]}


def test_every_kind_of_parameter_is_bound_and_proposed() -> None:
    """Positional-only, positional-or-keyword, *args, keyword-only with a
    default, **kwargs: each is proposed by its name, and describe and the
    tool are called as the tool was, with the decoded values."""
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)
    described: list[tuple[Any, ...]] = []
    ran: list[tuple[Any, ...]] = []

    def describe(host: str, /, service: str, *extra: Any, grace: float = 10, **opts: Any) -> Change:
        described.append((host, service, extra, grace, opts))
        return Change(target={"host": host}, reason="r", blast_radius="single_device")

    @gate.guard(ToolSpec("host_restart_service", "write", describe))
    def restart(host: str, /, service: str, *extra: Any, grace: float = 10, **opts: Any) -> None:
        ran.append((host, service, extra, grace, opts))

    restart("web-1", "nginx", ("a", 1), drain=True, host="a keyword named like the positional-only host")
    call = ("web-1", "nginx", (["a", 1],), 10,
            {"drain": True, "host": "a keyword named like the positional-only host"})
    assert ran == described == [call]
    assert reviewer.proposed()["arguments"] == {
        "host": "web-1", "service": "nginx", "extra": [["a", 1]], "grace": 10,
        "opts": {"drain": True, "host": "a keyword named like the positional-only host"},
    }
    # The bytes: sorted names, as any client encodes them.
    assert b'"arguments":{"extra":[["a",1]],"grace":10,"host":"web-1","opts":{"drain":true,' in reviewer.sent[-1]


def test_describe_and_the_tool_get_copies_of_their_own() -> None:
    """describe cannot change what the tool gets: each is decoded afresh."""
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)
    ran: list[dict[str, Any]] = []

    def describe(cfg: dict[str, Any]) -> Change:
        change = Change(target={"host": cfg["host"]}, reason="r", blast_radius="single_device")
        cfg["host"] = "db-prod"
        return change

    @gate.guard(ToolSpec("host_restart_service", "write", describe))
    def restart(cfg: dict[str, Any]) -> None:
        ran.append(cfg)

    restart({"host": "web-1"})
    assert ran == [{"host": "web-1"}]


def test_arguments_that_are_not_json_are_refused_before_anything_is_proposed() -> None:
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)
    ran: list[Any] = []

    @gate.guard(ToolSpec("host_restart_service", "write", lambda cfg, **kw: Change(target={}, blast_radius="cluster")))
    def restart(cfg: Any, **kw: Any) -> None:
        ran.append(cfg)

    for value, says in [
        ({"hosts": {"web-1"}}, "cfg.hosts is a set"),
        (object(), "cfg is a object"),
        ({"grace": math.nan}, "cfg.grace: nan"),
        ([1, math.inf], "cfg[1]: inf"),
        ({"id": 2**53 + 1}, "cfg.id: the integer 9007199254740993 is beyond 2**53"),
        ({1: "web-1"}, "cfg: the key 1 is not a string"),
        (b"web-1", "cfg is a bytes"),
    ]:
        with pytest.raises(gated.InvalidToolSpec) as e:
            restart(value)
        assert "argument 'cfg' of tool host_restart_service" in str(e.value) and says in str(e.value), str(e.value)
    with pytest.raises(gated.InvalidToolSpec, match="argument 'kw'"):
        restart({}, when=object())
    assert reviewer.sent == [] and ran == []


def test_names_equal_under_case_folding_are_refused() -> None:
    """Two keyword arguments, or two keys of one dict, whose names differ
    only by case: the error names where and both; nothing is proposed."""
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)

    ran: list[Any] = []

    @gate.guard(ToolSpec("host_restart_service", "write", lambda cfg=None, **kw: Change(target={}, blast_radius="cluster")))
    def restart(cfg: Any = None, **kw: Any) -> None:
        ran.append(cfg)

    calls: list[tuple[Callable[[], None], str]] = [
        (lambda: restart(Host="db-prod", host="web-1"), "arguments.kw: members 'Host' and 'host' differ only by case"),
        (lambda: restart({"host": "web-1", "ho\u017ft": "db-prod"}), "arguments.cfg: members 'host' and 'ho\u017ft'"),
        (lambda: restart({"opts": [{"\u212aind": 1, "kind": 2}]}), "arguments.cfg.opts.0: members 'kind' and '\u212aind'"),
    ]
    for call, says in calls:
        with pytest.raises(gated.InvalidToolSpec) as e:
            call()
        assert says in str(e.value), str(e.value)
    assert ran == [] and reviewer.sent == []
    restart({"stra\u00dfe": 1, "strasse": 2})  # not equal under simple folding: proposed, and approved here
    assert len(reviewer.sent) == 1 and ran == [{"stra\u00dfe": 1, "strasse": 2}]


def test_describe_may_not_set_the_arguments() -> None:
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)

    @gate.guard(ToolSpec("host_restart_service", "write",
                         lambda host: Change(target={"host": host}, blast_radius="single_device", arguments={"host": "x"})))
    def restart(host: str) -> None:
        raise AssertionError("must not run")

    with pytest.raises(gated.InvalidToolSpec, match="set Change.arguments"):
        restart("web-1")
    assert reviewer.sent == []


async def test_authorize_proposes_the_arguments_a_runtime_gives() -> None:
    """A runtime that dispatches tools itself has its arguments reviewed
    through Change.arguments; folded names and values that are not JSON
    are refused before anything is proposed."""
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)
    args = {"host": "web-1", "opts": {"grace": 2.5, "hosts": ("a", "b")}}
    change = Change(target={"host": "web-1"}, reason="r", blast_radius="single_device", arguments=args)
    async with gate.authorized("host_restart_service", "write", change) as v:
        assert v is not None and v.is_approval
    assert reviewer.proposed()["arguments"] == {"host": "web-1", "opts": {"grace": 2.5, "hosts": ["a", "b"]}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"host": "a", "HOST": "b"}, "members 'HOST' and 'host'"),
        ({"at": {1, 2}}, "argument 'at' of tool host_restart_service is not JSON a reviewer can read \\(at is a set"),
        ({"id": 2**60 + 1}, "argument 'id' .* the integer 1152921504606846977 is beyond 2\\*\\*53"),
    ]
    for bad, says in cases:
        with pytest.raises(gated.InvalidToolSpec, match=says):
            await gate.authorize("host_restart_service", "write", replace(change, arguments=bad))
    assert len(reviewer.sent) == 1


# Text without lone surrogates, which the encoder writes as U+FFFD; names
# from a few letters and their case forms, so that folded names meet.
text = st.text(st.characters(codec="utf-8"), max_size=6)
names = st.text(st.sampled_from("hoHOsSt\u017f\u212ak"), min_size=1, max_size=3)
arguments = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda children: st.lists(children, max_size=3) | st.tuples(children) | st.dictionaries(names | text, children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(names, arguments, max_size=4))
def test_the_tool_runs_with_exactly_the_proposed_arguments(kw: dict[str, Any]) -> None:
    """Whatever JSON values a call has, the tool gets what JSON makes of
    the arguments member of the bytes that were proposed; or the call is
    refused before anything is."""
    reviewer = Reviewer(during=lambda: None)
    gate = gate_on(reviewer)
    ran: list[dict[str, Any]] = []

    @gate.guard(ToolSpec("x", "write", lambda **kw: Change(target={"n": len(kw)}, blast_radius="cluster")))
    def tool(**kw: Any) -> None:
        ran.append(kw)

    try:
        tool(**kw)
    except gated.InvalidToolSpec as e:
        assert "differ only by case" in str(e)
        assert reviewer.sent == [] and ran == []
        return
    sent = reviewer.proposed()
    assert ran == [sent.get("arguments", {}).get("kw", {})]
    assert ran[0] == json.loads(json.dumps(kw))  # the caller's values, as JSON has them
