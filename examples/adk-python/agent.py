"""A Google ADK agent whose tools are behind gated, in one line
(gated_callbacks: its before_tool_callback, after_tool_callback and
on_tool_error_callback). The model is a scripted BaseLlm that restarts a
service and then drops a table, so the example needs no model key; give
the agent a real model and nothing else changes. The tools are simulated:
they only say what they would have done.

    python examples/adk-python/agent.py --nats-url nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

import gated
from gated.integrations import Gate
from gated.integrations.adk import gated_callbacks


def restart_service(host: str, service: str) -> str:
    """Restart a service on a host."""
    return f"restarted {service} on {host}"


def drop_table(table: str) -> str:
    """Drop a database table."""
    return f"dropped {table}"


class ScriptedLlm(BaseLlm):
    """The model's turns: a restart, a table drop, then an answer."""

    host: str

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        answered = sum(1 for c in llm_request.contents for p in (c.parts or []) if p.function_response)
        restart = {"host": self.host, "service": "nginx", "_reason": f"nginx on {self.host} stopped answering health checks"}
        turns: list[types.Part] = [
            types.Part(function_call=types.FunctionCall(name="restart_service", args=restart, id="call-1")),
            types.Part(function_call=types.FunctionCall(name="drop_table", args={"table": "orders_2019"}, id="call-2")),
            types.Part(text="done"),
        ]
        yield LlmResponse(content=types.Content(role="model", parts=[turns[min(answered, 2)]]))


async def run(nats_url: str, tenant: str, catalog: str) -> int:
    async with await gated.Client.connect(nats_url) as client:
        gate = Gate(client, gated.Identity(tenant=tenant, agent="adk-agent", session=secrets.token_hex(4)),
                    catalog=catalog, framework="adk")
        model = ScriptedLlm(model="scripted", host="web-" + secrets.token_hex(3))
        agent = LlmAgent(name="ops", model=model, tools=[restart_service, drop_table], **gated_callbacks(gate))  # the one line
        runner = InMemoryRunner(agent=agent, app_name="gated-example")
        session = await runner.session_service.create_session(app_name="gated-example", user_id="ops")
        msg = types.Content(role="user", parts=[types.Part(text="nginx is down")])
        async for event in runner.run_async(user_id="ops", session_id=session.id, new_message=msg):
            for r in event.get_function_responses():
                out: Any = r.response or {}
                if r.name == "adk_request_confirmation":
                    continue
                if "error" in out:
                    print(f"{r.name:<16} refused  {out['error']}")
                elif out.get("status") == "held":
                    print(f"{r.name:<16} held     {out['message']}")
                else:
                    print(f"{r.name:<16} ran      {out.get('result')}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    p.add_argument("--tenant", default="acme")
    p.add_argument("--catalog", default=str(Path(__file__).with_name("catalog.yaml")))
    a = p.parse_args()
    return asyncio.run(run(a.nats_url, a.tenant, a.catalog))


if __name__ == "__main__":
    sys.exit(main())
