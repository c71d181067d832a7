#!/usr/bin/env python3
"""The reviewer `make bench-plugin-python` measures: the work of the Go
sop reviewer's approval path, with no latency of its own. It reads the
SOP through get_sop_text when the review offers it (one brokered call)
and approves with the three gates of the reviewer persona."""

from gated.plugin import TOOL_GET_SOP_TEXT, Decision, Description, Gate, Request, Response, serve


class BenchReviewer:
    def describe(self) -> Description:
        return Description(name="bench-py", version="0", max_concurrency=64)

    async def review(self, req: Request) -> Response:
        sop = req.policy.sop
        rollback = sop.rollback if sop else ""
        if req.has_tool(TOOL_GET_SOP_TEXT):
            got = await req.call_tool(TOOL_GET_SOP_TEXT)
            rollback = str(got.get("rollback", "")) if isinstance(got, dict) else ""
        ok = sop is not None and rollback != ""
        gates = [Gate("sop_covers", ok), Gate("no_parallel_operation", True), Gate("rollback_known", ok, rollback)]
        if not ok:
            return Response(text="Decision: reject", decision=Decision.REJECT, gates=gates)
        return Response(text="Decision: approve", decision=Decision.APPROVE, gates=gates, sop_id=sop.id if sop else "")


if __name__ == "__main__":
    serve(BenchReviewer())
