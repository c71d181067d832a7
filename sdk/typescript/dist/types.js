// The v1 wire schema of proposals and verdicts (docs: DESIGN.md, FLEET.md),
// with gated's own JSON member names.
export {};
