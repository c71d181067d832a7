"""Python reviewer plugins reviewing through a real `gated serve`."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pluginkit import (
    VECTORS,
    Gated,
    gated_cli,
    proposal,
    review_by,
    start_gated,
    stop_gated,
    write_persona,
    write_plugin,
)


def test_review_with_a_brokered_tool_call(served: Gated) -> None:
    p = proposal("echo", summary="Decision: approve\nNotes: the restart is covered.")
    code, v = served.propose(p)
    r = review_by(v, "echo")
    assert r["plugin"] == "echo" and r["plugin_version"] == "1.0.0"
    assert r["decision"] == "approve", v
    # The reviewer read the proposal back through gated's get_proposal,
    # over the broker, and got what the agent published.
    want = hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()
    assert r["notes"] == f"get_proposal sha256 {want}"
    assert v["outcome"] == "approved" and code == 0, v
    calls = [e for e in served.audit("acme") if e.get("proposal_id") == p["id"] and e.get("event") == "tool.called"]
    assert any(e["data"].get("tool") == "get_proposal" and e["data"].get("plugin") == "echo" for e in calls), calls


@pytest.mark.parametrize("tool", ["run_shell", "get_sop_text"])
def test_a_tool_outside_the_bag_is_refused(served: Gated, tool: str) -> None:
    """The echo persona's bag holds get_proposal only: gated refuses any
    other tool, and the reviewer sees ToolDenied, never a result."""
    _, v = served.propose(proposal("echo", reason=f"call:{tool}", summary="Decision: reject\nNotes: no evidence"))
    r = review_by(v, "echo")
    assert r["notes"].startswith("ToolDenied: "), r["notes"]
    denied = [e for e in served.audit("acme") if e.get("proposal_id") == v["proposal_id"] and e.get("event") == "tool.denied"]
    assert [e["data"].get("tool") for e in denied] == [tool], denied


def test_sync_reviewer_with_required_gates(served: Gated) -> None:
    code, v = served.propose(proposal("syncsop"))
    r = review_by(v, "syncsop")
    assert r["decision"] == "approve" and not r.get("missing_gates"), r
    assert v["outcome"] == "approved" and code == 0


def _vector_cases() -> list[dict[str, Any]]:
    return list(json.loads((VECTORS / "decisions.json").read_text())["cases"])


def test_decision_vectors_reach_the_host_byte_for_byte(served: Gated) -> None:
    """Every text of test/vectors/decisions.json, returned by a Python
    reviewer with the structured decision approve, reaches gated byte for
    byte and is read as the vector says."""
    cases = _vector_cases()
    assert len(cases) > 50

    def one(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        _, v = served.propose(proposal("echo", summary=case["text"]))
        return case, v

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, cases))
    wrong = []
    for case, v in results:
        r = review_by(v, "echo")
        if r.get("decision_text", "") != case["text"]:
            wrong.append(f"{case['name']}: text {r.get('decision_text', '')!r}, sent {case['text']!r}")
        if r["decision"] != case["decision"]:
            wrong.append(f"{case['name']}: read as {r['decision']}, vector says {case['decision']}")
        if case["decision"] == "reject" and v["approved"]:
            wrong.append(f"{case['name']}: approved")
    assert not wrong, "\n".join(wrong)


def test_crash_mid_review_is_an_error_never_an_approval(served: Gated) -> None:
    code, v = served.propose(proposal("echo", reason="crash during the review", summary="Decision: approve"))
    assert v["outcome"] == "error" and v["approved"] is False and code == 3, json.dumps(v)[:3000]
    assert "exited" in v["reason"] or "echo" in v["reason"], v["reason"]
    # gated relaunches the plugin (after a backoff, since it died young)
    # and reviews go on; until then they are blocked.
    deadline = time.monotonic() + 60
    while True:
        code, v = served.propose(proposal("echo", summary="Decision: approve"))
        if v["outcome"] != "blocked" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert v["outcome"] == "approved", v


def test_pinned_hash_is_enforced(gated_bin: Path, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins.d"
    plugins.mkdir()
    write_plugin(plugins / "echo", "echo")
    assert gated_cli(gated_bin, "plugins", "lock", str(plugins)).returncode == 0
    assert gated_cli(gated_bin, "plugins", "verify", str(plugins)).returncode == 0
    # One byte more in the script: the lock no longer matches.
    with open(plugins / "echo", "a") as f:
        f.write("# changed\n")
    r = gated_cli(gated_bin, "plugins", "verify", str(plugins))
    assert r.returncode == 1 and "modified" in r.stdout and "do not match their pins" in r.stderr, r.stdout + r.stderr
    personas = tmp_path / "personas"
    write_persona(personas, "echo", "echo", [], [])
    with pytest.raises(AssertionError, match="exited"):
        g = start_gated(gated_bin, tmp_path, "--plugins-dir", str(plugins), "--personas", str(personas))
        stop_gated(g)
    log = (tmp_path / "gated.log").read_text()
    assert "does not match its pinned sha256" in log, log[-3000:]


def test_plugins_test_passes_on_a_sync_reviewer(gated_bin: Path, tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path / "syncsop", "sync-sop")
    r = gated_cli(gated_bin, "plugins", "test", str(plugin))
    assert r.returncode == 0 and r.stdout.count("PASS  ") == 9, r.stdout + r.stderr


@pytest.mark.parametrize("mode,failed", [
    # An error for every review is safe but useless.
    ("raising", {"approve", "reject", "refused tool", "deadline"}),
    ("wrong-type", {"approve", "reject", "refused tool", "deadline"}),
])
def test_plugins_test_fails_a_broken_reviewer(gated_bin: Path, tmp_path: Path, mode: str, failed: set[str]) -> None:
    plugin = write_plugin(tmp_path / mode, mode)
    r = gated_cli(gated_bin, "plugins", "test", "--format", "json", str(plugin))
    assert r.returncode == 1, r.stdout + r.stderr
    checks = {c["name"]: c["passed"] for c in json.loads(r.stdout)["checks"]}
    assert {n for n, ok in checks.items() if not ok} == failed, checks


def test_a_reviewer_that_prints_keeps_the_handshake(gated_bin: Path, tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path / "noisy", "noisy")
    r = gated_cli(gated_bin, "plugins", "test", str(plugin))
    assert r.returncode == 0 and r.stdout.count("PASS  ") == 9, r.stdout + r.stderr
