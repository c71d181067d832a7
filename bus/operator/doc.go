// Package operator carries operator decisions: the signed judgements by
// which people decide an action the policy held for an operator (approve
// or reject, before its deadline) and the manual criteria a run verdict is
// held for.
//
// An operator signs a decision (Sign)
// with an nkey user seed and sends it (Send) to
// gated.operator.<tenant>.<proposal_id>; gated accepts it only from a key
// of its operators file (List, read by LoadList), for a tenant that file
// allows, with a signature over the exact body and a fresh signed_at
// (List.Verify), and then has the engine replace the held verdict
// (Endpoint, served by package intake's review service).
//
// The message is strict JSON (DecodeMessage): one object, no unknown or
// repeated member, each field's type and token checked. A refusal is a
// *Refusal carrying the micro error code the endpoint replies with (400,
// 401, 403, 404, 409 or 503); it matches ErrRefused for every 4xx code
// and the sentinel of its own code, so callers branch with errors.Is.
//
// The package needs NATS (nats.go and micro) and nkeys but not the NATS
// server, OPA or the plugin host, so an operator's tool stays light
// (TestOperatorDoesNotCompileTheServer).
package operator
