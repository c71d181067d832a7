"""Google ADK behind gated: a real LlmAgent and InMemoryRunner whose model
is a scripted BaseLlm emitting the tool calls, its tools behind
gated_callbacks, against a real `gated serve`."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

import gated
from integrationkit import CATALOG, ProposalTap
from gated.integrations import Gate, ToolCall
from gated.integrations.adk import gated_callbacks
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


class ScriptedLlm(BaseLlm):
    """A model that calls one tool, then answers with the tool's response."""

    call: dict[str, Any]

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        parts = [p for c in llm_request.contents for p in (c.parts or [])]
        answers = [p.function_response for p in parts if p.function_response and p.function_response.name == self.call["name"]]
        if answers:
            text = f"done: {json.dumps(answers[-1].response)}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        fc = types.FunctionCall(name=self.call["name"], args=self.call["args"], id=self.call["id"])
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=fc)]))


def new_gate(client: gated.Client, **kw: Any) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent="adk-agent"), catalog=CATALOG, framework="adk", **kw)


class Run:
    """One agent, its runner and session: the model calls one tool."""

    def __init__(self, gate: Gate, name: str, args: dict[str, Any], call_id: str) -> None:
        model = ScriptedLlm(model="scripted", call={"name": name, "args": args, "id": call_id})
        agent = LlmAgent(
            name="ops", model=model, tools=[restart_service, drop_table, delete_record], **gated_callbacks(gate)
        )
        self.runner = InMemoryRunner(agent=agent, app_name="gated-adk")
        self.session = ""

    async def send(self, *parts: types.Part) -> list[Any]:
        if not self.session:
            s = await self.runner.session_service.create_session(app_name="gated-adk", user_id="u")
            self.session = s.id
        msg = types.Content(role="user", parts=list(parts))
        return [e async for e in self.runner.run_async(user_id="u", session_id=self.session, new_message=msg)]


def responses(events: list[Any], name: str) -> list[dict[str, Any]]:
    return [r.response for e in events for r in e.get_function_responses() if r.name == name]


def final_text(events: list[Any]) -> str:
    texts = [p.text for e in events if e.content for p in (e.content.parts or []) if p.text]
    return texts[-1] if texts else ""


async def test_approved_runs_with_the_reviewed_arguments(
    client: gated.Client, tap: AuditTap, proposals: ProposalTap
) -> None:
    gate = new_gate(client)
    args = {"device_id": 9901, "service": "nginx", "_reason": "nginx on device 9901 stopped answering health checks"}
    ran.clear()
    events = await Run(gate, "restart_service", args, "call-adk-1").send(types.Part(text="go"))
    assert ran == [("restart_service", {"device_id": 9901, "service": "nginx"})]
    assert responses(events, "restart_service") == [{"result": "restarted nginx on device 9901"}]
    pid = gate.proposal_id(ToolCall("restart_service", {}, "call-adk-1"))
    outcomes = await tap.wait_for("grant.outcome", pid, n=2)
    assert sorted(e["data"]["status"] for e in outcomes) == ["started", "succeeded"]
    p = proposals.by_id[pid]
    assert p["arguments"] == ran[0][1] and p["reason"] == args["_reason"]
    assert p["target"] == {"device_id": 9901, "service": "nginx", "tags": ["production"]}


async def test_rejected_does_not_run_and_the_model_reads_why(client: gated.Client) -> None:
    gate = new_gate(client)
    ran.clear()
    events = await Run(gate, "drop_table", {"table": "orders_2019"}, "call-adk-2").send(types.Part(text="go"))
    assert ran == []
    (r,) = responses(events, "drop_table")
    assert r["error"].startswith("gated did not approve drop_table: rejected at stage review")
    assert final_text(events).startswith("done: ") and "The call was not made." in final_text(events)


async def held_run(client: gated.Client, record: str, call_id: str) -> tuple[Run, str, str]:
    gate = new_gate(client)
    ran.clear()
    run = Run(gate, "delete_record", {"zone": "example.org", "record": record}, call_id)
    events = await run.send(types.Part(text="go"))
    assert ran == []
    (ask,) = [c for e in events for c in e.get_function_calls() if c.name == "adk_request_confirmation"]
    pid = gate.proposal_id(ToolCall("delete_record", {}, call_id))
    assert ask.args["toolConfirmation"]["payload"]["proposal_id"] == pid
    return run, ask.id, pid


def confirm(ask_id: str, confirmed: bool) -> types.Part:
    return types.Part(
        function_response=types.FunctionResponse(id=ask_id, name="adk_request_confirmation", response={"confirmed": confirmed})
    )


async def test_held_pauses_and_resumes_on_the_operators_approval(client: gated.Client, holds: HoldGated) -> None:
    run, ask_id, pid = await held_run(client, "adk-held-ok", "call-adk-3")
    d = holds.decide(pid, "--approve", "--reason", "CHG-15")
    assert d.returncode == 0, d.stderr
    events = await run.send(confirm(ask_id, True))
    assert ran == [("delete_record", {"zone": "example.org", "record": "adk-held-ok"})]
    assert responses(events, "delete_record") == [{"result": "deleted adk-held-ok from example.org"}]


async def test_held_then_rejected_never_runs(client: gated.Client, holds: HoldGated) -> None:
    run, ask_id, pid = await held_run(client, "adk-held-no", "call-adk-4")
    d = holds.decide(pid, "--reject", "--reason", "not in a change window")
    assert d.returncode == 0, d.stderr
    # Confirmed in the run: that only resumes the call.
    events = await run.send(confirm(ask_id, True))
    assert ran == []
    (r,) = responses(events, "delete_record")
    assert r["error"].startswith("gated did not approve delete_record: rejected at stage operator")


async def test_held_and_declined_in_the_run_never_runs(client: gated.Client, holds: HoldGated) -> None:
    run, ask_id, pid = await held_run(client, "adk-held-declined", "call-adk-5")
    d = holds.decide(pid, "--approve", "--reason", "CHG-17")
    assert d.returncode == 0, d.stderr
    # The operator approved, but the run declines: the call is not made.
    events = await run.send(confirm(ask_id, False))
    assert ran == []
    (r,) = responses(events, "delete_record")
    assert "declined" in r["error"] and r["error"].endswith("The call was not made.")


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
        args = {"device_id": 9902, "service": "nginx"}
        events = await Run(gate, "restart_service", args, f"call-adk-{how}").send(types.Part(text="go"))
        assert ran == []
        (r,) = responses(events, "restart_service")
        assert r["error"].startswith("gated did not approve restart_service") and "failing closed" in r["error"]
    finally:
        if g.proc.poll() is None:
            os.kill(g.proc.pid, signal.SIGCONT)
        g.kill_hard()
        await c.close()
