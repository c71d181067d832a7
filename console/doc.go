// Package console is gated's web console for operators, served by
// `gated serve --http` under /: a live feed of verdicts, each proposal's
// page (the proposal, the policy's denies and rules, the reviews, the
// audit records with their verification status), the queue of verdicts
// held for an operator with their deadlines, run reviews by run, each
// reviewer's track record (audit.ReadTrackRecord, as `gated report
// reviewers` reads it), each tenant's budgets (budget.Store.Usage, as
// `gated budgets show` reads them), and the plugins and policy gated
// serves.
//
// Operators sign in with their nkey: the server hands out a single-use
// challenge (GET /api/challenge), the browser signs it with the seed it
// imported as a non-extractable Ed25519 key, and the server checks the
// signature against the operators file (package bus/operator) before it
// sets a session cookie (HttpOnly, SameSite=Strict, Secure under TLS,
// expiring). The session is scoped to the operator's tenants: every
// handler checks the tenant it serves, and a request for another tenant's
// data is refused (403) and audited as gated.EventConsoleRefused.
//
// A decision is signed in the browser over the exact body `gated operator
// decide` signs (operator.Sign), and the server forwards body and
// signature unchanged to gated.operator.<tenant>.<proposal_id>, where
// gated verifies it exactly as a decision from the command line. The
// seed never leaves the browser.
//
// The front end is plain ES modules, embedded in the binary (no network
// needed), served under a Content-Security-Policy that allows only the
// console's own scripts and styles; pages build the DOM with textContent,
// never HTML from data.
package console
