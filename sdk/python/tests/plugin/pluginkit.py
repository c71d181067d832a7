"""Fixtures that start the real thing: gated built from this repository,
`gated serve` with its embedded NATS server, and reviewer plugins in
Python as the real plugin processes gated launches."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
VECTORS = REPO / "test" / "vectors"


@pytest.fixture(scope="session")
def gated_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gated, built once per test session from the repository (or $GATED_BIN)."""
    if os.environ.get("GATED_BIN"):
        return Path(os.environ["GATED_BIN"])
    out = tmp_path_factory.mktemp("bin") / "gated"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/gated"], cwd=REPO, check=True)
    return out


def write_plugin(path: Path, mode: str) -> Path:
    """A plugin executable: a script whose shebang names this interpreter
    (the virtual environment with gated installed) and that runs one of
    the reviewers of modes.py."""
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import modes\n"
        f"modes.run({mode!r})\n"
    )
    path.chmod(0o755)
    return path


def gated_cli(gated_bin: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(gated_bin), *args], capture_output=True, text=True, timeout=timeout, env=env)


def venv_env() -> dict[str, str]:
    """This environment with the virtual environment's bin first on PATH,
    as after `source .venv/bin/activate`: a plugin whose shebang is
    `/usr/bin/env python3` then runs with gated installed."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


@dataclass
class Gated:
    """A running `gated serve`."""

    bin: Path
    proc: subprocess.Popen[str]
    nats_url: str
    log: Path

    def propose(self, proposal: dict[str, Any], wait: str = "60s") -> tuple[int, dict[str, Any]]:
        """Publish a proposal with gated's own fleet client (`gated
        propose`) and return its exit status and verdict."""
        r = subprocess.run(
            [str(self.bin), "propose", "--nats-url", self.nats_url, "--wait", wait, "-f", "-"],
            input=json.dumps(proposal), capture_output=True, text=True, timeout=120,
        )
        try:
            return r.returncode, json.loads(r.stdout)
        except ValueError:
            raise AssertionError(f"no verdict: exit {r.returncode}\n{r.stdout}{r.stderr}") from None

    def audit(self, tenant: str) -> list[dict[str, Any]]:
        r = gated_cli(self.bin, "audit", "query", "--nats-url", self.nats_url, "--tenant", tenant, "--json", "--limit", "0")
        assert r.returncode == 0, r.stderr
        return [json.loads(line)["record"] for line in r.stdout.splitlines() if line.strip()]


UNLIMITED = "{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}"


def unlimited_budgets(directory: str, args: tuple[str, ...]) -> list[str]:
    """The arguments of a budgets file that lifts every limit, unless the
    test names its own: these tests review more proposals from one agent
    than the built-in budgets allow, and test plugins, not budgets."""
    if any(a.startswith("--budgets") for a in args):
        return []
    path = Path(directory) / "budgets.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"defaults:\n  tenant: {UNLIMITED}\n  agent: {UNLIMITED}\n")
    return ["--budgets", str(path)]


def start_gated(gated_bin: Path, workdir: Path, *args: str, env: dict[str, str] | None = None) -> Gated:
    """Start `gated serve` on an embedded NATS server on a free port and
    wait until it says it is ready."""
    log = workdir / "gated.log"
    proc = subprocess.Popen(
        [str(gated_bin), "serve", "--data-dir", str(workdir / "data"), "--nats-listen", "127.0.0.1:0",
         "--log-format", "json", "--review-timeout", "30s", *unlimited_budgets(str(workdir), args), *args],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), text=True, env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if '"gated is ready"' in line:
                return Gated(gated_bin, proc, json.loads(line)["nats"], log)
        if proc.poll() is not None:
            raise AssertionError(f"gated serve exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"gated serve not ready:\n{log.read_text()[-4000:]}")


def stop_gated(g: Gated) -> None:
    if g.proc.poll() is None:
        g.proc.send_signal(signal.SIGTERM)
        try:
            g.proc.wait(30)
        except subprocess.TimeoutExpired:
            g.proc.kill()
            g.proc.wait()


PERSONA = """---
name: {name}
description: Reviews with a Python plugin in the tests.
when_to_use: Never routed; proposals name it.
permission_mode: read-only
plugin: {plugin}
max_turns: 1
tools:
{tools}
required_gates:
{gates}
---
Review.
"""


def write_persona(d: Path, name: str, plugin: str, tools: list[str], gates: list[str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    fmt = lambda xs: "".join(f"  - {x}\n" for x in xs) or "  []\n"  # noqa: E731
    text = PERSONA.format(name=name, plugin=plugin, tools=fmt(tools).rstrip("\n"), gates=fmt(gates).rstrip("\n"))
    text = text.replace("tools:\n  []", "tools: []").replace("required_gates:\n  []", "required_gates: []")
    (d / f"{name}.md").write_text(text)


@pytest.fixture(scope="module")
def served(gated_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gated]:
    """gated serve with two Python plugins pinned in a plugin directory:
    `echo` (persona echo, with get_proposal) and `syncsop` (persona
    syncsop, with get_sop_text and the reviewer's three gates)."""
    work = tmp_path_factory.mktemp("served")
    plugins = work / "plugins.d"
    plugins.mkdir()
    write_plugin(plugins / "echo", "echo")
    write_plugin(plugins / "syncsop", "sync-sop")
    r = gated_cli(gated_bin, "plugins", "lock", str(plugins))
    assert r.returncode == 0, r.stdout + r.stderr
    personas = work / "personas"
    write_persona(personas, "echo", "echo", ["get_proposal"], [])
    write_persona(personas, "syncsop", "syncsop", ["get_sop_text"],
                  ["sop_covers", "no_parallel_operation", "rollback_known"])
    g = start_gated(gated_bin, work, "--plugins-dir", str(plugins), "--personas", str(personas))
    yield g
    stop_gated(g)


_seq = iter(range(1, 1 << 30))


def proposal(reviewer: str, *, reason: str = "health checks fail", summary: str = "", tenant: str = "acme") -> dict[str, Any]:
    """A restart the default SOP catalog covers, on a device of its own
    (so no cooldown or dedupe links two tests), for persona reviewer beside
    the routed one."""
    n = next(_seq)
    p: dict[str, Any] = {
        "v": 1, "id": f"py-{os.getpid()}-{n}", "tenant": tenant, "action": "host_restart_service",
        "class": "write", "target": {"device_id": f"dev-{os.getpid()}-{n}", "service": "nginx"},
        "reason": reason, "blast_radius": "single_device", "requested_by": {"agent": "ops-agent"},
        "reviewer": reviewer,
    }
    if summary:
        p["context_summary"] = summary
    return p


def review_by(verdict: dict[str, Any], persona: str) -> dict[str, Any]:
    for r in verdict.get("reviews") or []:
        if r.get("persona") == persona:
            return r
    raise AssertionError(f"no review by {persona}: {json.dumps(verdict)[:2000]}")
