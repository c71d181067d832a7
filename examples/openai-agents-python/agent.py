"""An OpenAI Agents SDK agent whose function tools are behind gated, in
one line (gated_tools). The model is the SDK's ScriptedModel, scripted to
restart a service and then drop a table, so the example needs no API key;
give the Agent a real model and nothing else changes. The tools are
simulated: they only say what they would have done.

    python examples/openai-agents-python/agent.py --nats-url nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from pathlib import Path

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ToolCallItem, ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

import gated
from gated.integrations import Gate
from gated.integrations.openai_agents import gated_tools


@function_tool
def restart_service(host: str, service: str) -> str:
    """Restart a service on a host."""
    return f"restarted {service} on {host}"


@function_tool
def drop_table(table: str) -> str:
    """Drop a database table."""
    return f"dropped {table}"


def scripted_model(host: str) -> ScriptedModel:
    """The model's turns: a restart, a table drop, then an answer."""
    restart = {"host": host, "service": "nginx", "_reason": f"nginx on {host} stopped answering health checks"}
    return ScriptedModel([
        [function_call("restart_service", restart, call_id="call-1")],
        [function_call("drop_table", {"table": "orders_2019"}, call_id="call-2")],
        [assistant_message("done")],
    ])


async def run(nats_url: str, tenant: str, catalog: str) -> int:
    set_tracing_disabled(True)  # the SDK would export its traces to OpenAI
    async with await gated.Client.connect(nats_url) as client:
        gate = Gate(client, gated.Identity(tenant=tenant, agent="openai-agent", session=secrets.token_hex(4)),
                    catalog=catalog, framework="openai-agents")
        agent = Agent(name="ops", model=scripted_model("web-" + secrets.token_hex(3)),
                      tools=gated_tools([restart_service, drop_table], gate))  # the one line
        result = await Runner.run(agent, "nginx is down")
        names = {i.raw_item.call_id: i.raw_item.name for i in result.new_items if isinstance(i, ToolCallItem)}  # type: ignore[union-attr]
        for i in result.new_items:
            if isinstance(i, ToolCallOutputItem):
                out = str(i.output)
                name = names.get(i.raw_item["call_id"], "?")  # type: ignore[index]
                print(f"{name:<16} {'refused' if out.startswith('gated did not approve') else 'ran':<8} {out}")
        for item in result.interruptions:
            print(f"{item.name:<16} held     waiting for an operator: decide, then approve the item and run again")
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
