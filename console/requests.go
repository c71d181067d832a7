package console

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nkeys"

	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/internal/strictjson"
)

// Limits of the requests the console reads.
const (
	// maxSignInBytes bounds a sign-in request's body.
	maxSignInBytes = 4 << 10
	// maxDecisionBytes bounds a decision request: the signed body, as a
	// JSON string, and the key and signature beside it.
	maxDecisionBytes = 2*operator.MaxMessageBytes + 4<<10
)

// SignInPrefix is put before a challenge in the bytes an operator signs
// to sign in. An operator decision is a JSON object and starts with "{",
// so a sign-in signature can never pass for a decision's, nor the other
// way round.
const SignInPrefix = "gated console sign-in\n"

// SignIn is the body of POST /api/signin: the operator's public key, the
// challenge GET /api/challenge handed out, and the signature, by the
// key's seed, of SignInPrefix followed by the challenge.
type SignIn struct {
	// Key is the operator's nkey public user key (U…).
	Key string `json:"key"`
	// Challenge is the challenge as handed out.
	Challenge string `json:"challenge"`
	// Sig is the Ed25519 signature, base64 (raw URL alphabet, no
	// padding).
	Sig []byte `json:"-"`
}

// Decision is the body of POST /api/decisions: an operator decision
// signed in the browser, as `gated operator decide` would send it on
// NATS. Body is forwarded byte for byte, with Key and Sig as the
// wire.OperatorKeyHeader and wire.OperatorSigHeader headers.
type Decision struct {
	// Body is the signed operator message (operator.Message's JSON).
	Body []byte
	// Key is the signer's nkey public user key (U…).
	Key string
	// Sig is the signature over Body, base64 (raw URL alphabet, no
	// padding), as the header carries it.
	Sig string
	// Message is Body decoded (operator.DecodeMessage).
	Message *operator.Message
}

// DecodeSignIn reads a sign-in request strictly: one JSON object with the
// string members key, challenge and sig and nothing else, the key an
// nkey public user key, the challenge of the size the console hands out,
// the signature 64 bytes of base64. Errors wrap ErrBadRequest and name the
// field.
func DecodeSignIn(data []byte) (*SignIn, error) {
	if len(data) > maxSignInBytes {
		return nil, fmt.Errorf("%w: the body is %d bytes, more than %d", ErrBadRequest, len(data), maxSignInBytes)
	}
	var (
		in   SignIn
		sig  string
		seen = map[string]bool{}
	)
	err := walk(data, func(key string, raw json.RawMessage) error {
		seen[key] = true
		var err error
		switch key {
		case "key":
			in.Key, err = stringField(key, raw)
		case "challenge":
			in.Challenge, err = stringField(key, raw)
		case "sig":
			sig, err = stringField(key, raw)
		default:
			err = fmt.Errorf("%w: %s: unknown field; a sign-in has key, challenge and sig", ErrBadRequest, strconv.Quote(clip(key)))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"key", "challenge", "sig"} {
		if !seen[k] {
			return nil, fmt.Errorf("%w: %s is required", ErrBadRequest, k)
		}
	}
	if !nkeys.IsValidPublicUserKey(in.Key) {
		return nil, fmt.Errorf("%w: key: not an nkey public user key (U…)", ErrBadRequest)
	}
	if c, err := base64.RawURLEncoding.DecodeString(in.Challenge); err != nil || len(c) != challengeBytes {
		return nil, fmt.Errorf("%w: challenge: not a challenge the console hands out", ErrBadRequest)
	}
	if in.Sig, err = base64.RawURLEncoding.DecodeString(sig); err != nil || len(in.Sig) != 64 {
		return nil, fmt.Errorf("%w: sig: want a 64-byte Ed25519 signature in base64 (raw URL alphabet, no padding)", ErrBadRequest)
	}
	return &in, nil
}

// DecodeDecision reads a decision request strictly: one JSON object with
// the string members body, key and sig and nothing else; body must decode
// as an operator message (operator.DecodeMessage), key must be an nkey
// public user key and sig non-empty base64. The signature is not checked
// here: gated checks it when the decision is forwarded. Errors wrap
// ErrBadRequest and name the field, or are the *operator.Refusal of the
// body.
func DecodeDecision(data []byte) (*Decision, error) {
	if len(data) > maxDecisionBytes {
		return nil, fmt.Errorf("%w: the body is %d bytes, more than %d", ErrBadRequest, len(data), maxDecisionBytes)
	}
	var (
		d    Decision
		body string
		seen = map[string]bool{}
	)
	err := walk(data, func(key string, raw json.RawMessage) error {
		seen[key] = true
		var err error
		switch key {
		case "body":
			body, err = stringField(key, raw)
		case "key":
			d.Key, err = stringField(key, raw)
		case "sig":
			d.Sig, err = stringField(key, raw)
		default:
			err = fmt.Errorf("%w: %s: unknown field; a decision has body, key and sig", ErrBadRequest, strconv.Quote(clip(key)))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"body", "key", "sig"} {
		if !seen[k] {
			return nil, fmt.Errorf("%w: %s is required", ErrBadRequest, k)
		}
	}
	if !nkeys.IsValidPublicUserKey(d.Key) {
		return nil, fmt.Errorf("%w: key: not an nkey public user key (U…)", ErrBadRequest)
	}
	if s, err := base64.RawURLEncoding.DecodeString(d.Sig); err != nil || len(s) == 0 {
		return nil, fmt.Errorf("%w: sig: want the signature in base64 (raw URL alphabet, no padding)", ErrBadRequest)
	}
	d.Body = []byte(body)
	if d.Message, err = operator.DecodeMessage(d.Body); err != nil {
		return nil, err
	}
	return &d, nil
}

// walk reads one JSON object member by member, wording its errors as
// ErrBadRequest.
func walk(data []byte, fn func(key string, raw json.RawMessage) error) error {
	err := strictjson.Object(data, fn)
	var member *strictjson.MemberError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBadRequest):
		return err
	case errors.As(err, &member):
		if errors.Is(member.Err, strictjson.ErrDuplicateMember) {
			return fmt.Errorf("%w: %s: appears twice", ErrBadRequest, strconv.Quote(clip(member.Key)))
		}
		return fmt.Errorf("%w: %s: is not JSON", ErrBadRequest, strconv.Quote(clip(member.Key)))
	case errors.Is(err, strictjson.ErrNotObject):
		return fmt.Errorf("%w: want a JSON object", ErrBadRequest)
	case errors.Is(err, strictjson.ErrTrailingData):
		return fmt.Errorf("%w: data after the JSON object", ErrBadRequest)
	}
	return fmt.Errorf("%w: not JSON: %v", ErrBadRequest, err)
}

func stringField(key string, raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", fmt.Errorf("%w: %s: must be a string", ErrBadRequest, key)
	}
	return s, nil
}

// clip keeps a quoted token short in a message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
