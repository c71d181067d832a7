// W3C trace context for the proposals a fleet publishes. The client has no
// dependency on @opentelemetry/api: a caller hands it a traceparent per
// call (CallOptions.trace), or a propagator hook once (ClientOptions.propagator)
// that fills a carrier from its active context, e.g. with
// @opentelemetry/api: `(carrier) => propagation.inject(context.active(), carrier)`.

import { InvalidConfigError } from "./errors.js";

/** The W3C trace context headers, as gated reads them. */
export const traceparentHeader = "traceparent";
export const tracestateHeader = "tracestate";

/** A W3C trace context: the parent of gated's spans for one proposal. */
export interface TraceContext {
  /** `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case. */
  traceparent: string;
  /** Vendor data, passed on as given when traceparent is valid. */
  tracestate?: string;
}

/**
 * A hook that writes the active trace context into carrier, as an
 * OpenTelemetry TextMapPropagator's inject does. Only traceparent and
 * tracestate are read back; a malformed traceparent is ignored, as the W3C
 * specification asks.
 */
export type Propagator = (carrier: Record<string, string>) => void;

const traceparentRe = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Whether s is a traceparent gated accepts: well formed, version not ff, ids not all zero. */
export function validTraceparent(s: string): boolean {
  const m = traceparentRe.exec(s);
  if (!m) {
    return false;
  }
  return m[1] !== "ff" && !/^0+$/.test(m[2]!) && !/^0+$/.test(m[3]!);
}

/**
 * The trace headers of one publish: the call's own trace context, which
 * must be valid (an InvalidConfigError names what is wrong), else what the
 * propagator hook gives, when valid, else none.
 */
export function traceHeaders(explicit: TraceContext | undefined, propagator: Propagator | undefined): Record<string, string> {
  if (explicit !== undefined) {
    if (typeof explicit.traceparent !== "string" || !validTraceparent(explicit.traceparent)) {
      throw new InvalidConfigError(
        `trace.traceparent ${JSON.stringify(explicit.traceparent)} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero)`,
      );
    }
    return withState(explicit.traceparent, explicit.tracestate);
  }
  if (propagator === undefined) {
    return {};
  }
  const carrier: Record<string, string> = {};
  try {
    propagator(carrier);
  } catch {
    return {}; // tracing must never fail a proposal
  }
  const tp = carrier[traceparentHeader];
  if (typeof tp !== "string" || !validTraceparent(tp)) {
    return {};
  }
  return withState(tp, carrier[tracestateHeader]);
}

function withState(traceparent: string, tracestate: unknown): Record<string, string> {
  const out: Record<string, string> = { [traceparentHeader]: traceparent };
  if (typeof tracestate === "string" && tracestate !== "" && !/[\r\n]/.test(tracestate)) {
    out[tracestateHeader] = tracestate;
  }
  return out;
}
