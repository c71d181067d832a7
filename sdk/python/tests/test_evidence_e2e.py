"""The Python verifier of evidence bundles, on bundles a real gated made:
`gated audit checkpoint` signs, `gated audit export` and `prove` write, and
gated.evidence checks them, and catches each tampering."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import gated
from gated import evidence
from gatedkit import Gated, example_proposal, start_gated


@dataclass
class Bundles:
    gated_bin: str
    nats_url: str
    key_file: Path
    public: str
    whole: bytes
    proof: bytes
    beta_checkpoint: str


def _run(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def bundles(gated_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bundles]:
    g: Gated = start_gated(gated_bin)
    d = tmp_path_factory.mktemp("evidence")
    key_file = d / "checkpoint.key"
    try:
        public = _run(gated_bin, "audit", "checkpoint", "--checkpoint-key-file", str(key_file), "--create-key", "gated.example").strip()

        async def propose(tenant: str, ids: list[str]) -> None:
            c = await gated.Client.connect(g.nats_url)
            try:
                for id in ids:
                    try:
                        await c.propose(example_proposal("rejected-skip-review.json", id=id, tenant=tenant), timeout=30)
                    except gated.GatedError:
                        pass  # a rejection is a decision recorded all the same
            finally:
                await c.close()

        asyncio.run(propose("acme", ["ev-py-1", "ev-py-2", "ev-py-3"]))
        asyncio.run(propose("beta", ["ev-py-b1", "ev-py-b2", "ev-py-b3", "ev-py-b4"]))
        sign = [gated_bin, "audit", "checkpoint", "--nats-url", g.nats_url, "--checkpoint-key-file", str(key_file)]
        _run(*sign)
        asyncio.run(propose("acme", ["ev-py-4", "ev-py-5"]))
        _run(*sign, "--tenant", "acme")
        read = ["--nats-url", g.nats_url, "--key", public]
        whole = _run(gated_bin, "audit", "export", "--tenant", "acme", *read).encode()
        proof = _run(gated_bin, "audit", "prove", "acme", "ev-py-2", *read).encode()
        beta = json.loads(_run(gated_bin, "audit", "export", "--tenant", "beta", *read).splitlines()[0])
        yield Bundles(gated_bin, g.nats_url, key_file, public, whole, proof, beta["checkpoints"][-1])
    finally:
        g.kill_hard()


def lines(b: bytes) -> list[bytes]:
    return b.rstrip(b"\n").split(b"\n")


def header(b: bytes) -> dict[str, object]:
    h: dict[str, object] = json.loads(lines(b)[0])
    return h


def with_header(b: bytes, **changes: object) -> list[bytes]:
    ls = lines(b)
    h = json.loads(ls[0])
    h.update(changes)
    return [json.dumps(h).encode(), *ls[1:]]


def test_bundles_verify(bundles: Bundles) -> None:
    res = evidence.verify(lines(bundles.whole), keys=[bundles.public], tenant="acme")
    assert res.tenant == "acme" and len(res.checkpoints) == 2 and not res.keys_from_bundle
    assert res.records == res.checkpoints[-1].size == header(bundles.whole)["records"]
    res = evidence.verify(lines(bundles.proof), keys=[bundles.public])
    assert res.records >= 1
    # And from the command line, as an auditor runs it.
    out = subprocess.run([sys.executable, "-m", "gated.evidence", "-", "--key", bundles.public, "--tenant", "acme"],
                         input=bundles.whole, capture_output=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert b"checkpoint(s) consistent" in out.stdout
    # The module alone, as a file an auditor copies: the standard library
    # and cryptography only.
    alone = subprocess.run([sys.executable, "-I", evidence.__file__, "-", "--key", bundles.public],
                           input=bundles.whole, capture_output=True, check=False, timeout=60)
    assert alone.returncode == 0, alone.stderr
    # The Go verifier agrees.
    go = subprocess.run([bundles.gated_bin, "audit", "verify", "--bundle", "-", "--key", bundles.public],
                        input=bundles.whole, capture_output=True, check=False, timeout=60)
    assert go.returncode == 0, go.stderr


def _record(line: bytes) -> dict[str, object]:
    r: dict[str, object] = json.loads(line)
    return r


def _changed(line: bytes) -> bytes:
    r = _record(line)
    body = bytearray(base64.b64decode(str(r["body"])))
    body[-3] ^= 1
    r["body"] = base64.b64encode(bytes(body)).decode()
    return json.dumps(r).encode()


def _forged(bundles: Bundles, size: int, root: bytes) -> str:
    """A checkpoint of acme signed with gated's own key (its seed read from
    the key file), as whoever holds the key could sign a second history."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    skey = bundles.key_file.read_text().split()[0]
    _, _, name, hash_hex, b64 = skey.split("+", 4)
    seed = base64.b64decode(b64)[1:]
    text = f"{name}/audit/acme\n{size}\n{base64.b64encode(root).decode()}\ntime 2026-01-01T00:00:00Z\n"
    sig = Ed25519PrivateKey.from_private_bytes(seed).sign(text.encode())
    return text + "\n\u2014 " + name + " " + base64.b64encode(bytes.fromhex(hash_hex) + sig).decode() + "\n"


def test_tampering_is_caught(bundles: Bundles) -> None:
    ls = lines(bundles.whole)
    h = header(bundles.whole)
    records = int(str(h["records"]))
    assert records >= 5
    cps = list(h["checkpoints"])  # type: ignore[call-overload]
    other = subprocess.run([bundles.gated_bin, "audit", "checkpoint", "--checkpoint-key-file",
                            str(bundles.key_file.parent / "other.key"), "--create-key", "gated.example"],
                           capture_output=True, text=True, check=True).stdout.strip()
    first_size = int(cps[0].split("\n")[1])
    cases: list[tuple[str, list[bytes], dict[str, object], str]] = [
        ("a record changed", [*ls[:3], _changed(ls[3]), *ls[4:]], {}, "do not hash to the root"),
        ("a record removed", with_header(b"\n".join([*ls[:3], *ls[4:]]), records=records - 1), {}, "1 record(s) were removed"),
        ("a record inserted", with_header(b"\n".join([*ls[:4], ls[3], *ls[4:]]), records=records + 1), {}, "a record was inserted"),
        ("records reordered", [*ls[:2], ls[3], ls[2], *ls[4:]], {}, "records were reordered"),
        ("a bad signature", with_header(bundles.whole, checkpoints=[cps[0], cps[1][:-6] + ("A" if cps[1][-6] != "A" else "B") + cps[1][-5:]]), {}, "does not verify"),
        ("an unknown key", ls, {"keys": [other]}, "signed by no known key"),
        ("a fork", with_header(bundles.whole, checkpoints=[cps[0], _forged(bundles, first_size, b"\x07" * 32), cps[1]]), {}, "fork: checkpoints 1 and 2"),
        ("an inconsistent head", with_header(bundles.whole, checkpoints=[cps[0], _forged(bundles, records, b"\x07" * 32)]), {}, "fork: checkpoint 2"),
        ("another tenant's checkpoint", with_header(bundles.whole, checkpoints=[bundles.beta_checkpoint]), {}, "tenant 'beta'"),
        ("a proof for another tenant", with_header(bundles.proof, tenant="beta", checkpoints=[bundles.beta_checkpoint], consistency=[]), {}, "is not in the tree"),
        ("another tenant's bundle", ls, {"tenant": "beta"}, "a bundle of tenant 'acme', not of 'beta'"),
        ("records cut from the end", with_header(b"\n".join(ls[:-1]), records=records - 1), {}, "records were removed from the end"),
    ]
    for name, tampered, opts, want in cases:
        kw: dict[str, object] = {"keys": [bundles.public], **opts}
        with pytest.raises(evidence.EvidenceError) as e:
            evidence.verify(tampered, **kw)  # type: ignore[arg-type]
        assert want in str(e.value), f"{name}: {e.value}"
        # The Go verifier catches it too.
        go_keys = [str(k) for k in kw["keys"]]  # type: ignore[attr-defined]
        args = [bundles.gated_bin, "audit", "verify", "--bundle", "-"]
        for k in go_keys:
            args += ["--key", k]
        if "tenant" in opts:
            args += ["--tenant", str(opts["tenant"])]
        go = subprocess.run(args, input=b"\n".join(tampered) + b"\n", capture_output=True, check=False, timeout=60)
        assert go.returncode == 3, f"{name}: gated verify --bundle exit {go.returncode}: {go.stderr!r}"


def test_merkle_helpers_match_rfc6962() -> None:
    leaves = [bytes([i]) for i in range(13)]

    def mth(ls: list[bytes]) -> bytes:
        if not ls:
            return hashlib.sha256(b"").digest()
        if len(ls) == 1:
            return evidence.leaf_hash(ls[0])
        k = 1
        while k * 2 < len(ls):
            k *= 2
        return evidence.node_hash(mth(ls[:k]), mth(ls[k:]))

    for n in range(14):
        f = evidence.Frontier(0, [])
        for leaf in leaves[:n]:
            f.append(evidence.leaf_hash(leaf))
        assert f.root() == mth(leaves[:n])


def _note_key(name: str) -> tuple[str, Callable[[str], str]]:
    """A new Ed25519 note key: its verifier key, and what signs a note's text."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    priv = Ed25519PrivateKey.generate()
    raw = b"\x01" + priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    key_hash = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4]

    def sig_line(text: str) -> str:
        return f"\u2014 {name} {base64.b64encode(key_hash + priv.sign(text.encode())).decode()}\n"

    return f"{name}+{key_hash.hex()}+{base64.b64encode(raw).decode()}", sig_line


def _note_text(msg: str) -> str:
    return msg[: msg.rfind("\n\n") + 1]


def test_keys_a_bundle_carries_are_not_gated_or_a_witness(bundles: Bundles) -> None:
    """A real export, its checkpoints re-signed or cosigned by keys the
    bundle itself carries: neither verifier takes them for gated's or for
    the witness asked for, and both take a genuine witness's cosignature."""
    cps = [str(c) for c in header(bundles.whole)["checkpoints"]]  # type: ignore[attr-defined]
    attacker, attacker_sign = _note_key("gated.example")
    witness, witness_sign = _note_key("witness.example")
    fake, fake_sign = _note_key("witness.example")
    last = cps[-1]
    cases: list[tuple[str, list[bytes], list[str], str]] = [
        ("an attacker's key named as gated's, offered as a witness key",
         with_header(bundles.whole, witness_keys=[attacker],
                     checkpoints=[_note_text(c) + "\n" + attacker_sign(_note_text(c)) for c in cps]),
         [], "is named as a checkpoint key"),
        ("a second key of the witness's name",
         with_header(bundles.whole, witness_keys=[fake], checkpoints=[*cps[:-1], last + fake_sign(_note_text(last))]),
         [witness], "not cosigned by the witness witness.example"),
    ]
    for name, forged, witnesses, want in cases:
        with pytest.raises(evidence.EvidenceError, match=want):
            evidence.verify(forged, keys=[bundles.public], witnesses=witnesses)
        args = [bundles.gated_bin, "audit", "verify", "--bundle", "-", "--key", bundles.public]
        for w in witnesses:
            args += ["--witness-key", w]
        go = subprocess.run(args, input=b"\n".join(forged) + b"\n", capture_output=True, check=False, timeout=60)
        assert go.returncode == 3 and want.encode() in go.stderr, f"{name}: gated verify --bundle exit {go.returncode}: {go.stderr!r}"
    cosigned = with_header(bundles.whole, witness_keys=[witness], checkpoints=[*cps[:-1], last + witness_sign(_note_text(last))])
    res = evidence.verify(cosigned, keys=[bundles.public], witnesses=[witness])
    assert res.witnessed == ["witness.example"]
    go = subprocess.run([bundles.gated_bin, "audit", "verify", "--bundle", "-", "--key", bundles.public, "--witness-key", witness],
                        input=b"\n".join(cosigned) + b"\n", capture_output=True, check=False, timeout=60)
    assert go.returncode == 0 and b"cosigned by witness.example" in go.stdout, go.stderr
