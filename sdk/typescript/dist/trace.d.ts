/** The W3C trace context headers, as gated reads them. */
export declare const traceparentHeader = "traceparent";
export declare const tracestateHeader = "tracestate";
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
/** Whether s is a traceparent gated accepts: well formed, version not ff, ids not all zero. */
export declare function validTraceparent(s: string): boolean;
/**
 * The trace headers of one publish: the call's own trace context, which
 * must be valid (an InvalidConfigError names what is wrong), else what the
 * propagator hook gives, when valid, else none.
 */
export declare function traceHeaders(explicit: TraceContext | undefined, propagator: Propagator | undefined): Record<string, string>;
