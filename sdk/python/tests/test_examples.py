"""examples/fleet-python against a real gated, as its README runs it."""

from __future__ import annotations

import subprocess
import sys

from gatedkit import REPO, Gated


def test_fleet_python_example(server: Gated) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "fleet-python" / "agent.py"), "--nats-url", server.nats_url, "--wait", "60"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout
    assert lines[0].split()[:2] == ["host_list_services", "ran"]
    assert lines[1].split()[:2] == ["host_restart_service", "ran"]
    assert lines[2].split()[:2] == ["host_restart_service", "rejected"]
    assert "no_skip_review" in lines[2]
