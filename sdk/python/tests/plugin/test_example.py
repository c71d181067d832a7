"""examples/plugin-python, as its README runs it."""

from __future__ import annotations

import shutil
from pathlib import Path

from pluginkit import REPO, gated_cli, proposal, review_by, start_gated, stop_gated, venv_env

EXAMPLE = REPO / "examples" / "plugin-python" / "incident.py"


def test_example_is_short() -> None:
    assert len(EXAMPLE.read_text().splitlines()) <= 60


def test_example_plugin(gated_bin: Path, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins.d"
    plugins.mkdir()
    shutil.copy(EXAMPLE, plugins / "incident")
    (plugins / "incident").chmod(0o755)
    env = venv_env()

    r = gated_cli(gated_bin, "plugins", "test", str(plugins / "incident"), env=env)
    assert r.returncode == 0 and r.stdout.count("PASS  ") == 9, r.stdout + r.stderr
    r = gated_cli(gated_bin, "plugins", "lock", str(plugins), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "incident" in (plugins / "gated-plugins.lock").read_text()

    g = start_gated(gated_bin, tmp_path, "--plugins-dir", str(plugins), "--personas", str(REPO / "examples" / "personas"), env=env)
    try:
        p = proposal("incident")
        p["incident_id"] = "INC-7"
        code, v = g.propose(p)
        r_inc = review_by(v, "incident")
        assert r_inc["plugin"] == "incident" and r_inc["decision"] == "approve", v
        assert v["outcome"] == "approved" and code == 0, v
        tools = sorted(f'{e["data"].get("plugin")}/{e["data"].get("tool")}' for e in g.audit("acme")
                       if e.get("proposal_id") == p["id"] and e.get("event") == "tool.called")
        assert tools == ["incident/get_sop_text", "sop/get_sop_text"], tools

        # Without an incident the required gate incident_linked fails.
        code, v = g.propose(proposal("incident"))
        assert v["outcome"] == "rejected" and code == 3, v
        assert review_by(v, "incident")["decision"] == "reject"
    finally:
        stop_gated(g)
