"""A CrewAI crew whose agent's tools are behind gated, in one line
(gated_tools). The LLM is a scripted BaseLLM that restarts a service and
then drops a table, in CrewAI's ReAct text, so the example needs no model
key; give the agent a real LLM and nothing else changes. The tools are
simulated: they only say what they would have done.

    python examples/crewai-python/agent.py --nats-url nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import tool  # noqa: E402

import gated  # noqa: E402
from gated.integrations import Gate  # noqa: E402
from gated.integrations.crewai import gated_tools  # noqa: E402

results: list[str] = []


@tool("restart_service")
def restart_service(host: str, service: str) -> str:
    """Restart a service on a host."""
    return f"restarted {service} on {host}"


@tool("drop_table")
def drop_table(table: str) -> str:
    """Drop a database table."""
    return f"dropped {table}"


class ScriptedLLM(BaseLLM):
    """The model's turns: a restart, a table drop, then an answer."""

    host: str
    turn: int = 0

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        if self.turn and isinstance(messages, list):
            said = [str(m.get("content", "")) for m in messages if m.get("role") == "assistant"]
            results.append(said[-1].rsplit("Observation:", 1)[-1].strip())
        self.turn += 1
        if self.turn == 1:
            restart = {"host": self.host, "service": "nginx", "_reason": f"nginx on {self.host} stopped answering health checks"}
            return f"Thought: restart it\nAction: restart_service\nAction Input: {json.dumps(restart)}"
        if self.turn == 2:
            return 'Thought: and the table\nAction: drop_table\nAction Input: {"table": "orders_2019"}'
        return "Thought: I now know the final answer\nFinal Answer: done"


def run(nats_url: str, tenant: str, catalog: str) -> int:
    with gated.SyncClient.connect(nats_url) as client:
        gate = Gate(client, gated.Identity(tenant=tenant, agent="crewai-agent", session=secrets.token_hex(4)),
                    catalog=catalog, framework="crewai")
        llm = ScriptedLLM(model="scripted", host="web-" + secrets.token_hex(3))
        agent = Agent(role="operator", goal="keep services up", backstory="an SRE", llm=llm, max_iter=4,
                      tools=gated_tools([restart_service, drop_table], gate))  # the one line
        task = Task(description="nginx is down", expected_output="what was done", agent=agent)
        Crew(agents=[agent], tasks=[task]).kickoff()
    for name, out in zip(("restart_service", "drop_table"), results):
        print(f"{name:<16} {'refused' if out.startswith('gated did not approve') else 'ran':<8} {out}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    p.add_argument("--tenant", default="acme")
    p.add_argument("--catalog", default=str(Path(__file__).with_name("catalog.yaml")))
    a = p.parse_args()
    return run(a.nats_url, a.tenant, a.catalog)


if __name__ == "__main__":
    sys.exit(main())
