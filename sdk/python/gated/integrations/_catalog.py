"""The tool catalog: which action, class and target each tool's calls are
proposed with. The format is `gated mcp`'s ``--catalog`` (docs/MCP.md,
"The mapping"), read here as the Go decoder reads it, so one file serves
both; the shared vectors (test/vectors/catalogs.json) hold the two to the
same answers."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from gated.errors import InvalidConfig
from gated.wire import valid_action, valid_tenant

DEFAULT_REASON_ARGUMENT: Final = "_reason"
"""The argument a call's reason is read from (and taken out of the call)
when the catalog names no other."""

MAX_CATALOG_SIZE: Final = 1 << 20
"""The largest catalog read, in bytes."""

CLASSES: Final = ("read", "write", "destructive")
BLAST_RADII: Final = ("single_device", "cluster", "tenant_wide")
_TOP: Final = ("reason_argument", "blast_radius", "tools", "prompts", "resources")
_RULE: Final = ("action", "class", "blast_radius", "target", "target_fixed", "reason_argument", "reviewer", "labels")
MAX_LABELS: Final = 16
_MAX_ACTION: Final = 128

_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_DATE = re.compile(r"^([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})$")


class InvalidCatalog(InvalidConfig):
    """A catalog that cannot be used; the message names what is wrong and
    where."""


class _Loader(yaml.SafeLoader):
    """YAML with the scalars the Go decoder resolves (YAML 1.2's core
    schema): only true and false are booleans."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}
for _first in "tTfF":
    _Loader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0, (_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"))
    )


@dataclass(frozen=True)
class ToolRule:
    """The overrides of one tool; every field is optional ("" or empty:
    not overridden)."""

    action: str = ""
    class_: str = ""
    blast_radius: str = ""
    target: dict[str, str] = field(default_factory=dict)
    """Member of the proposal's target → JSON Pointer into the arguments."""
    target_fixed: dict[str, Any] = field(default_factory=dict)
    reason_argument: str = ""
    reviewer: str = ""
    labels: tuple[str, ...] = ()
    """The flow labels every proposal of the tool carries
    (docs/POLICIES.md#flows)."""

    def to_dict(self) -> dict[str, Any]:
        """The rule as the Go decoder's JSON encoding gives it (empty
        fields left out)."""
        out: dict[str, Any] = {}
        for name, key in (("action", "action"), ("class_", "class"), ("blast_radius", "blast_radius")):
            if getattr(self, name):
                out[key] = getattr(self, name)
        if self.target:
            out["target"] = dict(self.target)
        if self.target_fixed:
            out["target_fixed"] = self.target_fixed
        for name in ("reason_argument", "reviewer"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.labels:
            out["labels"] = list(self.labels)
        return out


@dataclass(frozen=True)
class Catalog:
    """Per-tool overrides of the default mapping (docs/INTEGRATIONS.md)."""

    reason_argument: str = ""
    blast_radius: str = ""
    tools: dict[str, ToolRule] = field(default_factory=dict)
    prompts: dict[str, ToolRule] = field(default_factory=dict)
    """`gated mcp`'s rules for prompts, read and checked as the tools'
    (the integrations have no prompts)."""
    resources: dict[str, ToolRule] = field(default_factory=dict)
    """`gated mcp`'s rules for resources, read and checked as the tools'."""

    @classmethod
    def load(cls, path: str | Path) -> Catalog:
        """Read a catalog file. Raises InvalidCatalog."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise InvalidCatalog(f"catalog {path}: {e.strerror or e}") from None
        try:
            return cls.decode(data)
        except InvalidCatalog as e:
            raise InvalidCatalog(f"catalog {path}: {e}") from None

    @classmethod
    def decode(cls, data: bytes | str) -> Catalog:
        """Read a catalog from YAML or JSON, refusing what `gated mcp`
        refuses: unknown fields, duplicate keys, a bad class, action, blast
        radius, target pointer or reviewer, more than one document, and
        input over MAX_CATALOG_SIZE. Raises InvalidCatalog."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if len(raw) > MAX_CATALOG_SIZE:
            raise InvalidCatalog(f"{len(raw)} bytes, more than {MAX_CATALOG_SIZE}")
        try:
            text = raw.decode("utf-8")
            docs = list(yaml.compose_all(text, Loader=_Loader))
        except UnicodeDecodeError as e:
            raise InvalidCatalog(f"not UTF-8 at byte {e.start}") from None
        except yaml.YAMLError as e:
            raise InvalidCatalog(f"not YAML: {_yaml_problem(e)}") from None
        if len(docs) > 1:
            raise InvalidCatalog(f"more than one YAML document ({_at(docs[1])})")
        if not docs or _is_null(docs[0]):
            return cls()
        top = _mapping(docs[0], "the catalog", _TOP)
        c = cls(
            reason_argument=_string(top.get("reason_argument"), "reason_argument"),
            blast_radius=_string(top.get("blast_radius"), "blast_radius"),
            tools=_tools(top.get("tools")),
            prompts=_tools(top.get("prompts"), "prompts"),
            resources=_tools(top.get("resources"), "resources"),
        )
        if c.reason_argument and not _argument_name(c.reason_argument):
            raise InvalidCatalog(f"reason_argument {json.dumps(c.reason_argument)} must be a non-blank name of at most 128 bytes")
        if c.blast_radius and c.blast_radius not in BLAST_RADII:
            raise InvalidCatalog(f"blast_radius {json.dumps(c.blast_radius)}: want single_device, cluster or tenant_wide")
        return c

    def to_dict(self) -> dict[str, Any]:
        """The catalog as the Go decoder's JSON encoding gives it."""
        out: dict[str, Any] = {}
        if self.reason_argument:
            out["reason_argument"] = self.reason_argument
        if self.blast_radius:
            out["blast_radius"] = self.blast_radius
        for section in ("tools", "prompts", "resources"):
            rules: dict[str, ToolRule] = getattr(self, section)
            if rules:
                out[section] = {name: r.to_dict() for name, r in rules.items()}
        return out


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    return f"line {mark.line + 1} column {mark.column + 1}: {problem}" if mark else problem


def _at(n: yaml.Node) -> str:
    return f"line {n.start_mark.line + 1} column {n.start_mark.column + 1}"


def _is_null(n: yaml.Node) -> bool:
    return isinstance(n, yaml.ScalarNode) and n.tag == _NULL


def _mapping(n: yaml.Node, what: str, fields: tuple[str, ...] | None) -> dict[str, yaml.Node]:
    """A mapping's members by key: keys are text, none twice, and, when
    fields is given, each one of them."""
    if not isinstance(n, yaml.MappingNode):
        raise InvalidCatalog(f"{what} is not a mapping: cannot unmarshal a {_kind(n)} into it ({_at(n)})")
    out: dict[str, yaml.Node] = {}
    for k, v in n.value:
        if k.tag == _MERGE:
            raise InvalidCatalog(f"{what}: merge keys (<<) are not read ({_at(k)})")
        if not isinstance(k, yaml.ScalarNode):
            raise InvalidCatalog(f"{what} has a key that is not text ({_at(k)})")
        key = "" if k.tag == _NULL else k.value
        if key in out:
            raise InvalidCatalog(f"{what}: key {json.dumps(key)} already defined ({_at(k)})")
        if fields is not None and key not in fields:
            raise InvalidCatalog(f"{what}: field {key} not found: want one of {', '.join(fields)} ({_at(k)})")
        out[key] = v
    return out


def _kind(n: yaml.Node) -> str:
    return "sequence" if isinstance(n, yaml.SequenceNode) else "scalar" if isinstance(n, yaml.ScalarNode) else "mapping"


def _string(n: yaml.Node | None, what: str) -> str:
    """A text field: any scalar's text (null: empty), as the Go decoder
    reads a scalar into a string."""
    if n is None or _is_null(n):
        return ""
    if not isinstance(n, yaml.ScalarNode):
        raise InvalidCatalog(f"{what} is not text ({_at(n)})")
    return str(n.value)


def _labels(n: yaml.Node | None, what: str) -> tuple[str, ...]:
    """A list of labels: a sequence of scalars (null: none), as the Go
    decoder reads one into a list of strings."""
    if n is None or _is_null(n):
        return ()
    if not isinstance(n, yaml.SequenceNode):
        raise InvalidCatalog(f"{what}: cannot unmarshal a {_kind(n)} into a list of labels ({_at(n)})")
    return tuple(_string(item, f"{what}[{i}]") for i, item in enumerate(n.value))


def _tools(n: yaml.Node | None, section: str = "tools") -> dict[str, ToolRule]:
    if n is None or _is_null(n):
        return {}
    tools: dict[str, ToolRule] = {}
    for name, rn in sorted(_mapping(n, section, None).items()):
        where = f"{section}[{json.dumps(name)}]"
        if not name.strip():
            raise InvalidCatalog(f"{section}: an entry with a blank name")
        m = {} if _is_null(rn) else _mapping(rn, where, _RULE)
        r = ToolRule(
            action=_string(m.get("action"), f"{where}.action"),
            class_=_string(m.get("class"), f"{where}.class"),
            blast_radius=_string(m.get("blast_radius"), f"{where}.blast_radius"),
            target=_target(m.get("target"), where),
            target_fixed=_fixed(m.get("target_fixed"), where),
            reason_argument=_string(m.get("reason_argument"), f"{where}.reason_argument"),
            reviewer=_string(m.get("reviewer"), f"{where}.reviewer"),
            labels=_labels(m.get("labels"), f"{where}.labels"),
        )
        if r.action and not valid_action(r.action):
            raise InvalidCatalog(f"{where}.action {json.dumps(r.action)} must match [A-Za-z0-9_-]{{1,128}}")
        if r.class_ and r.class_ not in CLASSES:
            raise InvalidCatalog(f"{where}.class {json.dumps(r.class_)}: want read, write or destructive")
        if r.blast_radius and r.blast_radius not in BLAST_RADII:
            raise InvalidCatalog(f"{where}.blast_radius {json.dumps(r.blast_radius)}: want single_device, cluster or tenant_wide")
        if r.reason_argument and not _argument_name(r.reason_argument):
            raise InvalidCatalog(f"{where}.reason_argument {json.dumps(r.reason_argument)} must be a non-blank name of at most 128 bytes")
        if r.reviewer and not valid_tenant(r.reviewer):
            raise InvalidCatalog(f"{where}.reviewer {json.dumps(r.reviewer)} must be a persona name matching [a-z0-9_-]{{1,64}}")
        if len(r.labels) > MAX_LABELS:
            raise InvalidCatalog(f"{where}.labels: {len(r.labels)} labels, more than {MAX_LABELS}")
        for i, label in enumerate(r.labels):
            if not valid_tenant(label):
                raise InvalidCatalog(f"{where}.labels[{i}] {json.dumps(label)} must match [a-z0-9_-]{{1,64}}")
        for member in r.target:
            if member in r.target_fixed:
                raise InvalidCatalog(f"{where}: member {json.dumps(member)} is both in target and in target_fixed")
        tools[name] = r
    return tools


def _target(n: yaml.Node | None, where: str) -> dict[str, str]:
    if n is None or _is_null(n):
        return {}
    out: dict[str, str] = {}
    for member, pn in _mapping(n, f"{where}.target", None).items():
        if not member.strip():
            raise InvalidCatalog(f"{where}.target has a blank member name")
        ptr = _string(pn, f"{where}.target[{json.dumps(member)}]")
        try:
            parse_pointer(ptr)
        except ValueError as e:
            raise InvalidCatalog(f"{where}.target[{json.dumps(member)}]: {e}") from None
        out[member] = ptr
    return out


def _fixed(n: yaml.Node | None, where: str) -> dict[str, Any]:
    if n is None or _is_null(n):
        return {}
    v = _value(n, f"{where}.target_fixed", 0)
    if not isinstance(v, dict):
        raise InvalidCatalog(f"{where}.target_fixed is not a mapping ({_at(n)})")
    return v


def _value(n: yaml.Node, where: str, depth: int) -> Any:
    """A node as the JSON value the Go decoder makes of it."""
    if depth > 100:
        raise InvalidCatalog(f"{where} is nested more than 100 levels deep")
    if isinstance(n, yaml.MappingNode):
        return {k: _value(v, f"{where}.{k}", depth + 1) for k, v in _json_keys(n, where).items()}
    if isinstance(n, yaml.SequenceNode):
        return [_value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(n.value)]
    assert isinstance(n, yaml.ScalarNode)
    if n.tag == _NULL:
        return None
    if n.tag == _BOOL:
        return n.value.lower() == "true"
    if n.tag == _TIMESTAMP or (n.tag == _STR and n.style is None and _DATE.match(n.value)):
        # The Go decoder makes a time of it, written back in RFC 3339.
        d = _DATE.match(n.value)
        if d is None:
            raise InvalidCatalog(f"{where}: quote the time {n.value!r} to keep it as text ({_at(n)})")
        return f"{int(d[1]):04d}-{int(d[2]):02d}-{int(d[3]):02d}T00:00:00Z"
    if n.tag in (_INT, _FLOAT):
        v = yaml.safe_load(n.value)
        if n.tag == _FLOAT:
            v = float(v)
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidCatalog(f"{where}: {n.value} is not a JSON number ({_at(n)})")
        return v
    return n.value


def _json_keys(n: yaml.MappingNode, where: str) -> dict[str, yaml.Node]:
    """A mapping whose keys must be text to be a JSON object."""
    out: dict[str, yaml.Node] = {}
    for k, v in n.value:
        if not isinstance(k, yaml.ScalarNode) or k.tag not in (_STR,):
            raise InvalidCatalog(f"{where} has a key that is not text, so it is not a JSON object ({_at(k)})")
        if k.value in out:
            raise InvalidCatalog(f"{where}: key {json.dumps(k.value)} already defined ({_at(k)})")
        out[k.value] = v
    return out


def _argument_name(s: str) -> bool:
    return bool(s.strip()) and len(s.encode("utf-8")) <= 128


def parse_pointer(p: str) -> list[str]:
    """The reference tokens of a JSON Pointer (RFC 6901). Raises ValueError."""
    if p == "":
        return []
    if not p.startswith("/"):
        raise ValueError(f"JSON Pointer {p!r} must be empty or begin with /")
    tokens = []
    for s in p[1:].split("/"):
        for j, c in enumerate(s):
            if c == "~" and (j + 1 == len(s) or s[j + 1] not in "01"):
                raise ValueError(f"JSON Pointer {p!r}: ~ must be followed by 0 or 1")
        tokens.append(s.replace("~1", "/").replace("~0", "~"))
    return tokens


def resolve_pointer(arguments: Any, p: str) -> Any:
    """What pointer p names in the arguments. Raises LookupError when it
    names nothing."""
    cur = arguments
    for tok in parse_pointer(p):
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isascii() and tok.isdigit() and (tok == "0" or not tok.startswith("0")) and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            raise LookupError(f"{p!r} names no argument")
    return cur


def action_name(tool: str) -> str:
    """A tool's name as an action token, as `gated mcp` makes it: every
    byte outside [A-Za-z0-9_-] becomes "_", and a name over 128 bytes keeps
    its first 119 and ends in "-" and 8 hex digits of its SHA-256."""
    raw = tool.encode("utf-8")
    b = bytes(c if (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c in b"_-") else 95 for c in raw)
    if not b:
        return "_"
    if len(b) > _MAX_ACTION:
        b = b[: _MAX_ACTION - 9] + b"-" + hashlib.sha256(raw).hexdigest()[:8].encode("ascii")
    return b.decode("ascii")
