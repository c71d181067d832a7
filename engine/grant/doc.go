// Package grant is the format of gated's signed grants: the compact JWS
// (Ed25519, alg EdDSA) that an approved verdict carries, the key sets that
// verify it, and the RFC 8785 canonical JSON that binds a grant to its
// target. Verify is what every executor runs before an approved action;
// docs/GRANTS.md is the normative description. The package has no
// transport: gated's bus code stores, publishes and consumes grants.
package grant
