"""A Pydantic AI agent whose tools are behind gated, in one line
(GatedToolset). The model is Pydantic AI's FunctionModel, scripted to
restart a service and then drop a table, so the example needs no API key;
give the Agent a real model and nothing else changes. The tools are
simulated: they only say what they would have done.

    python examples/pydantic-ai-python/agent.py --nats-url nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, FunctionToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import gated
from gated.integrations import Gate
from gated.integrations.pydantic_ai import GatedToolset


def restart_service(host: str, service: str) -> str:
    """Restart a service on a host."""
    return f"restarted {service} on {host}"


def drop_table(table: str) -> str:
    """Drop a database table."""
    return f"dropped {table}"


def scripted_model(host: str) -> FunctionModel:
    """The model's turns: a restart, a table drop, then an answer."""
    turns = [
        ModelResponse(parts=[ToolCallPart("restart_service", {"host": host, "service": "nginx"}, tool_call_id="call-1")]),
        ModelResponse(parts=[ToolCallPart("drop_table", {"table": "orders_2019"}, tool_call_id="call-2")]),
        ModelResponse(parts=[TextPart("done")]),
    ]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return turns[sum(1 for m in messages if isinstance(m, ModelResponse))]

    return FunctionModel(model)


async def run(nats_url: str, tenant: str, catalog: str) -> int:
    async with await gated.Client.connect(nats_url) as client:
        gate = Gate(client, gated.Identity(tenant=tenant, agent="pydantic-agent", session=secrets.token_hex(4)),
                    catalog=catalog, framework="pydantic-ai")
        tools = GatedToolset(FunctionToolset([restart_service, drop_table]), gate)  # the one line
        agent = Agent(scripted_model("web-" + secrets.token_hex(3)), toolsets=[tools], output_type=[str, DeferredToolRequests])
        result = await agent.run("nginx is down")
        for m in result.all_messages():
            for part in getattr(m, "parts", []):
                if isinstance(part, ToolReturnPart):
                    out = part.model_response_str(wrap_if_error=False)
                    print(f"{part.tool_name:<16} {'refused' if out.startswith('gated did not approve') else 'ran':<8} {out}")
        if isinstance(result.output, DeferredToolRequests):
            for call in result.output.approvals:
                print(f"{call.tool_name:<16} held     waiting for an operator: decide, then run again with DeferredToolResults")
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
