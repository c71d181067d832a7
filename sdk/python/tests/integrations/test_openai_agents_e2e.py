"""The OpenAI Agents SDK behind gated: a real Agent and Runner whose model
is the SDK's ScriptedModel emitting the tool calls, its function tools
behind gated_tools, against a real `gated serve`."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

import gated
from integrationkit import CATALOG, ProposalTap
from gated.integrations import Gate, ToolCall
from gated.integrations.openai_agents import gated_tools
from gatedkit import HoldGated, start_gated
from test_grants_e2e import AuditTap

ran: list[tuple[str, dict[str, Any]]] = []


@function_tool
def restart_service(device_id: int, service: str) -> str:
    """Restart a service on a device."""
    ran.append(("restart_service", {"device_id": device_id, "service": service}))
    return f"restarted {service} on device {device_id}"


@function_tool
def drop_table(table: str) -> str:
    """Drop a database table."""
    ran.append(("drop_table", {"table": table}))
    return f"dropped {table}"


@function_tool
def delete_record(zone: str, record: str) -> str:
    """Delete a DNS record."""
    ran.append(("delete_record", {"zone": zone, "record": record}))
    return f"deleted {record} from {zone}"


def new_gate(client: gated.Client, **kw: Any) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent="oa-agent"), catalog=CATALOG, framework="openai-agents", **kw)


def agent(gate: Gate, name: str, args: dict[str, Any], call_id: str) -> Agent[Any]:
    """An agent whose model calls one tool, then answers."""
    model = ScriptedModel([[function_call(name, args, call_id=call_id)], [assistant_message("done")]])
    return Agent(name="ops", model=model, tools=gated_tools([restart_service, drop_table, delete_record], gate))


def tool_output(result: Any) -> str:
    (out,) = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    return str(out)


async def test_approved_runs_with_the_reviewed_arguments(
    client: gated.Client, tap: AuditTap, proposals: ProposalTap
) -> None:
    gate = new_gate(client)
    args = {"device_id": 9601, "service": "nginx", "_reason": "nginx on device 9601 stopped answering health checks"}
    ran.clear()
    result = await Runner.run(agent(gate, "restart_service", args, "call-oa-1"), "go")
    assert ran == [("restart_service", {"device_id": 9601, "service": "nginx"})]
    assert tool_output(result) == "restarted nginx on device 9601"
    assert result.final_output == "done"
    pid = gate.proposal_id(ToolCall("restart_service", {}, "call-oa-1"))
    v = await client.verdict("acme", pid)
    assert v.is_approval and v.grant
    await tap.wait_for("grant.used", pid)
    outcomes = await tap.wait_for("grant.outcome", pid, n=2)
    assert sorted(e["data"]["status"] for e in outcomes) == ["started", "succeeded"]
    # What ran is what was proposed: the arguments less the reason, which
    # went to the reviewer; the catalog's action and target.
    p = proposals.by_id[pid]
    assert p["arguments"] == ran[0][1] and p["action"] == "host_restart_service"
    assert p["target"] == {"device_id": 9601, "service": "nginx", "tags": ["production"]}
    assert p["reason"] == args["_reason"] and p["class"] == "write"
    # Proposed twice (needs_approval, then the invocation), used once.
    assert len([e for e in tap.events if e.get("event") == "grant.used" and e.get("proposal_id") == pid]) == 1


async def test_rejected_does_not_run_and_the_model_reads_why(client: gated.Client) -> None:
    gate = new_gate(client)
    ran.clear()
    result = await Runner.run(agent(gate, "drop_table", {"table": "orders_2019"}, "call-oa-2"), "go")
    assert ran == []
    out = tool_output(result)
    assert out.startswith("gated did not approve drop_table: rejected at stage review")
    assert out.endswith("The call was not made.")
    assert result.final_output == "done"


async def held_run(client: gated.Client, record: str, call_id: str) -> tuple[Agent[Any], Any, str]:
    gate = new_gate(client)
    ran.clear()
    a = agent(gate, "delete_record", {"zone": "example.org", "record": record}, call_id)
    result = await Runner.run(a, "go")
    (item,) = result.interruptions
    assert ran == [] and item.name == "delete_record"
    pid = gate.proposal_id(ToolCall("delete_record", {}, call_id))
    v = await client.verdict("acme", pid)
    assert v.awaiting_operator is not None and not v.is_final
    return a, result, pid


async def test_held_pauses_and_resumes_on_the_operators_approval(client: gated.Client, holds: HoldGated) -> None:
    a, result, pid = await held_run(client, "oa-held-ok", "call-oa-3")
    d = holds.decide(pid, "--approve", "--reason", "CHG-12")
    assert d.returncode == 0, d.stderr
    state = result.to_state()
    (item,) = result.interruptions
    state.approve(item)
    result = await Runner.run(a, state)
    assert ran == [("delete_record", {"zone": "example.org", "record": "oa-held-ok"})]
    assert tool_output(result) == "deleted oa-held-ok from example.org"
    v = await client.verdict("acme", pid)
    assert v.is_approval and v.operator_decision is not None and v.operator_decision.id == "alice"


async def test_held_then_rejected_never_runs(client: gated.Client, holds: HoldGated) -> None:
    a, result, pid = await held_run(client, "oa-held-no", "call-oa-4")
    d = holds.decide(pid, "--reject", "--reason", "not in a change window")
    assert d.returncode == 0, d.stderr
    # Approved in the run state: that only resumes the run.
    state = result.to_state()
    (item,) = result.interruptions
    state.approve(item)
    result = await Runner.run(a, state)
    assert ran == []
    out = tool_output(result)
    assert out.startswith("gated did not approve delete_record: rejected at stage operator")
    assert "not in a change window" in out


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_unreachable_or_slow_fails_closed(gated_bin: str, how: str) -> None:
    g = start_gated(gated_bin)
    c = await gated.Client.connect(g.nats_url)
    try:
        gate = new_gate(c, review_timeout=2)
        if how == "killed":
            g.kill_hard()
        else:
            os.kill(g.proc.pid, signal.SIGSTOP)
        ran.clear()
        args = {"device_id": 9602, "service": "nginx"}
        result = await Runner.run(agent(gate, "restart_service", args, f"call-oa-{how}"), "go")
        assert ran == []
        out = tool_output(result)
        assert out.startswith("gated did not approve restart_service") and "failing closed" in out
    finally:
        if g.proc.poll() is None:
            os.kill(g.proc.pid, signal.SIGCONT)
        g.kill_hard()
        await c.close()
