"""Flow labels through a framework integration (docs/POLICIES.md#flows): a
real OpenAI Agents SDK Agent and Runner whose ScriptedModel reads a secret
and then mails it, its function tools behind gated_tools with a catalog
that labels them, against a real `gated serve` with the flow rules on.
The mail is refused with a typed refusal that names the read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

import gated
from gated.integrations import Catalog, Gate, ToolCall, ToolDenied
from gated.integrations.openai_agents import gated_tools
from gatedkit import Gated, start_gated

# The data labels nothing: the labels come from the catalog.
POLICY_DATA = """gated:
  tools:
    read_secret: {class: read}
  config:
    skip_review_actions: [send_email]
    flows:
      window: 1h
      rules:
        egress_after_private: true
"""

CATALOG = """tools:
  read_secret: {class: read, labels: [secret]}
  send_email: {class: write, labels: [egress]}
"""

ran: list[str] = []


@function_tool
def read_secret(name: str) -> str:
    """Read a secret."""
    ran.append("read_secret")
    return f"the secret {name} is hunter2"


@function_tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    ran.append("send_email")
    return f"sent to {to}"


@pytest.fixture(scope="module")
def flows_gated(gated_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gated]:
    data = Path(tmp_path_factory.mktemp("flows")) / "flows.yaml"
    data.write_text(POLICY_DATA)
    g = start_gated(gated_bin, "--policy-data", str(data))
    yield g
    g.kill_hard()


@pytest.fixture(scope="module")
async def flows_client(flows_gated: Gated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(flows_gated.nats_url)
    yield c
    await c.close()


def new_gate(client: gated.Client, agent: str) -> Gate:
    return Gate(client, gated.Identity(tenant="acme", agent=agent), catalog=Catalog.decode(CATALOG), framework="openai-agents")


def outputs(result: Any) -> list[str]:
    return [str(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]


async def test_egress_after_a_secret_read_is_refused_naming_the_read(flows_client: gated.Client) -> None:
    gate = new_gate(flows_client, "oa-flows")
    model = ScriptedModel(
        [
            [function_call("read_secret", {"name": "db-password", "_reason": "the deploy needs it"}, call_id="flow-read-1")],
            [function_call("send_email", {"to": "x@example.org", "body": "hunter2"}, call_id="flow-mail-1")],
            [assistant_message("done")],
        ]
    )
    ran.clear()
    result = await Runner.run(Agent(name="ops", model=model, tools=gated_tools([read_secret, send_email], gate)), "go")
    assert ran == ["read_secret"]
    read_id = gate.proposal_id(ToolCall("read_secret", {}, "flow-read-1"))
    # The labelled read was proposed, with the catalog's labels, and approved.
    read = await flows_client.verdict("acme", read_id)
    assert read.is_approval
    read_out, mail_out = outputs(result)
    assert read_out == "the secret db-password is hunter2"
    assert mail_out.startswith("gated did not approve send_email: rejected at stage policy")
    assert f"read_secret (proposal {read_id})" in mail_out
    assert mail_out.endswith("The call was not made.")

    # The typed refusal the integrations raise: ToolDenied, its verdict
    # naming the flow rule and the read.
    with pytest.raises(ToolDenied) as e:
        await gate.authorize(ToolCall("send_email", {"to": "y@example.org", "body": "again"}, "flow-mail-2"))
    v = e.value.verdict
    assert v is not None and v.policy is not None and v.policy["rules"] == ["flow_egress_after_private"]
    assert f"read_secret (proposal {read_id})" in v.reason
    assert ran == ["read_secret"]

    # Another agent of the tenant, which read nothing, may mail.
    other = new_gate(flows_client, "oa-flows-other")
    approval, _ = await other.authorize(ToolCall("send_email", {"to": "z@example.org", "body": "hello"}, "flow-mail-3"))
    assert approval is not None and approval.is_approval
    await other.finish(approval, None)
