"""Fuzz the grant decoders with hypothesis: whatever a token, a key set or
gated's answer holds, the verifier raises only its typed error, and accepts
nothing but a token exactly as gated signed it."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gatedkit import vectors
from gated.errors import GrantRefused, GrantUseRefused, KeySetError, Malformed
from gated.grant import Expected, KeySet, canonical_json, es6_number, header_kid, read_use_reply, verify

GRANTS = vectors("grants.json")
KEYSETS = {name: KeySet.from_json(ks) for name, ks in GRANTS["keysets"].items()}
CASES = GRANTS["grants"]
VALID = [c for c in CASES if c["valid"]]


def expected(e: dict[str, str]) -> Expected:
    return Expected.of(tenant=e["tenant"], proposal_id=e["proposal_id"], proposal_sha256=e["proposal_sha256"],
                       action=e["action"], target=e["target_json"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@st.composite
def mutated_tokens(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A vector's token with characters changed, cut or added, or one part
    replaced by the base64url of other JSON."""
    case = draw(st.sampled_from(CASES))
    tok: str = case["token"]
    how = draw(st.integers(0, 4))
    if how == 0 and tok:
        i = draw(st.integers(0, len(tok) - 1))
        tok = tok[:i] + draw(st.sampled_from("AQgw_-.=+/ \u00e9")) + tok[i + 1 :]
    elif how == 1:
        tok = tok[: draw(st.integers(0, len(tok)))]
    elif how == 2:
        i = draw(st.integers(0, len(tok)))
        tok = tok[:i] + draw(st.text(max_size=6)) + tok[i:]
    elif how == 3 and tok.count(".") == 2:
        parts = tok.split(".")
        part = draw(st.integers(0, 1))
        try:
            doc = json.loads(base64.urlsafe_b64decode(parts[part] + "=" * (-len(parts[part]) % 4)))
        except ValueError:
            doc = {}
        if isinstance(doc, dict) and doc:
            doc[draw(st.sampled_from(sorted(doc)))] = draw(json_values)
        parts[part] = b64(json.dumps(doc).encode())
        tok = ".".join(parts)
    else:
        tok = draw(st.text(max_size=120))
    return tok, case


@settings(max_examples=600, deadline=None)
@given(mutated_tokens())
def test_verify_only_refuses_or_accepts_the_signed_token(t: tuple[str, dict[str, Any]]) -> None:
    token, case = t
    keys = KEYSETS[case["keyset"]]
    try:
        claims = verify(token, keys, case.get("now", GRANTS["now"]), expected(case["expect"]))
    except GrantRefused as e:
        assert str(e).startswith("grant refused: ") and e.member
        return
    # Accepted: then it is a valid vector's token, byte for byte.
    assert case["valid"] and token == case["token"]
    assert claims.to_dict() == case["claims"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200).map(lambda b: b.decode("latin-1")), mutated_tokens().map(lambda t: t[0])))
def test_header_kid_only_refuses(token: str) -> None:
    try:
        kid = header_kid(token)
    except GrantRefused:
        return
    assert isinstance(kid, str) and kid


@st.composite
def mutated_keysets(draw: st.DrawFn) -> bytes:
    doc = json.loads(json.dumps(GRANTS["keysets"][draw(st.sampled_from(sorted(GRANTS["keysets"])))]))
    how = draw(st.integers(0, 2))
    if how == 0:
        key = draw(st.sampled_from(doc["keys"]))
        key[draw(st.sampled_from(sorted(key) + ["alg", "use", "jku"]))] = draw(json_values)
    elif how == 1:
        text = json.dumps(doc)
        i = draw(st.integers(0, len(text) - 1))
        return (text[:i] + text[i + 1 :]).encode()
    else:
        doc = draw(json_values)
    return json.dumps(doc).encode()


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=200), mutated_keysets()))
def test_keyset_only_refuses(data: bytes) -> None:
    try:
        ks = KeySet.from_json(data)
    except KeySetError:
        return
    assert KeySet.from_json(json.dumps(ks.to_dict())) == ks


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=100), json_values.map(lambda v: json.dumps(v).encode()),
                 st.fixed_dictionaries({"ok": json_values, "gid": json_values, "error": json_values})
                 .map(lambda v: json.dumps(v).encode())))
def test_use_reply_only_refuses(data: bytes) -> None:
    try:
        gid = read_use_reply(data)
    except (GrantUseRefused, Malformed):
        return
    assert json.loads(data)["ok"] is True and gid


@settings(max_examples=500, deadline=None)
@given(json_values)
def test_jcs_round_trips(v: Any) -> None:
    try:
        canon = canonical_json(v)
    except ValueError:
        return  # a lone surrogate or a number beyond a double
    back = json.loads(canon)
    assert canonical_json(back) == canon
    assert _same(back, v)
    Expected.of(tenant="acme", action="x", target=canon.decode())


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return bool(a == b)


@settings(max_examples=1500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_es6_numbers_read_back(f: float) -> None:
    s = es6_number(f)
    assert float(s) == f or (f == 0 and s == "0")
    a = abs(f)
    assert ("e" in s) == (a != 0 and (a < 1e-6 or a >= 1e21))
    assert not math.isnan(float(s))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(VALID), st.integers(-(2**33), 2**33))
def test_a_valid_grant_holds_exactly_from_iat_minus_skew_until_exp(case: dict[str, Any], delta: int) -> None:
    """Time alone decides: a valid vector verifies at now exactly when
    iat - 60 <= now < exp."""
    c = case["claims"]
    now = case.get("now", GRANTS["now"]) + delta
    try:
        verify(case["token"], KEYSETS[case["keyset"]], now, expected(case["expect"]))
    except GrantRefused as e:
        assert not (c["iat"] - 60 <= now < c["exp"]), str(e)
        assert e.member in ("iat", "exp")
        return
    assert c["iat"] - 60 <= now < c["exp"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_expected_of_proposal_only_refuses(data: bytes) -> None:
    try:
        e = Expected.of_proposal(data)
    except GrantRefused as err:
        assert err.member == "proposal"
        return
    assert isinstance(e.tenant, str) and isinstance(e.proposal_sha256, str)
