package grant

import "errors"

// ErrRefused is matched (errors.Is) by every *Error: a grant that does not
// verify, for whatever reason.
var ErrRefused = errors.New("grant refused")

// ErrInvalidKeySet is wrapped by the errors of ParseKeySet and ParseRing
// for a key set or key file that is malformed or breaks the key rules.
var ErrInvalidKeySet = errors.New("invalid grant key set")

// Error is a refusal of a grant. Member names the header or payload
// member, or the check, that failed (alg, typ, kid, signature, format,
// v, gid, iss, tenant, proposal_id, proposal_sha256, action,
// target_sha256, policy_revision, reviewers, iat, exp, max_ttl, retired,
// or the name of a member that is not allowed); Reason says what is
// wrong with it. The message reads "grant refused: <member> <reason>".
type Error struct {
	Member string
	Reason string
}

// Error returns the refusal as one sentence naming the member.
func (e *Error) Error() string { return "grant refused: " + e.Member + " " + e.Reason }

// Is makes every *Error match ErrRefused.
func (e *Error) Is(target error) bool { return target == ErrRefused }

func refuse(member, reason string) error { return &Error{Member: member, Reason: reason} }
