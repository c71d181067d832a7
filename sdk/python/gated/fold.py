"""Unicode simple case folding as Go defines it (``strings.EqualFold``):
the relation under which gated refuses two member names of a proposal's
``arguments``.

Two strings are equal under it when they have as many code points and each
pair shares an orbit of Go's ``unicode.SimpleFold``. It is not Python's
``str.casefold()``, which folds fully (``"ß"`` to ``"ss"``), nor what a table
built from this Python's ``unicodedata`` would give (its Unicode version
differs, and Go derives the orbits from the simple case mappings, so that
``"İ"`` folds to nothing): the orbits come from Go itself, through
test/vectors/folding.json, and are generated into ``gated._orbits``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gated._orbits import RUNS, UNICODE_VERSION

__all__ = ["UNICODE_VERSION", "FoldCollision", "as_go_string", "check_folded", "equal_fold", "fold_key"]


def _least() -> dict[int, str]:
    """Each rune of an orbit, mapped to its orbit's least rune; runes in no
    orbit are left out (they fold to themselves)."""
    table: dict[int, str] = {}
    for first, stride, count in RUNS:
        for i in range(count):
            orbit = [r + i * stride for r in first]
            least = chr(min(orbit))
            for r in orbit:
                table[r] = least
    return table


_LEAST: Final = _least()


def as_go_string(s: str) -> str:
    """s as Go reads it once it is encoded: a lone surrogate (which Python
    strings may hold, and UTF-8 cannot) becomes U+FFFD, as the encoder
    writes it."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        # Pairs are joined, lone surrogates replaced.
        s = s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return s


def fold_key(s: str) -> str:
    """One representative of s's class under simple folding: each code
    point becomes the least of its orbit, so two strings have the same key
    exactly when Go's strings.EqualFold holds for their encodings."""
    return as_go_string(s).translate(_LEAST)


def equal_fold(a: str, b: str) -> bool:
    """Go's strings.EqualFold of a and b (as encoded)."""
    return fold_key(a) == fold_key(b)


@dataclass(frozen=True)
class FoldCollision:
    """Two member names of one object that are equal under simple folding,
    as gated's check (strictjson.CheckFolded) names them."""

    path: str
    """Where the object is, as a JSON Pointer (RFC 6901); "" is the value
    itself."""
    key: str
    other: str
    """The two names, in the order of their encoded bytes."""

    @property
    def member(self) -> str:
        """The object as gated names it in an error about a proposal's
        arguments: ``arguments`` and the pointer with / read as ."""
        return "arguments" + self.path.replace("/", ".")

    def __str__(self) -> str:
        if as_go_string(self.key) == as_go_string(self.other):
            return f"{self.member}: members {self.key!r} and {self.other!r} encode as one name (a lone surrogate is written as U+FFFD)"
        return (
            f"{self.member}: members {self.key!r} and {self.other!r} differ only by case "
            "(Unicode simple case folding, as gated compares names): a reader that matches "
            "names without case could act on either"
        )


def _pointer_token(k: str) -> str:
    return k.replace("~", "~0").replace("/", "~1")


def check_folded(v: Any) -> FoldCollision | None:
    """The first two member names of one object in v that are equal under
    simple folding, in a walk that reads each object's names in the order
    of their encoded bytes, checks them before the members' values, and
    reads lists in order: what gated reports for the same value (its
    strictjson.CheckFolded), or None. v is a JSON value as the client
    encodes it: dicts, lists and tuples, and scalars."""
    return _check(v, "", 0)


def _check(v: Any, path: str, depth: int) -> FoldCollision | None:
    if depth > 10000:
        return None  # the encoder refuses such depth itself
    if isinstance(v, Mapping):
        keys = sorted((k for k in v if isinstance(k, str)), key=as_go_string)
        seen: dict[str, str] = {}
        for k in keys:
            f = fold_key(k)
            if f in seen:
                return FoldCollision(path, seen[f], k)
            seen[f] = k
        for k in keys:
            found = _check(v[k], path + "/" + _pointer_token(as_go_string(k)), depth + 1)
            if found is not None:
                return found
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            found = _check(x, f"{path}/{i}", depth + 1)
            if found is not None:
                return found
    return None
