"""CrewAI behind gated: a real Crew, Agent and Task whose LLM is a scripted
BaseLLM emitting the tool call (CrewAI's ReAct text), its tools behind
gated_tools, against a real `gated serve`. CrewAI runs in its own virtual
environment (make test-python-crewai): its pins clash with the other
frameworks'."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

import gated
from integrationkit import CATALOG, ProposalTap
from gated.integrations import Gate
from gated.integrations.crewai import gated_tools
from gatedkit import REPO, Gated, HoldGated, start_gated
from test_grants_e2e import AuditTap

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

ran: list[tuple[str, dict[str, Any]]] = []


@tool("restart_service")
def restart_service(device_id: int, service: str) -> str:
    """Restart a service on a device."""
    ran.append(("restart_service", {"device_id": device_id, "service": service}))
    return f"restarted {service} on device {device_id}"


@tool("drop_table")
def drop_table(table: str) -> str:
    """Drop a database table."""
    ran.append(("drop_table", {"table": table}))
    return f"dropped {table}"


@tool("delete_record")
def delete_record(zone: str, record: str) -> str:
    """Delete a DNS record."""
    ran.append(("delete_record", {"zone": zone, "record": record}))
    return f"deleted {record} from {zone}"


class ScriptedLLM(BaseLLM):
    """Calls one tool (CrewAI's ReAct text), then answers with what the
    tool said."""

    script_tool: str
    script_args: dict[str, Any]
    calls: int = 0

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.calls > 1:
            # The tool's result follows "Observation:" in the agent's
            # message that called it.
            said = [str(m.get("content", "")) for m in messages if m.get("role") == "assistant"]
            seen = said[-1].rsplit("Observation:", 1)[-1].strip()
            return f"Thought: I now know the final answer\nFinal Answer: done: {seen}"
        return f"Thought: I should call the tool\nAction: {self.script_tool}\nAction Input: {json.dumps(self.script_args)}"


def new_gate(client: gated.SyncClient, **kw: Any) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent="crew-agent"), catalog=CATALOG, framework="crewai", **kw)


def crew(gate: Gate, name: str, args: dict[str, Any], **kw: Any) -> Crew:
    llm = ScriptedLLM(model="scripted", script_tool=name, script_args=args)
    agent = Agent(
        role="operator", goal="keep services up", backstory="an SRE", llm=llm, max_iter=3,
        tools=gated_tools([restart_service, drop_table, delete_record], gate, **kw),
    )
    task = Task(description="nginx is down: fix it", expected_output="what was done", agent=agent)
    return Crew(agents=[agent], tasks=[task])


@pytest.fixture(scope="module")
def sync_client(holds: HoldGated) -> Any:
    c = gated.SyncClient.connect(holds.gated.nats_url)
    yield c
    c.close()


def pid_of(proposals: ProposalTap, action: str, key: str, value: Any) -> str:
    (pid,) = [i for i, p in proposals.by_id.items() if p["action"] == action and p["target"].get(key) == value]
    return pid


async def test_approved_runs_with_the_reviewed_arguments(
    sync_client: gated.SyncClient, tap: AuditTap, proposals: ProposalTap
) -> None:
    gate = new_gate(sync_client)
    ran.clear()
    out = await asyncio.to_thread(crew(gate, "restart_service", {"device_id": 9911, "service": "nginx"}).kickoff)
    assert ran == [("restart_service", {"device_id": 9911, "service": "nginx"})]
    assert str(out).startswith("done: restarted nginx on device 9911")
    pid = pid_of(proposals, "host_restart_service", "device_id", 9911)
    outcomes = await tap.wait_for("grant.outcome", pid, n=2)
    assert sorted(e["data"]["status"] for e in outcomes) == ["started", "succeeded"]
    assert proposals.by_id[pid]["arguments"] == ran[0][1]


async def test_rejected_does_not_run_and_the_agent_reads_why(sync_client: gated.SyncClient) -> None:
    gate = new_gate(sync_client)
    ran.clear()
    out = await asyncio.to_thread(crew(gate, "drop_table", {"table": "orders_2019"}).kickoff)
    assert ran == []
    assert str(out).startswith("done: gated did not approve drop_table: rejected at stage review")


async def held(sync_client: gated.SyncClient, holds: HoldGated, proposals: ProposalTap, record: str, *flags: str) -> str:
    gate = new_gate(sync_client)
    ran.clear()
    c = crew(gate, "delete_record", {"zone": "example.org", "record": record})
    run = asyncio.create_task(asyncio.to_thread(c.kickoff))
    while not [p for p in proposals.by_id.values() if p["target"].get("record") == record]:
        await asyncio.sleep(0.05)
    assert ran == [] and not run.done()  # suspended on the operator
    d = await asyncio.to_thread(holds.decide, pid_of(proposals, "dns_delete_record", "record", record), *flags)
    assert d.returncode == 0, d.stderr
    return str(await run)


async def test_held_waits_and_resumes_on_the_operators_approval(
    sync_client: gated.SyncClient, holds: HoldGated, proposals: ProposalTap
) -> None:
    out = await held(sync_client, holds, proposals, "crew-held-ok", "--approve", "--reason", "CHG-16")
    assert ran == [("delete_record", {"zone": "example.org", "record": "crew-held-ok"})]
    assert out.startswith("done: deleted crew-held-ok from example.org")


async def test_held_then_rejected_never_runs(sync_client: gated.SyncClient, holds: HoldGated, proposals: ProposalTap) -> None:
    out = await held(sync_client, holds, proposals, "crew-held-no", "--reject", "--reason", "not in a change window")
    assert ran == []
    assert out.startswith("done: gated did not approve delete_record: rejected at stage operator")


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_unreachable_or_slow_fails_closed(gated_bin: str, how: str) -> None:
    g = start_gated(gated_bin)
    c = gated.SyncClient.connect(g.nats_url)
    try:
        gate = new_gate(c, review_timeout=2)
        if how == "killed":
            g.kill_hard()
        else:
            os.kill(g.proc.pid, signal.SIGSTOP)
        ran.clear()
        out = await asyncio.to_thread(crew(gate, "restart_service", {"device_id": 9912, "service": "nginx"}).kickoff)
        assert ran == []
        assert str(out).startswith("done: gated did not approve restart_service") and "failing closed" in str(out)
    finally:
        if g.proc.poll() is None:
            os.kill(g.proc.pid, signal.SIGCONT)
        g.kill_hard()
        c.close()


def test_example(server: Gated) -> None:
    """examples/crewai-python against a gated with the default bundle, as
    its README runs it."""
    out = subprocess.run(
        [sys.executable, "-W", "ignore", str(REPO / "examples" / "crewai-python" / "agent.py"), "--nats-url", server.nats_url],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    assert lines[0].split()[:3] == ["restart_service", "ran", "restarted"], lines[0]
    assert lines[1].startswith("drop_table       refused  gated did not approve drop_table: rejected at stage review")
