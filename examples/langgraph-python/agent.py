"""A LangGraph agent whose tools are behind gated, in one line
(gated_tool_node). The model is LangChain's fake chat model, scripted to
restart a service and then drop a table, so the example needs no model
key; put a real chat model in its place and nothing else changes. The
tools are simulated: they only say what they would have done.

    python examples/langgraph-python/agent.py --nats-url nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

import gated
from gated.integrations import Gate
from gated.integrations.langgraph import gated_tool_node


@tool
def restart_service(host: str, service: str) -> str:
    """Restart a service on a host."""
    return f"restarted {service} on {host}"


@tool
def drop_table(table: str) -> str:
    """Drop a database table."""
    return f"dropped {table}"


def scripted_model(host: str) -> FakeMessagesListChatModel:
    """The model's turns: a restart, a table drop, then an answer."""
    restart = {"host": host, "service": "nginx", "_reason": f"nginx on {host} stopped answering health checks"}
    return FakeMessagesListChatModel(
        responses=[
            AIMessage("", tool_calls=[{"name": "restart_service", "args": restart, "id": "call-1", "type": "tool_call"}]),
            AIMessage("", tool_calls=[{"name": "drop_table", "args": {"table": "orders_2019"}, "id": "call-2", "type": "tool_call"}]),
            AIMessage("done"),
        ]
    )


async def run(nats_url: str, tenant: str, catalog: str) -> int:
    async with await gated.Client.connect(nats_url) as client:
        gate = Gate(client, gated.Identity(tenant=tenant, agent="langgraph-agent", session=secrets.token_hex(4)),
                    catalog=catalog, framework="langgraph")
        model = scripted_model("web-" + secrets.token_hex(3))

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", gated_tool_node([restart_service, drop_table], gate))  # the one line
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        app = graph.compile(checkpointer=InMemorySaver())
        out = await app.ainvoke({"messages": [HumanMessage("nginx is down")]}, {"configurable": {"thread_id": "1"}})
        for m in out["messages"]:
            if isinstance(m, ToolMessage):
                print(f"{m.name:<16} {'ran' if m.status == 'success' else 'refused':<8} {m.content}")
        if "__interrupt__" in out:
            print("held for an operator:", out["__interrupt__"][0].value["message"])
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
