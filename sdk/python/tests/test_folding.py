"""gated.fold against Go's folding, through test/vectors/folding.json:
every code point, the EqualFold pairs, gated's check of an object, and
hypothesis fuzzing; and the refusal of arguments whose member names fold
together before anything is published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gen_orbits
from gatedkit import vectors
from gated import fold
from gated.errors import BadProposal
from gated.fold import FoldCollision, check_folded, equal_fold, fold_key
from gated.wire import encode_proposal

FOLDING = vectors("folding.json")

# The least rune of each rune's orbit, read from the vectors directly.
LEAST = {r: min(orbit) for orbit in FOLDING["orbits"] for r in orbit}


def go_fold(s: str) -> str:
    """What Go's folding makes of s (valid Unicode), by the vectors alone."""
    return "".join(chr(LEAST.get(ord(c), ord(c))) for c in s)


def test_the_table_is_generated_from_the_vectors() -> None:
    table = Path(fold.__file__).with_name("_orbits.py").read_text(encoding="utf-8")
    assert table == gen_orbits.render(FOLDING), "rewrite gated/_orbits.py with make folding"
    assert fold.UNICODE_VERSION == FOLDING["unicode"]


def test_every_code_point_folds_as_in_go() -> None:
    """All 1,112,064 scalar values: the least rune of each one's orbit, as
    Go's unicode.SimpleFold has it."""
    every = "".join(chr(r) for r in range(0x110000) if not 0xD800 <= r <= 0xDFFF)
    want = "".join(chr(LEAST.get(ord(c), ord(c))) for c in every)
    got = fold_key(every)
    assert len(got) == len(want)
    if got != want:
        bad = next(i for i in range(len(want)) if got[i] != want[i])
        pytest.fail(f"U+{ord(every[bad]):04X} folds to U+{ord(got[bad]):04X}; Go's least of its orbit is U+{ord(want[bad]):04X}")


@pytest.mark.parametrize("case", FOLDING["equal_fold"], ids=lambda c: f"{c['a']!a} {c['b']!a}")
def test_equal_fold_vectors(case: dict[str, Any]) -> None:
    assert equal_fold(case["a"], case["b"]) is case["equal"]
    assert equal_fold(case["b"], case["a"]) is case["equal"]


def test_equal_fold_is_not_casefold() -> None:
    """The vectors hold pairs on which Python's full folding, or its lower
    case, differs from Go's simple folding, both ways."""
    pairs = [(c["a"], c["b"], c["equal"]) for c in FOLDING["equal_fold"]]
    assert any(a.casefold() == b.casefold() and not eq for a, b, eq in pairs)  # ß and ss
    assert any(a.upper() == b.upper() and not eq for a, b, eq in pairs)  # i and ı
    assert any(a.lower() != b.lower() and eq for a, b, eq in pairs)  # the Kelvin sign


@pytest.mark.parametrize("case", FOLDING["checks"], ids=lambda c: c["json"])
def test_check_vectors(case: dict[str, Any]) -> None:
    found = check_folded(json.loads(case["json"]))
    want = case["found"]
    assert found == (None if want is None else FoldCollision(want["path"], want["key"], want["other"]))


def test_the_checks_hold_both() -> None:
    found = [c["found"] is not None for c in FOLDING["checks"]]
    assert any(found) and not all(found)


def test_a_lone_surrogate_is_read_as_go_reads_it() -> None:
    """The encoder writes a lone surrogate as U+FFFD: two names that
    become one are refused too."""
    assert equal_fold("\ud800", "\ufffd")
    found = check_folded({"\ud800": 1, "\ufffd": 2})
    assert found is not None and "encode as one name" in str(found)


# Strings over the runes of a few orbits of each kind, so that folded
# names meet often.
_RUNES = sorted({r for o in FOLDING["orbits"][:40] + [o for o in FOLDING["orbits"] if len(o) > 2] for r in o}
                | {ord(c) for c in "hostß/~"} | {0x130, 0x131, 0x10400, 0x10428})
names = st.text(alphabet=st.sampled_from([chr(r) for r in _RUNES]), max_size=4)


@settings(max_examples=500, deadline=None)
@given(names, names)
def test_equal_fold_agrees_with_the_orbits(a: str, b: str) -> None:
    assert equal_fold(a, b) is (go_fold(a) == go_fold(b))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | names,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(names, children, max_size=4),
    max_leaves=16,
)


def _objects(v: Any) -> list[dict[str, Any]]:
    if isinstance(v, dict):
        return [v] + [o for x in v.values() for o in _objects(x)]
    if isinstance(v, list):
        return [o for x in v for o in _objects(x)]
    return []


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, json_values, max_size=5))
def test_check_refuses_exactly_folded_names(args: dict[str, Any]) -> None:
    """check_folded finds a pair exactly when some object holds two names
    with one fold, names two such names, and the encoder refuses just
    those arguments, naming them."""
    folded = any(len({go_fold(k) for k in o}) < len(o) for o in _objects(args))
    found = check_folded(args)
    assert (found is not None) is folded
    p = {"id": "p-1", "tenant": "acme", "action": "x", "class": "write", "arguments": args}
    if found is None:
        encode_proposal(p)
        return
    assert found.key != found.other and go_fold(found.key) == go_fold(found.other)
    assert found.key < found.other
    with pytest.raises(BadProposal) as e:
        encode_proposal(p)
    assert repr(found.key) in str(e.value) and repr(found.other) in str(e.value)


def test_a_proposal_with_folded_arguments_is_refused() -> None:
    """Before anything is published: the error names where and both
    names, as gated names the field (arguments.<path>)."""
    base = {"id": "p-1", "tenant": "acme", "action": "host_restart_service", "class": "write",
            "blast_radius": "single_device", "target": {"host": "web-1"}}
    for args, where, key, other in [
        ({"host": "web-1", "HOST": "db-prod"}, "arguments:", "HOST", "host"),
        ({"host": "web-1", "ho\u017ft": "db-prod"}, "arguments:", "host", "ho\u017ft"),
        ({"opts": [{"kind": "a", "\u212aind": "b"}]}, "arguments.opts.0:", "kind", "\u212aind"),
    ]:
        with pytest.raises(BadProposal) as e:
            encode_proposal(base | {"arguments": args})
        msg = str(e.value)
        assert msg.startswith(where) and repr(key) in msg and repr(other) in msg and "differ only by case" in msg, msg
    # ß and ss, İ and i: equal under other foldings, not under gated's.
    _, data = encode_proposal(base | {"arguments": {"stra\u00dfe": 1, "strasse": 2, "i": 3, "\u0130": 4}})
    assert b'"arguments":{"i":3,"strasse":2,"stra\xc3\x9fe":1,"\xc4\xb0":4}' in data
