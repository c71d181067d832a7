"""Reviewers the tests run as real plugin processes, one per mode.

A test plugin is a small script (see pluginkit.write_plugin) that puts this
directory on sys.path and calls run(MODE)."""

from __future__ import annotations

import hashlib
import os
import time

from gated.plugin import (
    TOOL_GET_PROPOSAL,
    TOOL_GET_SOP_TEXT,
    Decision,
    Description,
    Gate,
    Request,
    Response,
    ToolError,
    serve,
)


class EchoReviewer:
    """Answers with the proposal's context_summary as its text, byte for
    byte, and the structured decision approve; first it reads the
    proposal back through gated's get_proposal tool and notes the
    SHA-256 of what it got."""

    def describe(self) -> Description:
        return Description(name="echo", version="1.0.0", max_concurrency=8)

    async def review(self, req: Request) -> Response:
        note = "no tools"
        if req.has_tool(TOOL_GET_PROPOSAL):
            got = await req.call_tool(TOOL_GET_PROPOSAL)
            note = "get_proposal sha256 " + hashlib.sha256(
                __import__("json").dumps(got, sort_keys=True).encode()
            ).hexdigest()
        reason = str(req.proposal.get("reason", ""))
        if "crash" in reason:
            os._exit(7)
        if reason.startswith("call:"):
            # Ask for a tool by name, in the bag or not, and report what
            # became of the call.
            try:
                await req.call_tool(reason.removeprefix("call:"))
                note = "called"
            except ToolError as e:
                note = f"{type(e).__name__}: {e}"
        return Response(text=str(req.proposal.get("context_summary", "")), decision=Decision.APPROVE, notes=note)


class SyncSOPReviewer:
    """A synchronous reviewer: approves when the SOP gated serves through
    get_sop_text has a rollback, with every gate the persona requires."""

    def describe(self) -> Description:
        return Description(name="sync-sop", version="2.0.0")

    def review(self, req: Request) -> Response:
        try:
            sop = req.call_tool_sync(TOOL_GET_SOP_TEXT) if req.has_tool(TOOL_GET_SOP_TEXT) else None
        except ToolError as e:
            return Response(text=f"Decision: reject\nNotes: {e}", decision=Decision.REJECT,
                            missing_work=["an SOP"], next_round_guidance="find the SOP")
        if not isinstance(sop, dict) or not sop.get("rollback") or req.run is not None:
            return Response(text="Decision: reject\nNotes: no SOP with a rollback", decision=Decision.REJECT,
                            missing_work=["an SOP with a rollback"], next_round_guidance="cover the action")
        gates = [Gate(g, True, "checked") for g in req.persona.required_gates]
        return Response(text="Decision: approve", decision=Decision.APPROVE, gates=gates, sop_id=str(sop.get("id")))


class SlowReviewer:
    """Sleeps far past any deadline; notices cancellation."""

    def describe(self) -> Description:
        return Description(name="slow", version="0")

    def review(self, req: Request) -> Response:
        while not req.cancelled.wait(0.05):
            pass
        return Response(text="Decision: approve", decision=Decision.APPROVE)


class RaisingReviewer:
    def describe(self) -> Description:
        return Description(name="raising", version="0")

    async def review(self, req: Request) -> Response:
        raise RuntimeError("the model is down")


class WrongTypeReviewer:
    def describe(self) -> Description:
        return Description(name="wrong-type", version="0")

    async def review(self, req: Request) -> Response:
        return "Decision: approve"  # type: ignore[return-value]


class NoisyReviewer(SyncSOPReviewer):
    """Prints to standard output, which after the handshake goes to the
    host's stdio stream."""

    def describe(self) -> Description:
        print("describing")
        return Description(name="noisy", version="0")

    def review(self, req: Request) -> Response:
        print("a reviewer that prints " * 1000)
        return super().review(req)


class TracedReviewer:
    """Approves, and notes the trace context gated sent with the review."""

    def describe(self) -> Description:
        return Description(name="traced", version="0")

    async def review(self, req: Request) -> Response:
        return Response(text="Decision: approve", decision=Decision.APPROVE,
                        notes=f"traceparent={req.traceparent} tracestate={req.tracestate}")


MODES = {
    "echo": EchoReviewer,
    "traced": TracedReviewer,
    "sync-sop": SyncSOPReviewer,
    "slow": SlowReviewer,
    "raising": RaisingReviewer,
    "wrong-type": WrongTypeReviewer,
    "noisy": NoisyReviewer,
}


def run(mode: str) -> None:
    serve(MODES[mode]())
