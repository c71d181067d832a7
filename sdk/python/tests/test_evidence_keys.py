"""Whose signatures gated.evidence trusts, on bundles made here with
Ed25519 keys of the test's own: only gated's keys, given by the auditor,
make a checkpoint; a witness counts by its name and key hash; no key a
bundle carries stands in for either."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gated import evidence

BODY = b'{"r":1}'


class Key:
    """An Ed25519 note key: its signer and its verifier key string."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.priv = Ed25519PrivateKey.generate()
        raw = b"\x01" + self.priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.hash = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4]
        self.vkey = f"{name}+{self.hash.hex()}+{base64.b64encode(raw).decode()}"

    def sig_line(self, text: str) -> str:
        return f"\u2014 {self.name} {base64.b64encode(self.hash + self.priv.sign(text.encode())).decode()}\n"


def checkpoint_text(log: str = "gated.example") -> str:
    root = base64.b64encode(evidence.leaf_hash(BODY)).decode()
    return f"{log}/audit/acme\n1\n{root}\ntime 2026-12-08T00:00:00Z\n"


def bundle(*signers: Key, keys: list[Key] | None = None, witness_keys: list[Key] | None = None, log: str = "gated.example") -> list[bytes]:
    """A one-record bundle of tenant acme whose checkpoint signers sign."""
    text = checkpoint_text(log)
    note = text + "\n" + "".join(s.sig_line(text) for s in signers)
    h = {"format": evidence.FORMAT, "tenant": "acme", "keys": [k.vkey for k in keys or []],
         "witness_keys": [k.vkey for k in witness_keys or []], "checkpoints": [note], "consistency": None,
         "range": True, "start": 0, "prefix": None, "records": 1}
    r = {"index": 0, "seq": 1, "body": base64.b64encode(BODY).decode()}
    return [json.dumps(h).encode(), json.dumps(r).encode()]


@pytest.fixture
def gated_key() -> Key:
    return Key("gated.example")


@pytest.fixture
def witness() -> Key:
    return Key("witness.example")


def test_a_genuine_cosigned_bundle_verifies(gated_key: Key, witness: Key) -> None:
    b = bundle(gated_key, witness, keys=[gated_key], witness_keys=[witness])
    res = evidence.verify(b, keys=[gated_key.vkey], witnesses=[witness.vkey])
    assert res.records == 1 and res.witnessed == ["witness.example"] and not res.keys_from_bundle
    assert res.checkpoints[-1].signers == {("gated.example", int.from_bytes(gated_key.hash, "big"))}


def test_a_witness_key_named_as_the_log_signs_nothing(gated_key: Key, tmp_path: Path) -> None:
    """An attacker's key named like gated's, offered as a witness key by
    the bundle, signs a made-up checkpoint: gated never signed it."""
    attacker = Key("gated.example")
    b = bundle(attacker, keys=[gated_key], witness_keys=[attacker])
    with pytest.raises(evidence.EvidenceError, match="witness key gated.example\\+.* is named as a checkpoint key"):
        evidence.verify(b, keys=[gated_key.vkey])
    # As an auditor runs it: refused, exit status 3.
    f = tmp_path / "forged.jsonl"
    f.write_bytes(b"\n".join(b) + b"\n")
    assert evidence.main([str(f), "--key", gated_key.vkey]) == 3
    # Named as a witness on the command line, it is refused all the same.
    b = bundle(gated_key, attacker, keys=[gated_key])
    with pytest.raises(evidence.EvidenceError, match="is named as a checkpoint key"):
        evidence.verify(b, keys=[gated_key.vkey], witnesses=[attacker.vkey])


def test_a_second_key_of_a_witness_name_is_not_the_witness(gated_key: Key, witness: Key, tmp_path: Path) -> None:
    """The bundle carries a key of its own named as the witness asked for;
    its signature is not the witness's cosignature."""
    fake = Key("witness.example")
    b = bundle(gated_key, fake, keys=[gated_key], witness_keys=[fake])
    with pytest.raises(evidence.EvidenceError, match="not cosigned by the witness witness.example"):
        evidence.verify(b, keys=[gated_key.vkey], witnesses=[witness.vkey])
    f = tmp_path / "forged.jsonl"
    f.write_bytes(b"\n".join(b) + b"\n")
    assert evidence.main([str(f), "--key", gated_key.vkey, "--witness-key", witness.vkey]) == 3


def test_only_gated_keys_make_a_checkpoint(gated_key: Key, witness: Key) -> None:
    # A witness alone, even one asked for.
    b = bundle(witness, keys=[gated_key], witness_keys=[witness])
    with pytest.raises(evidence.EvidenceError, match="signed by no known key"):
        evidence.verify(b, keys=[gated_key.vkey], witnesses=[witness.vkey])
    # A witness whose name is the origin's log name.
    b = bundle(witness, keys=[gated_key], witness_keys=[witness], log="witness.example")
    with pytest.raises(evidence.EvidenceError, match="signed by no known key"):
        evidence.verify(b, keys=[gated_key.vkey], witnesses=[witness.vkey])
    # gated's key, for a log of another name.
    b = bundle(gated_key, keys=[gated_key], log="other.example")
    with pytest.raises(evidence.EvidenceError, match="signed by no known key"):
        evidence.verify(b, keys=[gated_key.vkey])
    # Another key of gated's name, that the bundle lists as gated's: the
    # auditor's key is the one that counts.
    other = Key("gated.example")
    b = bundle(other, keys=[other])
    with pytest.raises(evidence.EvidenceError, match="signed by no known key"):
        evidence.verify(b, keys=[gated_key.vkey])


def test_a_witness_signature_that_does_not_verify(gated_key: Key, witness: Key) -> None:
    b = bundle(gated_key, keys=[gated_key])
    h = json.loads(b[0])
    text = checkpoint_text()
    wrong = Key("witness.example")
    # The witness's name and key hash, another key's signature.
    forged = f"\u2014 witness.example {base64.b64encode(witness.hash + wrong.priv.sign(text.encode())).decode()}\n"
    h["checkpoints"] = [h["checkpoints"][0] + forged]
    with pytest.raises(evidence.EvidenceError, match="signature by witness.example does not verify"):
        evidence.verify([json.dumps(h).encode(), b[1]], keys=[gated_key.vkey], witnesses=[witness.vkey])


def test_a_witness_the_bundle_alone_carries_is_not_named(gated_key: Key, witness: Key) -> None:
    b = bundle(gated_key, witness, keys=[gated_key], witness_keys=[witness])
    res = evidence.verify(b, keys=[gated_key.vkey])
    assert res.records == 1 and res.witnessed == []
