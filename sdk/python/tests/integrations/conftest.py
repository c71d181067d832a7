"""Fixtures of the framework integrations' tests: one real `gated serve`
per module that approves restarts (the SOP reviewer), rejects table drops
(the dba persona) and holds DNS changes for an operator, alice, whose
decisions are signed with `gated operator decide`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import gated
from gatedkit import HoldGated, start_hold_gated
from integrationkit import ProposalTap
from test_grants_e2e import AuditTap


@pytest.fixture(scope="module")
def holds(gated_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HoldGated]:
    h = start_hold_gated(gated_bin, Path(tmp_path_factory.mktemp("holds")))
    yield h
    h.gated.kill_hard()


@pytest.fixture(scope="module")
async def client(holds: HoldGated) -> AsyncIterator[gated.Client]:
    c = await gated.Client.connect(holds.gated.nats_url)
    yield c
    await c.close()


@pytest.fixture(scope="module")
async def tap(client: gated.Client) -> AuditTap:
    return await AuditTap().start(client)


@pytest.fixture(scope="module")
async def proposals(client: gated.Client) -> ProposalTap:
    return await ProposalTap().start(client)
