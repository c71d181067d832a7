// Package evidence is the audit trail's public evidence: a Merkle tree
// per tenant over the records of the GATED_AUDIT stream (RFC 6962
// hashing, as golang.org/x/mod/sumdb/tlog computes it), checkpoints of
// each tree signed as notes in the C2SP checkpoint format with an
// Ed25519 key whose public half anyone may hold, witness cosignatures,
// inclusion and consistency proofs, and the bundle `gated audit export`
// writes and `gated audit verify --bundle` checks with no NATS and no
// secret.
//
// A tenant's tree is derived from the stream alone: leaf i is the
// RFC 6962 leaf hash of the stored bytes of the tenant's i-th message
// (counting from 0, in stream order), so every gated process, and any
// reader of the stream, rebuilds the same tree. Checkpoints are kept in
// the GATED_CHECKPOINTS stream, one subject per tenant.
package evidence
