"""Checks an evidence bundle of gated's audit trail with no NATS and no
secret: ``python -m gated.evidence FILE --key KEY``.

A bundle (``gated audit export`` or ``gated audit prove``) is JSON lines:
a header with the tenant's signed checkpoints (C2SP checkpoints as signed
notes, Ed25519), the consistency proofs between them and the public keys,
then one line per audit record: its index in the tenant's Merkle tree
(RFC 6962 hashing), its stream sequence, its stored bytes, and, outside a
range, its inclusion proof. docs/AUDIT.md#evidence describes it; this
module checks what ``gated audit verify --bundle`` checks, with the
standard library and ``cryptography``'s Ed25519.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, BinaryIO

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "gated-evidence/1"
MAX_SIZE = 1 << 60


class EvidenceError(Exception):
    """The bundle does not verify; the message names what."""


@dataclass(frozen=True)
class PublicKey:
    """A note verifier key, ``<name>+<hash>+<base64(1 || Ed25519 key)>``."""

    name: str
    key_hash: int
    key: Ed25519PublicKey

    @property
    def signer(self) -> tuple[str, int]:
        """What a signature line names: the key's name and hash."""
        return self.name, self.key_hash

    def __str__(self) -> str:
        return f"{self.name}+{self.key_hash:08x}"

    @classmethod
    def parse(cls, vkey: str) -> PublicKey:
        parts = vkey.split("+", 2)
        if len(parts) != 3 or not parts[0] or len(parts[1]) != 8:
            raise EvidenceError(f"malformed public key {vkey!r}")
        name, hash_hex, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
            key_hash = int(hash_hex, 16)
        except ValueError as e:
            raise EvidenceError(f"malformed public key {vkey!r}") from e
        if len(raw) != 33 or raw[0] != 1:
            raise EvidenceError(f"public key {vkey!r} is not an Ed25519 key")
        if int.from_bytes(hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4], "big") != key_hash:
            raise EvidenceError(f"public key {vkey!r}: its hash does not match")
        return cls(name, key_hash, Ed25519PublicKey.from_public_bytes(raw[1:]))


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head: origin ``<log name>/audit/<tenant>``, size, root.
    signers are the gated keys whose signatures verified, cosigners the
    witness keys', each as (name, key hash)."""

    origin: str
    size: int
    root: bytes
    time: datetime
    signers: frozenset[tuple[str, int]]
    cosigners: frozenset[tuple[str, int]]
    text: str

    @property
    def tenant(self) -> str:
        return self.origin.rpartition("/audit/")[2]


def _sig_lines(msg: str) -> tuple[str, list[tuple[str, int, bytes]]]:
    split = msg.rfind("\n\n")
    if split < 0 or not msg.endswith("\n"):
        raise EvidenceError("malformed checkpoint note")
    text, sigs = msg[: split + 1], msg[split + 2 :]
    out = []
    for line in sigs.splitlines():
        if not line.startswith("\u2014 "):
            raise EvidenceError("malformed checkpoint note")
        name, _, b64 = line[2:].partition(" ")
        try:
            raw = base64.b64decode(b64, validate=True)
        except ValueError as e:
            raise EvidenceError("malformed checkpoint note") from e
        if len(raw) < 5:
            raise EvidenceError("malformed checkpoint note")
        out.append((name, int.from_bytes(raw[:4], "big"), raw[4:]))
    return text, out


def _verified(text: str, sigs: Sequence[tuple[str, int, bytes]], keys: Sequence[PublicKey]) -> frozenset[tuple[str, int]]:
    """The (name, key hash) of the keys whose signatures verify; a
    signature that a key of its name and hash does not verify is an error."""
    out = set()
    for name, key_hash, sig in sigs:
        for k in keys:
            if k.signer == (name, key_hash):
                try:
                    k.key.verify(sig, text.encode())
                except InvalidSignature as e:
                    raise EvidenceError(f"checkpoint signature by {name} does not verify") from e
                out.add(k.signer)
    return frozenset(out)


def open_checkpoint(msg: str, keys: Sequence[PublicKey], witnesses: Sequence[PublicKey], tenant: str) -> Checkpoint:
    """Checks a signed checkpoint: a valid signature by one of gated's keys
    (keys) named as the log, every known key's signature valid, and its
    tenant. A witness's signature is a cosignature only: it never stands
    for gated's, whatever its name."""
    text, sigs = _sig_lines(msg)
    signers = _verified(text, sigs, keys)
    cosigners = _verified(text, sigs, witnesses)
    lines = text.split("\n")
    if len(lines) != 5 or lines[4] != "" or not lines[3].startswith("time "):
        raise EvidenceError("malformed checkpoint: not four lines")
    origin, size_s, root_b64, time_line = lines[:4]
    if not size_s.isdigit() or str(int(size_s)) != size_s or int(size_s) > MAX_SIZE:
        raise EvidenceError("malformed checkpoint: bad tree size")
    try:
        root = base64.b64decode(root_b64, validate=True)
        at = datetime.fromisoformat(time_line[5:])
    except ValueError as e:
        raise EvidenceError("malformed checkpoint") from e
    if len(root) != 32:
        raise EvidenceError("malformed checkpoint: bad root hash")
    log, sep, cp_tenant = origin.rpartition("/audit/")
    if not sep or not log or not cp_tenant:
        raise EvidenceError(f"checkpoint origin {origin!r} names no tenant")
    if cp_tenant != tenant:
        raise EvidenceError(f"checkpoint of tenant {cp_tenant!r}'s log, not of tenant {tenant!r}")
    if not any(name == log for name, _ in signers):
        raise EvidenceError("checkpoint signed by no known key")
    return Checkpoint(origin, int(size_s), root, at, signers, cosigners, text)


def leaf_hash(body: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + body).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


class Frontier:
    """A tree's root from the frontier of its first leaves (the roots of
    its complete subtrees, largest first) and the leaves after them."""

    def __init__(self, size: int, prefix: Sequence[bytes]) -> None:
        if size < 0 or bin(size).count("1") != len(prefix):
            raise EvidenceError("the prefix does not hold one hash for each complete subtree of its size")
        self.size = size
        self.stack = list(prefix)

    def append(self, leaf: bytes) -> None:
        self.stack.append(leaf)
        n = self.size
        while n & 1:
            right = self.stack.pop()
            self.stack[-1] = node_hash(self.stack[-1], right)
            n >>= 1
        self.size += 1

    def root(self) -> bytes:
        if not self.stack:
            return hashlib.sha256(b"").digest()
        h = self.stack[-1]
        for left in reversed(self.stack[:-1]):
            h = node_hash(left, h)
        return h


def check_inclusion(proof: Sequence[bytes], size: int, root: bytes, index: int, leaf: bytes) -> bool:
    """RFC 9162's verification of an inclusion proof."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def check_consistency(proof: Sequence[bytes], first: int, first_root: bytes, second: int, second_root: bytes) -> bool:
    """RFC 9162's verification of a consistency proof, 0 < first < second."""
    if not 0 < first < second:
        return False
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    if not path:
        return False
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0


@dataclass
class Result:
    """What a bundle proved."""

    tenant: str
    checkpoints: list[Checkpoint]
    records: int
    keys_from_bundle: bool
    witnessed: list[str] = field(default_factory=list)


def _b64(v: Any) -> bytes:
    if not isinstance(v, str):
        raise EvidenceError("a hash or body is not a base64 string")
    try:
        return base64.b64decode(v, validate=True)
    except ValueError as e:
        raise EvidenceError("a hash or body is not base64") from e


def _hashes(v: Any) -> list[bytes]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise EvidenceError("a proof is not a list of hashes")
    out = [_b64(h) for h in v]
    if any(len(h) != 32 for h in out):
        raise EvidenceError("a proof holds a hash that is not 32 bytes")
    return out


def _int(d: dict[str, Any], key: str) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_SIZE:
        raise EvidenceError(f"{key!r} is not a count")
    return v


HEADER_KEYS = {"format", "tenant", "keys", "witness_keys", "checkpoints", "consistency", "range", "start", "prefix", "records"}
RECORD_KEYS = {"index", "seq", "body", "proof"}


def verify(lines: Iterable[bytes], keys: Sequence[str] = (), witnesses: Sequence[str] = (), tenant: str = "") -> Result:
    """Checks a bundle given as its lines; raises EvidenceError."""
    it: Iterator[bytes] = iter(lines)
    try:
        h = json.loads(next(it))
    except StopIteration as e:
        raise EvidenceError("no header line") from e
    except ValueError as e:
        raise EvidenceError(f"header: {e}") from e
    if not isinstance(h, dict) or h.get("format") != FORMAT:
        raise EvidenceError(f"format {h.get('format') if isinstance(h, dict) else None!r}, not {FORMAT!r}")
    if set(h) - HEADER_KEYS:
        raise EvidenceError(f"header: unknown member {sorted(set(h) - HEADER_KEYS)[0]!r}")
    bundle_tenant = h.get("tenant")
    if not isinstance(bundle_tenant, str):
        raise EvidenceError("header: no tenant")
    if tenant and tenant != bundle_tenant:
        raise EvidenceError(f"a bundle of tenant {bundle_tenant!r}, not of {tenant!r}")
    keys_from_bundle = not keys
    gated_keys = [PublicKey.parse(k) for k in (keys or h.get("keys") or [])]
    if not gated_keys:
        raise EvidenceError("no checkpoint key given and none in the bundle")
    required = [PublicKey.parse(k) for k in witnesses]
    witness_keys = required + [PublicKey.parse(k) for k in h.get("witness_keys") or [] if k not in witnesses]
    for w in witness_keys:
        if any(w.name == k.name for k in gated_keys):
            raise EvidenceError(f"witness key {w} is named as a checkpoint key: a witness's signature cannot be told from gated's")
    notes = h.get("checkpoints") or []
    if not notes:
        raise EvidenceError("no checkpoint")
    cps = []
    for i, msg in enumerate(notes):
        try:
            cps.append(open_checkpoint(msg, gated_keys, witness_keys, bundle_tenant))
        except EvidenceError as e:
            raise EvidenceError(f"checkpoint {i + 1}: {e}") from e
    proofs = {(p["from"], p["to"]): _hashes(p.get("proof")) for p in h.get("consistency") or []}
    for i in range(1, len(cps)):
        a, b = cps[i - 1], cps[i]
        if a.size == b.size and a.root != b.root:
            raise EvidenceError(f"fork: checkpoints {i} and {i + 1} are both signed for tree size {a.size} with different roots")
        if a.size > b.size:
            raise EvidenceError(f"checkpoint {i + 1} (size {b.size}) follows a larger one (size {a.size})")
        if a.size == b.size or a.size == 0:
            continue
        if (a.size, b.size) not in proofs:
            raise EvidenceError(f"no consistency proof from tree size {a.size} to {b.size}")
        if not check_consistency(proofs[(a.size, b.size)], a.size, a.root, b.size, b.root):
            raise EvidenceError(f"fork: checkpoint {i + 1} (size {b.size}) is not consistent with checkpoint {i} (size {a.size}): the log was rewritten")
    last = cps[-1]
    for w in required:
        if w.signer not in last.cosigners:
            raise EvidenceError(f"the last checkpoint is not cosigned by the witness {w.name}")
    is_range = h.get("range") is True
    start = _int(h, "start")
    front = Frontier(start, _hashes(h.get("prefix"))) if is_range else None
    prev, n, gap = -1, 0, ""
    for line in it:
        if not line.strip():
            raise EvidenceError(f"record line {n + 1}: empty")
        try:
            r = json.loads(line)
        except ValueError as e:
            raise EvidenceError(f"record line {n + 1}: {e}") from e
        if not isinstance(r, dict) or set(r) - RECORD_KEYS:
            raise EvidenceError(f"record line {n + 1}: not a record line")
        index, seq, body = _int(r, "index"), _int(r, "seq"), _b64(r.get("body"))
        want = start if prev < 0 else prev + 1
        if index >= last.size:
            raise EvidenceError(f"the record at index {index} (stream sequence {seq}) lies outside the last checkpoint (size {last.size}): a record was inserted")
        if is_range or index <= prev:
            if index == prev:
                raise EvidenceError(f"index {index} appears twice (stream sequence {seq}): a record was inserted")
            if index < want:
                raise EvidenceError(f"index {index} (stream sequence {seq}) comes after index {prev}: records were reordered")
            if index > want and not gap:
                gap = f"index {index} (stream sequence {seq}) follows index {want - 1}: {index - want} record(s) were removed"
        prev = max(prev, index)
        leaf = leaf_hash(body)
        if front is not None:
            front.append(leaf)
        elif not check_inclusion(_hashes(r.get("proof")), last.size, last.root, index, leaf):
            raise EvidenceError(f"the record at index {index} (stream sequence {seq}) is not in the tree of the last checkpoint (size {last.size}): it was changed, or belongs to another tenant or position")
        n += 1
    if gap:
        raise EvidenceError(gap)
    if n != _int(h, "records"):
        raise EvidenceError(f"{n} record lines, the header counts {h['records']}")
    if front is not None:
        if front.size != last.size:
            raise EvidenceError(f"the records end at index {front.size - 1}, the last checkpoint covers {last.size}: records were removed from the end")
        if front.root() != last.root:
            raise EvidenceError(f"the records do not hash to the root of the last checkpoint (size {last.size}): a record was changed, inserted, removed or reordered")
    # Only the witnesses the caller names count: a key the bundle carries
    # proves nothing about who holds it.
    witnessed = [w.name for w in required]
    return Result(bundle_tenant, cps, n, keys_from_bundle, witnessed)


def verify_file(f: BinaryIO, keys: Sequence[str] = (), witnesses: Sequence[str] = (), tenant: str = "") -> Result:
    """Checks the bundle in f; raises EvidenceError."""
    return verify((line.rstrip(b"\n") for line in f), keys, witnesses, tenant)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gated.evidence", description="Check an evidence bundle of gated's audit trail.")
    p.add_argument("file", help="the bundle (- for standard input)")
    p.add_argument("--key", action="append", default=[], help="gated's checkpoint public key (repeatable); without one the bundle's own keys are used")
    p.add_argument("--witness-key", action="append", default=[], help="a witness whose cosignature the last checkpoint must carry")
    p.add_argument("--tenant", default="", help="the tenant the bundle must be of")
    args = p.parse_args(argv)
    try:
        if args.file == "-":
            res = verify_file(sys.stdin.buffer, args.key, args.witness_key, args.tenant)
        else:
            with open(args.file, "rb") as f:
                res = verify_file(f, args.key, args.witness_key, args.tenant)
    except EvidenceError as e:
        print(f"evidence bundle: {e}", file=sys.stderr)
        return 3
    except OSError as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 1
    last = res.checkpoints[-1]
    print(f"tenant {res.tenant}: {res.records} record(s) proved against the checkpoint of size {last.size} "
          f"signed at {last.time.isoformat()} (root {base64.b64encode(last.root).decode()}); {len(res.checkpoints)} checkpoint(s) consistent")
    if res.witnessed:
        print("cosigned by " + ", ".join(res.witnessed))
    if res.keys_from_bundle:
        print("warning: checked with the keys the bundle carries; give gated's public key with --key to know who signed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
