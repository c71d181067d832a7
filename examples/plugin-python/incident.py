#!/usr/bin/env python3
"""A third-party reviewer plugin in Python: it approves a change only when
the proposal names an incident and the SOP that covers it, read through
gated's get_sop_text tool, has a rollback."""

from gated.plugin import (
    TOOL_GET_SOP_TEXT,
    Decision,
    Description,
    Gate,
    Request,
    Response,
    ToolError,
    serve,
)


class IncidentReviewer:
    def describe(self) -> Description:
        return Description(name="incident-reviewer-py", version="0.1.0", max_concurrency=8)

    async def review(self, req: Request) -> Response:
        sop, err = {}, None
        try:
            sop = await req.call_tool(TOOL_GET_SOP_TEXT)
        except ToolError as e:
            err = e
        incident = str(req.proposal.get("incident_id", ""))
        rollback = str(sop.get("rollback", "")) if isinstance(sop, dict) else ""
        gates = [
            Gate("incident_linked", incident != "", incident),
            Gate("rollback_known", rollback != "", rollback),
        ]
        ok = req.run is None and all(g.passed for g in gates)
        decision = Decision.APPROVE if ok else Decision.REJECT
        text = f"Decision: {decision}\nIncident: {incident!r}, rollback: {rollback!r} (lookup error: {err})"
        return Response(
            text=text,
            decision=decision,
            gates=gates,
            sop_id=str(sop.get("id", "")) if isinstance(sop, dict) else "",
            rollback_path=rollback,
            missing_work=[] if ok else ["link an incident and an SOP with a rollback"],
        )


if __name__ == "__main__":
    serve(IncidentReviewer())
