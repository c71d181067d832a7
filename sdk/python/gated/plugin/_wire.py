"""Converting between the protocol's messages and the SDK's types, and
reading what the host puts in the plugin's environment."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from gated.plugin._types import (
    SOP,
    Decision,
    HandshakeError,
    MalformedRequest,
    Persona,
    Policy,
    Request,
    Response,
    Tool,
)
from gated.plugin.v1 import reviewer_pb2 as pb

#: The protocol version this SDK speaks (the go-plugin app version).
PROTOCOL_VERSION = 1
#: go-plugin's own protocol version, the handshake line's first field.
CORE_PROTOCOL_VERSION = 1
MAGIC_COOKIE_KEY = "GATED_PLUGIN"
MAGIC_COOKIE_VALUE = "reviewer"
#: gRPC messages are bounded to 8 MiB both ways, as on gated's side.
MAX_MESSAGE_BYTES = 8 << 20
#: The largest client certificate the SDK reads from the environment.
MAX_CERT_PEM_BYTES = 64 << 10


def negotiate_version(offered: str | None) -> int:
    """Pick the protocol version from PLUGIN_PROTOCOL_VERSIONS, the
    comma-separated versions the host speaks. Raises HandshakeError when
    the host offers none or not version 1."""
    if offered is None or offered.strip() == "":
        raise HandshakeError("PLUGIN_PROTOCOL_VERSIONS is not set: the host offered no protocol version")
    versions: set[int] = set()
    for part in offered.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit() or len(part) > 9:
            raise HandshakeError(f"PLUGIN_PROTOCOL_VERSIONS {offered[:80]!r}: {part[:20]!r} is not a version number")
        versions.add(int(part))
    if PROTOCOL_VERSION not in versions:
        raise HandshakeError(
            f"the host speaks protocol versions {sorted(versions)}, this plugin speaks {PROTOCOL_VERSION}: "
            "update the plugin's gated SDK"
        )
    return PROTOCOL_VERSION


def read_client_cert(pem: str | None) -> bytes:
    """Check the host's client certificate (PLUGIN_CLIENT_CERT, one PEM
    certificate) and return it as PEM bytes: the only certificate the
    plugin's server will accept a connection from. Raises HandshakeError
    when it is missing or not one certificate."""
    if pem is None or pem.strip() == "":
        raise HandshakeError(
            "PLUGIN_CLIENT_CERT is not set: gated always starts plugins with mutual TLS, "
            "so this plugin refuses to serve without the host's certificate"
        )
    raw = pem.encode("utf-8", "surrogateescape")
    if len(raw) > MAX_CERT_PEM_BYTES:
        raise HandshakeError(f"PLUGIN_CLIENT_CERT is {len(raw)} bytes, more than {MAX_CERT_PEM_BYTES}")
    if raw.count(b"-----BEGIN CERTIFICATE-----") != 1:
        raise HandshakeError("PLUGIN_CLIENT_CERT must hold exactly one PEM certificate")
    try:
        x509.load_pem_x509_certificate(raw)
    except ValueError as e:
        raise HandshakeError(f"PLUGIN_CLIENT_CERT is not a certificate: {e}") from e
    return raw


_SURROGATES = re.compile("[\ud800-\udfff]")


def _utf8(s: str) -> str:
    """Make s encodable as UTF-8 (gRPC refuses anything else): a lone
    surrogate becomes U+FFFD, so a garbled text still reaches the host,
    which reads it as the rejection it is."""
    return _SURROGATES.sub("\ufffd", s)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        v = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise MalformedRequest(f"decoding {what}: {e}") from e
    if not isinstance(v, dict):
        raise MalformedRequest(f"decoding {what}: want a JSON object, got {type(v).__name__}")
    return v


def request_from_wire(m: pb.ReviewRequest) -> Request:
    """Decode a review request. Anything but a JSON object as the
    proposal, a JSON object (or nothing) as the run context, and a JSON
    array (or nothing) as the history raises MalformedRequest."""
    proposal = _json_object(m.proposal_json, "the proposal")
    pp = m.persona
    persona = Persona(
        name=pp.name,
        system_prompt=pp.system_prompt,
        model=pp.model,
        max_turns=pp.max_turns,
        tools=tuple(Tool(t.name, t.description, t.input_schema_json) for t in pp.tools),
        required_gates=tuple(pp.required_gates),
        permission_mode=pp.permission_mode,
    )
    pc = m.policy
    history: list[Any] = []
    if pc.history_json:
        try:
            h = json.loads(pc.history_json)
        except (ValueError, RecursionError) as e:
            raise MalformedRequest(f"decoding the verdict history: {e}") from e
        if h is not None and not isinstance(h, list):
            raise MalformedRequest("decoding the verdict history: want a JSON array")
        history = h or []
    sop = None
    if pc.HasField("sop"):
        s = pc.sop
        sop = SOP(id=s.id, title=s.title, actions=tuple(s.actions), rollback=s.rollback, steps=tuple(s.steps))
    policy = Policy(
        revision=pc.revision, why=pc.why, sop=sop, denied_tools=tuple(pc.denied_tools), history=history
    )
    run = _json_object(pc.run_json, "the run context") if pc.run_json else None
    try:
        deadline = datetime.fromtimestamp(m.deadline_unix_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError) as e:
        raise MalformedRequest(f"deadline {m.deadline_unix_ms} ms is not a time: {e}") from e
    return Request(
        review_id=m.review_id,
        proposal=proposal,
        proposal_json=m.proposal_json,
        persona=persona,
        policy=policy,
        deadline=deadline,
        run=run,
    )


_U32 = (1 << 32) - 1


def _u32(n: int) -> int:
    return min(max(int(n), 0), _U32)


def response_to_wire(r: Response) -> pb.ReviewResponse:
    """Encode a reviewer's response. Strings are made valid UTF-8; a
    decision that is neither APPROVE nor REJECT goes as unspecified, which
    gated reads as a rejection."""
    if not isinstance(r, Response):
        raise TypeError(f"the reviewer returned {type(r).__name__}, want gated.plugin.Response")
    if not isinstance(r.text, str):
        raise TypeError(f"Response.text is {type(r.text).__name__}, want str")
    out = pb.ReviewResponse(
        text=_utf8(r.text),
        sop_id=_utf8(r.sop_id),
        rollback_path=_utf8(r.rollback_path),
        notes=_utf8(r.notes),
        model=_utf8(r.model),
        turns=_u32(r.turns),
        usage=pb.Usage(prompt_tokens=_u32(r.tokens.prompt), completion_tokens=_u32(r.tokens.completion)),
        missing_work=[_utf8(s) for s in r.missing_work],
        next_round_guidance=_utf8(r.next_round_guidance),
        warnings=[_utf8(s) for s in r.warnings],
        confidence=float(r.confidence),
    )
    if r.decision == Decision.APPROVE:
        out.decision = pb.DECISION_APPROVE
    elif r.decision == Decision.REJECT:
        out.decision = pb.DECISION_REJECT
    for g in r.gates:
        out.gates.append(pb.Gate(name=_utf8(g.name), passed=bool(g.passed), detail=_utf8(g.detail)))
    for c in r.criteria:
        out.criteria.append(
            pb.CriterionResult(
                id=_utf8(c.id),
                confidence=float(c.confidence),
                reason=_utf8(c.reason),
                refs=[_utf8(s) for s in c.refs],
                **{"pass": bool(c.passed)},
            )
        )
    for cm in r.comments:
        wc = pb.Comment(path=_utf8(cm.path), body=_utf8(cm.body))
        if cm.line is not None and 1 <= cm.line <= _U32:
            wc.line = cm.line
        out.comments.append(wc)
    return out
