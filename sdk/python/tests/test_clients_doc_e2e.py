"""docs/CLIENTS.md's first Python proposal, run as it is written, right after
the README's demo against a fresh gated: it must be approved."""

from __future__ import annotations

import re
import subprocess
import sys

from gatedkit import REPO, start_gated


def first_python_example() -> str:
    """The first python block of the Python section of docs/CLIENTS.md."""
    doc = (REPO / "docs" / "CLIENTS.md").read_text(encoding="utf-8")
    section = doc.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"^### First proposal\n.*?^```python\n(.*?)^```$", section, re.S | re.M)
    assert m, "docs/CLIENTS.md has no python block under ## Python, ### First proposal"
    return m.group(1)


def test_first_proposal_after_the_demo(gated_bin: str) -> None:
    code = first_python_example()
    default_url = "nats://127.0.0.1:4222"
    assert code.count(default_url) == 1, code
    g = start_gated(gated_bin)
    try:
        demo = subprocess.run(
            [gated_bin, "propose", "-f", "examples/proposals/approved.json", "--nats-url", g.nats_url],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        out = subprocess.run(
            [sys.executable, "-c", code.replace(default_url, g.nats_url)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout == "approved by reviewer\n", out.stdout + out.stderr
    finally:
        g.kill_hard()
