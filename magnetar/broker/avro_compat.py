"""Avro schema resolution: can data written with one schema be read with another?

Pure functions over parsed schema JSON (no I/O). They follow the resolution rules of the
Avro specification as Apache Avro's Java ``Resolver`` applies them, which is what Pulsar's
broker runs for AVRO and JSON schemas:

* primitives match themselves, and promote int → long → float → double, string ↔ bytes
  (logical types are ignored: they annotate a primitive);
* a writer union is readable when every one of its branches is; a reader union reads a
  writer type when one of its branches does;
* records are matched field by field, not by name: each reader field is found in the writer
  by its name or one of its aliases, and must be readable from it, or else have a default;
  writer fields the reader lacks are skipped;
* enums and fixed types must have the same full name (or the writer's name among the
  reader's aliases); every writer symbol must exist in the reader unless the reader declares
  a default symbol; fixed sizes must be equal;
* arrays and maps compare their items and values.

Recursive schemas are handled: a pair already being compared is assumed readable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.errors import InvalidRequestError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
# writer type → reader types that read it
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class InvalidAvroSchema(InvalidRequestError):
    """The text is not an Avro schema this module can resolve (not JSON, a name that is not
    defined, an unknown type): fix the schema definition the client sends."""

    code = "broker.invalid_avro_schema"


@dataclass(eq=False)
class Node:
    """One parsed type. ``kind`` is a primitive name, "record", "enum", "fixed", "array",
    "map" or "union"."""

    kind: str
    full_name: str = ""
    aliases: frozenset[str] = frozenset()
    fields: list[Field] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    has_default: bool = False  # enums: a default symbol
    size: int = 0
    children: list[Node] = field(default_factory=list)  # array items, map values, branches


@dataclass(eq=False)
class Field:
    name: str
    type: Node
    aliases: frozenset[str]
    has_default: bool


def parse(text: str | bytes) -> Node:
    """Parse an Avro schema's JSON text. Raises InvalidAvroSchema."""
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidAvroSchema(f"not JSON: {e}") from None
    return _Parser().node(data, "")


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, Node] = {}

    def node(self, data: Any, namespace: str) -> Node:
        if isinstance(data, list):
            return Node("union", children=[self.node(b, namespace) for b in data])
        if isinstance(data, str):
            return self._reference(data, namespace)
        if not isinstance(data, dict) or "type" not in data:
            raise InvalidAvroSchema(f"not a type: {data!r}")
        kind = data["type"]
        if kind in NAMED:
            return self._named(data, namespace)
        if kind == "array":
            return Node("array", children=[self.node(data.get("items"), namespace)])
        if kind == "map":
            return Node("map", children=[self.node(data.get("values"), namespace)])
        # {"type": "int", "logicalType": ...} or {"type": "SomeName"} or a nested definition
        return self.node(kind, namespace)

    def _reference(self, name: str, namespace: str) -> Node:
        if name in PRIMITIVES:
            return Node(name)
        for candidate in (_full(name, namespace), name):
            if candidate in self.names:
                return self.names[candidate]
        for full, node in self.names.items():  # a short name used outside its namespace
            if full.rsplit(".", 1)[-1] == name:
                return node
        raise InvalidAvroSchema(f"type {name!r} is not defined")

    def _named(self, data: dict[str, Any], namespace: str) -> Node:
        name = str(data.get("name", ""))
        space = str(data.get("namespace", namespace)) if "." not in name else name.rsplit(".", 1)[0]
        full = _full(name, space)
        aliases = frozenset(_full(str(a), space) for a in data.get("aliases", []))
        kind = "record" if data["type"] == "error" else data["type"]
        node = Node(kind, full_name=full, aliases=aliases)
        self.names[full] = node  # before the fields: a record may refer to itself
        if kind == "enum":
            node.symbols = tuple(data.get("symbols", []))
            node.has_default = "default" in data
        elif kind == "fixed":
            node.size = int(data.get("size", 0))
        else:
            node.fields = [self._field(f, space) for f in data.get("fields", [])]
        return node

    def _field(self, data: Any, namespace: str) -> Field:
        if not isinstance(data, dict) or "name" not in data:
            raise InvalidAvroSchema(f"not a record field: {data!r}")
        return Field(
            str(data["name"]),
            self.node(data.get("type"), namespace),
            frozenset(str(a) for a in data.get("aliases", [])),
            "default" in data,
        )


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def can_read(reader: Node, writer: Node) -> bool:
    """True when every datum written with ``writer`` can be read with ``reader``."""
    return _Resolver().readable(reader, writer)


class _Resolver:
    def __init__(self) -> None:
        self.assumed: set[tuple[int, int]] = set()

    def readable(self, r: Node, w: Node) -> bool:
        if w.kind == "union":
            return all(self.readable(r, branch) for branch in w.children)
        if r.kind == "union":
            return any(self.readable(branch, w) for branch in r.children)
        if r.kind != w.kind:
            return r.kind in PROMOTIONS.get(w.kind, ())
        if r.kind in ("array", "map"):
            return self.readable(r.children[0], w.children[0])
        if r.kind == "enum":
            return _same_name(r, w) and (r.has_default or set(w.symbols) <= set(r.symbols))
        if r.kind == "fixed":
            return _same_name(r, w) and r.size == w.size
        if r.kind == "record":
            return self._record(r, w)
        return True  # the same primitive

    def _record(self, r: Node, w: Node) -> bool:
        key = (id(r), id(w))
        if key in self.assumed:
            return True
        self.assumed.add(key)
        by_name = {f.name: f for f in w.fields}
        for rf in r.fields:
            wf = next((by_name[n] for n in (rf.name, *sorted(rf.aliases)) if n in by_name), None)
            if wf is None:
                if not rf.has_default:
                    return False
            elif not self.readable(rf.type, wf.type):
                return False
        return True


def _same_name(r: Node, w: Node) -> bool:
    short = w.full_name.rsplit(".", 1)[-1]
    return r.full_name == w.full_name or w.full_name in r.aliases or short in r.aliases
