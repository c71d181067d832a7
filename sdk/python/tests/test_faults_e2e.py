"""Faults against a real gated: a reviewer that stops answering mid-review
(error verdict), a reviewer whose model answers past the review deadline
(timeout verdict), the review service switched off, and the server going away
while a client waits (a clear error by the deadline, never an approval)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import gated
from gatedkit import Gated, example_proposal, start_gated


def approvable(id: str, device: int) -> dict[str, object]:
    return example_proposal("approved.json", id=id, target={"device_id": device, "service": "nginx", "tags": ["production"]})


def _state(pid: int) -> str:
    """The scheduler state of a process (R, S, T, Z, ...)."""
    for _ in range(100):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return state
        time.sleep(0.01)  # a signal takes effect asynchronously
    return state


async def plugin_pid(g: Gated) -> int:
    """The pid of gated's one reviewer plugin, once it runs."""
    for _ in range(200):
        pids = g.plugin_pids()
        if len(pids) == 1:
            return pids[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"plugin processes under gated: {g.plugin_pids()}, want one\n{g.logs()}")


async def test_reviewer_failure_is_an_error(gated_bin: str) -> None:
    """A reviewer that stops answering mid-review: gated's health checks
    kill it and the review fails closed with an error verdict. (A frozen
    reviewer never reaches the review deadline: the health checks end it
    first; see the slow model below for a timeout verdict.)"""
    g = start_gated(gated_bin)
    try:
        c = await gated.Client.connect(g.nats_url)
        assert (await c.propose(approvable("py-fault-ok-1", 9201), timeout=30)).is_approval
        frozen = await plugin_pid(g)
        os.kill(frozen, signal.SIGSTOP)
        assert _state(frozen) == "T", f"plugin {frozen} is {_state(frozen)!r} after SIGSTOP"
        try:
            got = await c.propose(approvable("py-fault-error-1", 9202), timeout=60)
            pytest.fail(f"a frozen reviewer approved: {got!r}; frozen pid {frozen}, plugins now {g.plugin_pids()}")
        except gated.ReviewError as e:
            v = e.verdict
        assert v.stage == "review" and not v.approved and v.outcome == "error"
        # The relaunched reviewer approves again.
        for _ in range(400):
            if g.plugin_pids() and frozen not in g.plugin_pids():
                break
            await asyncio.sleep(0.05)
        assert (await c.propose(approvable("py-fault-ok-2", 9203), timeout=60)).is_approval
        await c.close()
    except BaseException:
        print(g.logs()[-20000:])
        raise
    finally:
        g.kill_hard()


async def test_server_goes_away_mid_wait(gated_bin: str) -> None:
    g = start_gated(gated_bin)
    try:
        async def quiet(e: Exception) -> None:
            pass  # the refused reconnections are expected here

        reconnecting = await gated.Client.connect(
            g.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.2, error_cb=quiet
        )
        closing = await gated.Client.connect(g.nats_url, allow_reconnect=False, error_cb=quiet)
        assert (await closing.propose(approvable("py-away-ok-1", 9301), timeout=30)).is_approval
        os.kill(await plugin_pid(g), signal.SIGSTOP)
        deadline = 6.0
        t0 = time.monotonic()
        waits = [
            asyncio.create_task(reconnecting.propose(approvable("py-away-1", 9302), timeout=deadline)),
            asyncio.create_task(closing.propose(approvable("py-away-2", 9303), timeout=deadline)),
        ]
        await asyncio.sleep(1)
        early = [w.exception() or w.result() for w in waits if w.done()]
        assert not early, f"answered while the reviewer is stopped: {early}\n{g.logs()}"
        g.kill_hard()
        # Both end (a bound for the test, not a timing assertion: a client
        # that hangs past its deadline fails here).
        done, pending = await asyncio.wait(waits, timeout=deadline + 20)
        assert not pending, "a client waited past its deadline"
        r1, r2 = (w.exception() for w in waits)
        elapsed = time.monotonic() - t0
        print(f"server gone: reconnecting client {r1!r}, closing client {r2!r}, {elapsed:.1f}s")
        # The reconnecting client keeps waiting, then reports no verdict.
        assert type(r1) is gated.NoVerdict
        # The client whose connection closes says so at once.
        assert type(r2) is gated.ConnectionLost
        await reconnecting.close()
    finally:
        g.kill_hard()


async def test_review_service_off_is_unavailable(gated_bin: str) -> None:
    """No review service: the request is refused at once as unavailable
    (NATS no-responders), not left to run into the deadline."""
    g = start_gated(gated_bin, "--review-service=false")
    try:
        c = await gated.Client.connect(g.nats_url)
        data = json.dumps(approvable("py-nosvc-1", 9801)).encode()
        with pytest.raises(gated.ServiceUnavailable):
            await c.request_review(data, timeout=30)
        # The durable path still answers.
        assert (await c.propose_raw(data, timeout=30)).is_approval
        await c.close()
    finally:
        g.kill_hard()


class _SlowModel(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible model server that never answers in time."""

    def do_POST(self) -> None:  # noqa: N802 - the handler's name
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(45)
        try:
            self.send_response(503)
            self.end_headers()
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


SLOW_PERSONA = """---
name: slow
description: Reviews with a model that does not answer in time.
when_to_use: Tests only.
model: openai-compatible/slow-model
plugin: llm
max_turns: 1
permission_mode: read-only
timeout: 30s
tools:
  - get_proposal
---
Review the proposal.
"""


async def test_review_past_its_deadline_is_a_timeout(gated_bin: str, tmp_path: Path) -> None:
    """A reviewer whose model does not answer before the review's deadline:
    a timeout verdict, never an approval."""
    model = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowModel)
    model.daemon_threads = True
    threading.Thread(target=model.serve_forever, daemon=True).start()
    (tmp_path / "slow.md").write_text(SLOW_PERSONA)
    os.environ["GATED_OPENAI_COMPATIBLE_BASE_URL"] = f"http://127.0.0.1:{model.server_address[1]}/v1"
    try:
        g = start_gated(gated_bin, "--personas", str(tmp_path), "--review-timeout", "30s")
    finally:
        del os.environ["GATED_OPENAI_COMPATIBLE_BASE_URL"]
    try:
        c = await gated.Client.connect(g.nats_url)
        with pytest.raises(gated.NotApproved) as e:
            await c.propose(example_proposal("approved.json", id="py-slow-1", reviewer="slow", target={"device_id": 9901}), timeout=90)
        v = e.value.verdict
        assert type(e.value) is gated.ReviewTimeout, f"{v.outcome} at {v.stage}: {v.reason}"
        assert v.stage == "review" and not v.approved
        await c.close()
    finally:
        g.kill_hard()
        model.shutdown()
