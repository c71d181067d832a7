"""The catalog reader: the shared vectors (the Go decoder is held to the
same file), errors that say what is wrong and where, fuzzed input; the
mapping of a tool's call onto a proposal, and the typed refusal of each
way a call fails."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gated
from gated.integrations import Catalog, Gate, InvalidCatalog, ToolCall, ToolDenied, ToolRefused, action_name
from gated.integrations._catalog import MAX_CATALOG_SIZE, parse_pointer, resolve_pointer
from gated.integrations._core import refusal
from gatedkit import REPO, vectors

CATALOGS = vectors("catalogs.json")["catalogs"]


class NoProposer:
    async def propose(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("nothing is proposed here")

    async def await_decision(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("nothing is awaited here")


@pytest.mark.parametrize("case", CATALOGS, ids=lambda c: c["note"])
def test_catalog_vectors(case: dict[str, Any]) -> None:
    """Refused with the error the Go reader gives, or read, each tool
    mapped and each call's target, reason and arguments as gated mcp
    makes them."""
    if "error" in case:
        with pytest.raises(InvalidCatalog) as e:
            Catalog.decode(case["data"])
        assert case["error"] in str(e.value)
        return
    g = Gate(NoProposer(), gated.Identity(tenant="acme", agent="a"), catalog=Catalog.decode(case["data"]))
    for want in case.get("mappings", []):
        m = g.mapping(want["tool"])
        assert (m.action, m.class_, m.blast_radius, m.reason_argument) == (
            want["action"], want["class"], want["blast_radius"], want["reason_argument"])
        assert m.reviewer == want.get("reviewer", "")
        assert list(m.labels) == want.get("labels", [])
        for call in want.get("calls", []):
            if "error" in call:
                with pytest.raises(ToolDenied) as d:
                    g.change(ToolCall(want["tool"], call["arguments"]))
                assert call["error"] in str(d.value)
                continue
            _, change, _, forward = g.change(ToolCall(want["tool"], call["arguments"]))
            assert change.target == call["target"] and forward == call["forward"]
            assert (change.labels or []) == want.get("labels", [])
            # No reason argument: the gate says who calls which tool.
            assert change.reason == (call["reason"] or f"python agent a calls tool {want['tool']}")


def test_the_examples_catalogs_read() -> None:
    for path in [REPO / "examples" / "mcp-ops" / "catalog.yaml", Path(__file__).with_name("catalog.yaml")]:
        assert Catalog.load(path).tools


@pytest.mark.parametrize(
    "data, says",
    [
        ("tools:\n  a: {klass: read}\n", 'tools["a"]: field klass not found'),
        ("tools:\n  a: {class: read}\n  a: {class: write}\n", 'key "a" already defined (line 3 column 3)'),
        ("tools: {}\n---\ntools: {}\n", "more than one YAML document"),
        ("tools:\n  a: {class: admin}\n", 'tools["a"].class "admin": want read, write or destructive'),
        ("tools:\n  a: {target: {host: /h~2}}\n", "~ must be followed by 0 or 1"),
        ("tools:\n  a: {target: {h: /h}, target_fixed: {h: x}}\n", 'member "h" is both in target and in target_fixed'),
        ("tools:\n  a: {target_fixed: {m: {1: x}}}\n", "not a JSON object"),
        ("base: &b {class: read}\ntools:\n  a:\n    <<: *b\n", "field base not found"),
        ("tools:\n  a:\n    <<: {class: read}\n", "merge keys (<<) are not read"),
        ("tools: {a: [\n", "not YAML: line 2 column 1"),
        (b"tools: {a: \xff}\n", "not UTF-8 at byte 11"),
        ("#" * (MAX_CATALOG_SIZE + 1), "more than 1048576"),
    ],
)
def test_bad_catalogs_say_what_and_where(data: str | bytes, says: str) -> None:
    with pytest.raises(InvalidCatalog) as e:
        Catalog.decode(data)
    assert says in str(e.value)


def test_load_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidCatalog, match="catalog .*missing.yaml: No such file"):
        Catalog.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  a: {class: admin}\n")
    with pytest.raises(InvalidCatalog, match=r"catalog .*bad.yaml: tools\[\"a\"\].class"):
        Catalog.load(bad)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(alphabet="tools:a{}[]-_/~01 \n#'\"&*<!|>.,", max_size=200)))
def test_fuzzed_catalogs_are_read_or_refused(data: bytes | str) -> None:
    try:
        c = Catalog.decode(data)
    except InvalidCatalog:
        return
    for name, r in c.tools.items():
        assert r.class_ in ("", "read", "write", "destructive")
        assert not r.action or gated.wire.valid_action(r.action)
        for p in r.target.values():
            parse_pointer(p)
        assert gated.wire.valid_action(action_name(name))


def test_action_name_as_gated_mcp_makes_it() -> None:
    # mcpgate's TestActionName table.
    assert action_name("restart_service") == "restart_service"
    assert action_name("db.drop/table") == "db_drop_table"
    assert action_name("drop täble") == "drop_t__ble"
    assert action_name("") == "_"
    assert action_name("a" * 128) == "a" * 128
    long = "x" * 200
    a = action_name(long + "a")
    assert len(a) == 128 and a == "x" * 119 + "-" + hashlib.sha256((long + "a").encode()).hexdigest()[:8]
    assert a != action_name(long + "b")


def test_pointers() -> None:
    args = {"a/b": {"~": [10, 20]}, "": 1}
    assert resolve_pointer(args, "/a~1b/~0/1") == 20
    assert resolve_pointer(args, "") == args
    assert resolve_pointer(args, "/") == 1
    for bad in ("/a~1b/~0/01", "/a~1b/~0/2", "/a~1b/~0/-0", "/nope"):
        with pytest.raises(LookupError):
            resolve_pointer(args, bad)


CATALOG = Catalog.decode(Path(__file__).with_name("catalog.yaml").read_text())


def gate(**kw: Any) -> Gate:
    return Gate(NoProposer(), gated.Identity(tenant="acme", agent="a", session="s"), catalog=CATALOG, **kw)


def test_mapping_of_a_call() -> None:
    g = gate()
    m, change, encoded, reviewed = g.change(
        ToolCall("restart_service", {"service": "nginx", "device_id": 7, "_reason": "wedged"}, "call-1")
    )
    assert (m.action, m.class_, m.blast_radius) == ("host_restart_service", "write", "single_device")
    assert change.target == {"device_id": 7, "service": "nginx", "tags": ["production"]}
    assert change.reason == "wedged" and encoded == '{"device_id":7,"service":"nginx"}'
    assert reviewed == {"device_id": 7, "service": "nginx"}
    assert change.id == g.proposal_id(ToolCall("restart_service", {}, "call-1")) != g.proposal_id(
        ToolCall("restart_service", {}, "call-2")
    )
    # A tool the catalog does not name: its name as action, the default
    # class, its whole arguments as target.
    m, change, _, _ = g.change(ToolCall("scale.up", {"n": 2}))
    assert (m.action, m.class_) == ("scale_up", "write") and change.target == {"n": 2}
    assert gate(default_class="destructive").mapping("other").class_ == "destructive"


@pytest.mark.parametrize(
    "call, says",
    [
        (ToolCall("restart_service", {"service": "nginx"}), "target device_id points at '/device_id'"),
        (ToolCall("restart_service", {"device_id": 1, "service": "x", "_reason": 5}), "reason argument _reason is not text"),
        (ToolCall("t", {"x": float("nan")}), "not JSON"),
        (ToolCall("t", {"host": 1, "HOST": 2}), "case"),
    ],
)
def test_calls_that_cannot_be_proposed_are_refused(call: ToolCall, says: str) -> None:
    with pytest.raises(ToolDenied) as e:
        gate().change(call)
    assert says in str(e.value) and str(e.value).endswith("The call was not made.")


def test_bad_config() -> None:
    with pytest.raises(gated.InvalidConfig):
        gate(default_class="admin")


@pytest.mark.parametrize(
    "error, want",
    [
        (gated.NoVerdict("no verdict for proposal acme.x within 2s"), "ToolTimedOut"),
        (nats.errors.TimeoutError(), "ToolTimedOut"),
        (gated.ConnectionLost("the connection to NATS closed"), "GatedUnreachable"),
        (gated.ServiceUnavailable("nothing serves gated.review.acme"), "GatedUnreachable"),
        (gated.PublishError("no stream captures gated.proposals.acme.x"), "GatedUnreachable"),
        (nats.errors.NoRespondersError(), "GatedUnreachable"),
        (nats.errors.ConnectionClosedError(), "GatedUnreachable"),
        (ConnectionRefusedError(111, "refused"), "GatedUnreachable"),
        (gated.GrantRefused("signature", "does not verify"), "ToolDenied"),
        (gated.GrantUseRefused("already used"), "ToolDenied"),
        (gated.InvalidToolSpec("bad"), "ToolDenied"),
    ],
)
def test_each_failure_is_its_typed_refusal(error: BaseException, want: str) -> None:
    r = refusal("restart_service", error)
    assert type(r).__name__ == want and isinstance(r, ToolRefused)
    assert str(r).startswith("gated did not approve restart_service: ") and str(r).endswith("The call was not made.")


def test_a_foreign_error_is_not_a_refusal() -> None:
    e = RuntimeError("the tool's own")
    assert refusal("t", e) is e
