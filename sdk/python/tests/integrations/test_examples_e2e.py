"""examples/*-python, the framework integrations' examples, against a real
gated with the default bundle, as their READMEs run them: the restart runs,
the table drop is refused and does not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gatedkit import REPO, Gated


@pytest.mark.parametrize("example", ["langgraph-python", "openai-agents-python", "pydantic-ai-python", "adk-python"])
def test_example(server: Gated, example: str) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / example / "agent.py"), "--nats-url", server.nats_url],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    assert lines[0].split()[:3] == ["restart_service", "ran", "restarted"], lines[0]
    assert lines[1].split()[:2] == ["drop_table", "refused"], lines[1]
    assert "gated did not approve drop_table: rejected at stage review" in lines[1]
