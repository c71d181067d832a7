"""An agent with two tools behind gated: a read that runs at once and a
write that runs only when gated approves it. The tools are simulated: they
only say what they would have done.

    python examples/fleet-python/agent.py --nats-url nats://127.0.0.1:4222
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys

import gated
from gated import Change, Identity, ToolGate, ToolSpec


def restart_change(host: str, service: str, *, skip_review: bool = False) -> Change:
    """What a restart changes, for gated to review."""
    return Change(
        target={"host": host, "service": service, "tags": ["production"]},
        reason=f"{service} on {host} stopped answering health checks",
        blast_radius="single_device",
        incident_id="INC-1042",
        flags=gated.Flags(skip_review=skip_review),
    )


async def run(nats_url: str, tenant: str, wait: float) -> int:
    async with await gated.Client.connect(nats_url) as client:
        gate = ToolGate(
            client,
            Identity(tenant=tenant, agent="py-ops-agent", session=secrets.token_hex(4), operator=gated.Operator("alice", ["sre"])),
            review_timeout=wait,
        )

        @gate.guard(ToolSpec("host_list_services", "read"))
        async def list_services(host: str) -> str:
            return f"listed services on {host}"

        @gate.guard(ToolSpec("host_restart_service", "write", restart_change))
        async def restart_service(host: str, service: str, *, skip_review: bool = False) -> str:
            return f"restarted {service} on {host}"

        host = "web-" + secrets.token_hex(3)  # a host of its own per run
        calls = [
            ("host_list_services", list_services(host)),
            ("host_restart_service", restart_service(host, "nginx")),
            ("host_restart_service", restart_service(host + "-b", "nginx", skip_review=True)),
        ]
        failed = 0
        for action, call in calls:
            try:
                print(f"{action:22} ran       {await call}")
            except gated.NotApproved as e:
                v = e.verdict
                print(f"{action:22} {v.outcome:9} not run: {v.stage}: {v.reason}")
            except gated.GatedError as e:
                print(f"{action:22} failed    {type(e).__name__}: {e}")
                failed += 1
        return 1 if failed else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    ap.add_argument("--tenant", default="acme")
    ap.add_argument("--wait", type=float, default=90.0, help="seconds a call waits for its verdict")
    args = ap.parse_args()
    sys.exit(asyncio.run(run(args.nats_url, args.tenant, args.wait)))


if __name__ == "__main__":
    main()
