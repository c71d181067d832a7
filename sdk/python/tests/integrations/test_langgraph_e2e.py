"""LangGraph behind gated: a real StateGraph whose model is LangChain's
fake chat model emitting the tool calls, its ToolNode behind
gated_tool_node, against a real `gated serve`."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

import gated
from integrationkit import CATALOG, ProposalTap
from gated.integrations import Gate, GatedUnreachable, ToolCall, ToolDenied, ToolHeld, ToolRefused, ToolTimedOut
from gated.integrations.langgraph import gated_tool_node
from gatedkit import HoldGated, start_gated
from test_grants_e2e import AuditTap

ran: list[tuple[str, dict[str, Any]]] = []


@tool
def restart_service(device_id: int, service: str) -> str:
    """Restart a service on a device."""
    ran.append(("restart_service", {"device_id": device_id, "service": service}))
    return f"restarted {service} on device {device_id}"


@tool
def drop_table(table: str) -> str:
    """Drop a database table."""
    ran.append(("drop_table", {"table": table}))
    return f"dropped {table}"


@tool
def delete_record(zone: str, record: str) -> str:
    """Delete a DNS record."""
    ran.append(("delete_record", {"zone": zone, "record": record}))
    return f"deleted {record} from {zone}"


TOOLS = [restart_service, drop_table, delete_record]


def agent_graph(gate: Gate, name: str, args: dict[str, Any], call_id: str) -> Any:
    """A ReAct loop: the fake model calls one tool, then answers."""
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]),
            AIMessage(content="done"),
        ]
    )

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    b = StateGraph(MessagesState)
    b.add_node("agent", agent)
    b.add_node("tools", gated_tool_node(TOOLS, gate))
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition)
    b.add_edge("tools", "agent")
    return b.compile(checkpointer=InMemorySaver())


def new_gate(client: gated.Client, **kw: Any) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent="lg-agent"), catalog=CATALOG, framework="langgraph", **kw)


def tool_message(result: dict[str, Any]) -> ToolMessage:
    (m,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return m


async def run(graph: Any, thread: str, value: Any = None) -> dict[str, Any]:
    cfg = {"configurable": {"thread_id": thread}}
    inp: Any = {"messages": [HumanMessage("go")]} if value is None else Command(resume=value)
    out: dict[str, Any] = await graph.ainvoke(inp, cfg)
    return out


def proposal_id(gate: Gate, name: str, call_id: str) -> str:
    return gate.proposal_id(ToolCall(name, {}, call_id))


async def test_approved_runs_with_the_reviewed_arguments(
    client: gated.Client, tap: AuditTap, proposals: ProposalTap
) -> None:
    gate = new_gate(client)
    args = {"device_id": 9501, "service": "nginx", "_reason": "nginx on device 9501 stopped answering health checks"}
    ran.clear()
    out = await run(agent_graph(gate, "restart_service", args, "call-lg-1"), "t-approve")
    assert ran == [("restart_service", {"device_id": 9501, "service": "nginx"})]
    m = tool_message(out)
    assert m.status == "success" and m.content == "restarted nginx on device 9501"
    assert out["messages"][-1].content == "done"
    pid = proposal_id(gate, "restart_service", "call-lg-1")
    v = await client.verdict("acme", pid)
    assert v.is_approval and v.grant
    await tap.wait_for("grant.used", pid)
    outcomes = await tap.wait_for("grant.outcome", pid, n=2)
    assert sorted(e["data"]["status"] for e in outcomes) == ["started", "succeeded"]
    # What ran is what was proposed: the arguments less the reason, which
    # went to the reviewer; the catalog's action and target.
    p = proposals.by_id[pid]
    assert p["arguments"] == ran[0][1] and p["action"] == "host_restart_service"
    assert p["target"] == {"device_id": 9501, "service": "nginx", "tags": ["production"]}
    assert p["reason"] == args["_reason"] and p["class"] == "write"


async def test_rejected_does_not_run_and_the_model_reads_why(client: gated.Client) -> None:
    gate = new_gate(client)
    ran.clear()
    out = await run(agent_graph(gate, "drop_table", {"table": "orders_2019"}, "call-lg-2"), "t-reject")
    assert ran == []
    m = tool_message(out)
    assert m.status == "error" and isinstance(m.artifact, ToolDenied)
    assert str(m.content).startswith("gated did not approve drop_table: rejected at stage review")
    assert str(m.content).endswith("The call was not made.")
    assert out["messages"][-1].content == "done"


async def held_run(client: gated.Client, thread: str, call_id: str) -> tuple[Any, dict[str, Any], Gate]:
    gate = new_gate(client)
    ran.clear()
    g = agent_graph(gate, "delete_record", {"zone": "example.org", "record": thread}, call_id)
    out = await run(g, thread)
    (intr,) = out["__interrupt__"]
    assert intr.value["gated"] == "held" and intr.value["rule"] == "hold_listed_action"
    assert intr.value["proposal_id"] == proposal_id(gate, "delete_record", call_id)
    assert ran == []
    return g, intr.value, gate


async def test_held_interrupts_and_resumes_on_the_operators_approval(client: gated.Client, holds: HoldGated) -> None:
    g, held, _ = await held_run(client, "t-held-ok", "call-lg-3")
    d = holds.decide(held["proposal_id"], "--approve", "--reason", "CHG-11")
    assert d.returncode == 0, d.stderr
    out = await run(g, "t-held-ok", "the operator decided")
    assert ran == [("delete_record", {"zone": "example.org", "record": "t-held-ok"})]
    assert tool_message(out).content == "deleted t-held-ok from example.org"
    v = await client.verdict("acme", held["proposal_id"])
    assert v.is_approval and v.operator_decision is not None and v.operator_decision.id == "alice"


async def test_held_then_rejected_never_runs(client: gated.Client, holds: HoldGated) -> None:
    g, held, _ = await held_run(client, "t-held-no", "call-lg-4")
    d = holds.decide(held["proposal_id"], "--reject", "--reason", "not in a change window")
    assert d.returncode == 0, d.stderr
    # The resume value says "approve": it decides nothing.
    out = await run(g, "t-held-no", "approve")
    assert ran == []
    m = tool_message(out)
    assert isinstance(m.artifact, ToolDenied) and "not in a change window" in str(m.content)


async def test_held_is_a_typed_error_outside_a_graph(client: gated.Client) -> None:
    gate = new_gate(client)
    with pytest.raises(ToolHeld) as e:
        await gate.run(ToolCall("delete_record", {"zone": "example.org", "record": "r-core"}, "call-core-1"), lambda a: a)
    assert e.value.verdict is not None and e.value.verdict.awaiting_operator is not None


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
        args = {"device_id": 9502, "service": "nginx"}
        out = await run(agent_graph(gate, "restart_service", args, f"call-lg-{how}"), f"t-{how}")
        assert ran == []
        m = tool_message(out)
        # Frozen, gated says nothing: the wait ends. Killed, the connection
        # is lost, or the wait ends first.
        assert isinstance(m.artifact, ToolTimedOut if how == "frozen" else (GatedUnreachable, ToolTimedOut)), m.content
        assert isinstance(m.artifact, ToolRefused) and "failing closed" in str(m.content)
    finally:
        if g.proc.poll() is None:
            os.kill(g.proc.pid, signal.SIGCONT)
        g.kill_hard()
        await c.close()
