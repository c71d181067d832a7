// The types of gated.mjs, for the tests written in TypeScript (test/integrations).
export interface Gated {
  natsURL: string;
  httpURL: string;
  logs(): string;
  kill(): Promise<void>;
  stop(): Promise<void>;
}
export interface HoldGated extends Gated {
  /** Signs and sends alice's decision on acme's proposal id with `gated operator decide`. */
  decide(id: string, ...flags: string[]): Promise<{ code: number; output: string }>;
}
export const repoRoot: string;
export function gatedBinary(): string;
export function startGated(...extra: string[]): Promise<Gated>;
export function startHoldGated(): Promise<HoldGated>;
