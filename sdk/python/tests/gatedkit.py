"""Test harness: the shared vectors, and a real `gated serve` with its
embedded NATS server, built once per test session from this repository."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
VECTORS = REPO / "test" / "vectors"


def vectors(name: str) -> Any:
    """One file of test/vectors, read where it lives."""
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


_handed_out: set[int] = set()


def free_addr() -> str:
    """A loopback address nobody listens on right now and not returned before
    in this process: picked one after the other, the addresses of NATS and of
    gated's HTTP listener would otherwise be the same whenever the kernel
    hands the first port out again."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return f"127.0.0.1:{port}"
    raise RuntimeError("no loopback port that was not handed out before")


@pytest.fixture(scope="session")
def gated_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The gated binary: $GATED_BIN, or built from the repository."""
    if os.environ.get("GATED_BIN"):
        return os.environ["GATED_BIN"]
    out = tmp_path_factory.mktemp("bin") / "gated"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/gated"], cwd=REPO, check=True)
    return str(out)


@dataclass
class Gated:
    """A running `gated serve`."""

    proc: subprocess.Popen[bytes]
    nats_url: str
    http_url: str
    log_path: Path
    data_dir: str
    extra: list[str] = field(default_factory=list)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def plugin_pids(self) -> list[int]:
        """The reviewer plugin processes gated runs (its children)."""
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            # A plugin that exited but is not reaped yet is not a plugin.
            if int(ppid) == self.proc.pid and state not in ("Z", "X"):
                pids.append(int(d.name))
        return pids

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def kill_hard(self) -> None:
        """SIGKILL gated and every plugin it started."""
        kids = self.plugin_pids()
        self.stop()
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


UNLIMITED = "{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}"


def unlimited_budgets(directory: str, extra: tuple[str, ...]) -> list[str]:
    """The arguments of a budgets file that lifts every limit, unless the
    test names its own: these tests send far more proposals from one agent
    than the built-in budgets allow, and test other things than budgets."""
    if any(a.startswith("--budgets") for a in extra):
        return []
    path = Path(directory) / "budgets.yaml"
    path.write_text(f"defaults:\n  tenant: {UNLIMITED}\n  agent: {UNLIMITED}\n")
    return ["--budgets", str(path)]


def start_gated(gated_bin: str, *extra: str) -> Gated:
    """Start gated with its embedded NATS on free ports and wait for /readyz."""
    nats_addr, http_addr = free_addr(), free_addr()
    data_dir = tempfile.mkdtemp(prefix="gated-py-")
    log_path = Path(data_dir) / "gated.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    args = [
        gated_bin, "serve", "--data-dir", data_dir, "--nats-listen", nats_addr, "--http", http_addr,
        "--personas", str(REPO / "examples" / "personas"), "--log-format", "json",
        *unlimited_budgets(data_dir, extra), *extra,
    ]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    log.close()
    g = Gated(proc, f"nats://{nats_addr}", f"http://{http_addr}", log_path, data_dir, list(extra))
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(g.http_url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return g
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"gated exited before it was ready ({proc.returncode}):\n{g.logs()}")
        if time.monotonic() > deadline:
            g.kill_hard()
            raise RuntimeError(f"gated not ready after 60s:\n{g.logs()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(gated_bin: str) -> Iterator[Gated]:
    """One gated for the tests of a module."""
    g = start_gated(gated_bin)
    yield g
    g.kill_hard()


def example_proposal(name: str, **changes: Any) -> dict[str, Any]:
    """One of examples/proposals as a dict, with fields replaced."""
    doc: dict[str, Any] = json.loads((REPO / "examples" / "proposals" / name).read_text())
    doc.update(changes)
    return doc


HOLD_POLICY = """package gated

hold contains {"rule": "hold_cache_flush", "why": "a cache flush empties every edge", "deadline": "3s"} if {
\tstartswith(input.proposal.action, "dns_flush_")
}
"""
"""A policy file a tenant adds: cache flushes are held for an operator for
three seconds only."""


@dataclass
class HoldGated:
    """A `gated serve` that holds acme's dns_* actions for an operator (the
    default bundle's hold_listed_action, for an hour) and dns_flush_* ones
    for three seconds, with one operator, alice, for acme."""

    gated: Gated
    bin: str
    seed: str

    def decide(self, id: str, *flags: str, operator: str = "alice") -> subprocess.CompletedProcess[str]:
        """Sign and send an operator decision with `gated operator decide`."""
        return subprocess.run(
            [self.bin, "operator", "decide", "acme", id, "--operator", operator, "--seed-file", self.seed,
             "--nats-url", self.gated.nats_url, *flags],
            capture_output=True, text=True, timeout=60, check=False,
        )


def start_hold_gated(gated_bin: str, dir: Path) -> HoldGated:
    """Start gated holding actions for operators; alice's seed is made with
    `gated operator keygen` in dir."""
    seed = dir / "alice.seed"
    out = subprocess.run(
        [gated_bin, "operator", "keygen", "--out", str(seed), "--id", "alice", "--tenant", "acme"],
        capture_output=True, text=True, check=True,
    ).stdout
    operators = dir / "operators.yaml"
    operators.write_text(out[out.index("operators:"):])
    data = dir / "holds.yaml"
    data.write_text('gated:\n  config:\n    operator_holds:\n      actions: {acme: ["dns_*"]}\n')
    policies = dir / "policies"
    policies.mkdir()
    (policies / "holds_mine.rego").write_text(HOLD_POLICY)
    g = start_gated(gated_bin, "--operators", str(operators), "--policy-data", str(data), "--policies", str(policies))
    return HoldGated(g, gated_bin, str(seed))


def dns_proposal(id: str, action: str = "dns_delete_record") -> dict[str, Any]:
    """A write to a DNS zone, which acme's policy holds for an operator."""
    return {
        "id": id, "tenant": "acme", "kind": "action", "action": action, "class": "write",
        "blast_radius": "single_device", "target": {"zone": "example.org", "record": id},
        "reason": "retire a record", "requested_by": {"agent": "dns-bot", "session": "s-1"},
    }
