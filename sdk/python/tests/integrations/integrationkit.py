"""What the framework integrations' tests share: the catalog, and a tap
on the proposals gated receives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gated

CATALOG = Path(__file__).with_name("catalog.yaml")


class ProposalTap:
    """The proposals of tenant acme as they are published, by id."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}

    async def start(self, c: gated.Client) -> ProposalTap:
        async def on(msg: Any) -> None:
            doc = json.loads(msg.data)
            self.by_id[doc["id"]] = doc

        await c.nc.subscribe("gated.proposals.acme.>", cb=on)
        await c.nc.flush()
        return self
