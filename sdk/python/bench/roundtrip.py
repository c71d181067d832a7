"""The Python fleet client's policy-path round trip at concurrency 1, with
the same contract as internal/bench/roundtrip (Go): N proposals one after
another, half read proposals approved at policy (each approval confirmed
against the stored verdict), half refused at policy (skip_review).

Environment: GATED_NATS_URL, TENANT, N, WARMUP. Prints one JSON line:
{"lang":"python","n":...,"p50_ms":...,"p99_ms":...,"per_sec":...}.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from typing import Any

import gated


def proposal(prefix: str, tenant: str, i: int) -> dict[str, Any]:
    p: dict[str, Any] = {
        "id": f"{prefix}-{i}", "tenant": tenant, "reason": "bench",
        "target": {"host": f"{prefix}-h{i}"}, "requested_by": {"agent": "bench"},
    }
    if i % 2 == 0:
        p.update(action="host_list_services", **{"class": "read"})
    else:
        p.update(action="host_restart_service", blast_radius="single_device", flags={"skip_review": True}, **{"class": "write"})
    return p


async def main() -> None:
    n = int(os.environ.get("N", "2000"))
    warmup = int(os.environ.get("WARMUP", "50"))
    tenant = os.environ.get("TENANT", "acme")
    prefix = "bench-py-" + secrets.token_hex(4)
    lat: list[float] = []
    total = 0.0
    async with await gated.Client.connect(os.environ.get("GATED_NATS_URL", "nats://127.0.0.1:4222")) as c:
        for i in range(warmup + n):
            p = proposal(prefix, tenant, i)
            start = time.perf_counter()
            try:
                await c.propose(p)
            except gated.ReviewRejected:
                pass
            took = time.perf_counter() - start
            if i >= warmup:
                lat.append(took * 1000)
                total += took
    lat.sort()
    out: dict[str, Any] = {"lang": "python", "n": n, "p50_ms": 0.0, "p99_ms": 0.0, "per_sec": 0.0}
    if n:
        out.update(p50_ms=round(lat[n // 2], 3), p99_ms=round(lat[min(n - 1, n * 99 // 100)], 3), per_sec=round(n / total, 1))
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    asyncio.run(main())
