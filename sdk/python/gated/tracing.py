"""W3C trace context for the proposals a fleet publishes.

When the optional ``opentelemetry-api`` package is installed and the caller
has a current span, :func:`trace_headers` returns its ``traceparent`` (and
``tracestate``) so that gated's spans for the proposal are children of the
caller's. Without the package, or without a current span, it returns an
empty mapping and nothing about the proposal changes. Install it with
``pip install 'gated[otel]'``; gated never requires it.
"""

from __future__ import annotations

from typing import Any

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"

_propagator: Any
try:  # the API only: no SDK, no exporter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised where the package is absent
    _propagator = None
else:
    _propagator = TraceContextTextMapPropagator()


def available() -> bool:
    """True when opentelemetry-api is installed, so a current span's
    context is propagated."""
    return _propagator is not None


def parent_context(traceparent: str | None, tracestate: str | None = None) -> Any:
    """An OpenTelemetry context whose span is the remote one traceparent
    names (a reviewer plugin's parent: ``Request.traceparent``), for
    ``tracer.start_as_current_span(..., context=...)``. None when
    opentelemetry-api is not installed or traceparent is None; a malformed
    traceparent gives a context without a span, as the W3C asks."""
    if _propagator is None or not traceparent:
        return None
    carrier = {TRACEPARENT_HEADER: traceparent}
    if tracestate:
        carrier[TRACESTATE_HEADER] = tracestate
    return _propagator.extract(carrier)


def trace_headers() -> dict[str, str]:
    """The W3C trace context headers of the current span, or an empty
    mapping when there is none (or opentelemetry-api is not installed)."""
    if _propagator is None:
        return {}
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return {k: carrier[k] for k in (TRACEPARENT_HEADER, TRACESTATE_HEADER) if carrier.get(k)}
