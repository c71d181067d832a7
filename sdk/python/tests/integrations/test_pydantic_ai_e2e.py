"""Pydantic AI behind gated: a real Agent whose model is Pydantic AI's
FunctionModel emitting the tool calls, its tools in a FunctionToolset
wrapped by GatedToolset, against a real `gated serve`."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, FunctionToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import gated
from integrationkit import CATALOG, ProposalTap
from gated.integrations import Gate, ToolCall
from gated.integrations.pydantic_ai import GatedToolset
from gatedkit import HoldGated, start_gated
from test_grants_e2e import AuditTap

ran: list[tuple[str, dict[str, Any]]] = []


def restart_service(device_id: int, service: str) -> str:
    """Restart a service on a device."""
    ran.append(("restart_service", {"device_id": device_id, "service": service}))
    return f"restarted {service} on device {device_id}"


def drop_table(table: str) -> str:
    """Drop a database table."""
    ran.append(("drop_table", {"table": table}))
    return f"dropped {table}"


def delete_record(zone: str, record: str) -> str:
    """Delete a DNS record."""
    ran.append(("delete_record", {"zone": zone, "record": record}))
    return f"deleted {record} from {zone}"


def new_gate(client: gated.Client, **kw: Any) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent="pai-agent"), catalog=CATALOG, framework="pydantic-ai", **kw)


def agent(gate: Gate, name: str, args: dict[str, Any], call_id: str) -> Agent[None, Any]:
    """An agent whose model calls one tool, then answers with what the tool
    said."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {returns[-1].model_response_str(wrap_if_error=False)}")])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])

    tools = GatedToolset(FunctionToolset([restart_service, drop_table, delete_record]), gate)
    return Agent(FunctionModel(model), toolsets=[tools], output_type=[str, DeferredToolRequests])


async def test_approved_runs_with_the_reviewed_arguments(
    client: gated.Client, tap: AuditTap, proposals: ProposalTap
) -> None:
    gate = new_gate(client)
    # Pydantic AI validates a call against the tool's schema before a
    # toolset sees it: a reason argument the tool does not declare is
    # refused there, so the reason is the gate's sentence.
    args = {"device_id": 9801, "service": "nginx"}
    ran.clear()
    result = await agent(gate, "restart_service", args, "call-pai-1").run("go")
    assert ran == [("restart_service", {"device_id": 9801, "service": "nginx"})]
    assert result.output == "done: restarted nginx on device 9801"
    pid = gate.proposal_id(ToolCall("restart_service", {}, "call-pai-1"))
    outcomes = await tap.wait_for("grant.outcome", pid, n=2)
    assert sorted(e["data"]["status"] for e in outcomes) == ["started", "succeeded"]
    p = proposals.by_id[pid]
    assert p["arguments"] == ran[0][1] and p["reason"] == "pydantic-ai agent pai-agent calls tool restart_service"
    assert p["target"] == {"device_id": 9801, "service": "nginx", "tags": ["production"]}


async def test_rejected_does_not_run_and_the_model_reads_why(client: gated.Client) -> None:
    gate = new_gate(client)
    ran.clear()
    result = await agent(gate, "drop_table", {"table": "orders_2019"}, "call-pai-2").run("go")
    assert ran == []
    assert result.output.startswith("done: gated did not approve drop_table: rejected at stage review")
    assert result.output.endswith("The call was not made.")


async def held_run(client: gated.Client, record: str, call_id: str) -> tuple[Agent[None, Any], Any, str]:
    gate = new_gate(client)
    ran.clear()
    a = agent(gate, "delete_record", {"zone": "example.org", "record": record}, call_id)
    result = await a.run("go")
    assert isinstance(result.output, DeferredToolRequests) and ran == []
    (part,) = result.output.approvals
    pid = gate.proposal_id(ToolCall("delete_record", {}, call_id))
    assert part.tool_call_id == call_id and result.output.metadata[call_id]["proposal_id"] == pid
    return a, result, pid


async def test_held_defers_and_resumes_on_the_operators_approval(client: gated.Client, holds: HoldGated) -> None:
    a, result, pid = await held_run(client, "pai-held-ok", "call-pai-3")
    d = holds.decide(pid, "--approve", "--reason", "CHG-14")
    assert d.returncode == 0, d.stderr
    again = await a.run(
        message_history=result.all_messages(), deferred_tool_results=DeferredToolResults(approvals={"call-pai-3": True})
    )
    assert ran == [("delete_record", {"zone": "example.org", "record": "pai-held-ok"})]
    assert again.output == "done: deleted pai-held-ok from example.org"


async def test_held_then_rejected_never_runs(client: gated.Client, holds: HoldGated) -> None:
    a, result, pid = await held_run(client, "pai-held-no", "call-pai-4")
    d = holds.decide(pid, "--reject", "--reason", "not in a change window")
    assert d.returncode == 0, d.stderr
    again = await a.run(
        message_history=result.all_messages(), deferred_tool_results=DeferredToolResults(approvals={"call-pai-4": True})
    )
    assert ran == []
    assert again.output.startswith("done: gated did not approve delete_record: rejected at stage operator")


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
        args = {"device_id": 9802, "service": "nginx"}
        result = await agent(gate, "restart_service", args, f"call-pai-{how}").run("go")
        assert ran == []
        assert result.output.startswith("done: gated did not approve restart_service") and "failing closed" in result.output
    finally:
        if g.proc.poll() is None:
            os.kill(g.proc.pid, signal.SIGCONT)
        g.kill_hard()
        await c.close()
