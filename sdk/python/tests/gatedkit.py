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


def free_addr() -> str:
    """A loopback address nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


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


def start_gated(gated_bin: str, *extra: str) -> Gated:
    """Start gated with its embedded NATS on free ports and wait for /readyz."""
    nats_addr, http_addr = free_addr(), free_addr()
    data_dir = tempfile.mkdtemp(prefix="gated-py-")
    log_path = Path(data_dir) / "gated.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    args = [
        gated_bin, "serve", "--data-dir", data_dir, "--nats-listen", nats_addr, "--http", http_addr,
        "--personas", str(REPO / "examples" / "personas"), "--log-format", "json", *extra,
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
