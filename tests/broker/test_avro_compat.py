"""Avro schema resolution (``magnetar.broker.avro_compat``) and the compatibility strategies
built on it (``magnetar.broker.schemas.check``): pure, no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.broker import avro_compat
from magnetar.broker.errors import IncompatibleSchemaError
from magnetar.broker.schemas import SchemaInfo, check


def _record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def _f(name: str, ftype: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": ftype, **extra}


def _readable(reader: Any, writer: Any) -> bool:
    return avro_compat.can_read(
        avro_compat.parse(json.dumps(reader)), avro_compat.parse(json.dumps(writer))
    )


COLOR = {"type": "enum", "name": "Color", "symbols": ["red", "green"]}
POINT = _record(_f("x", "int"), _f("y", "int"), name="Point")

# (reader, writer, readable)
PAIRS: list[tuple[str, Any, Any, bool]] = [
    ("same primitive", "int", "int", True),
    ("different primitives", "int", "string", False),
    ("int promotes to long", "long", "int", True),
    ("int promotes to float", "float", "int", True),
    ("int promotes to double", "double", "int", True),
    ("long promotes to float", "float", "long", True),
    ("long promotes to double", "double", "long", True),
    ("float promotes to double", "double", "float", True),
    ("long does not narrow to int", "int", "long", False),
    ("double does not narrow to float", "float", "double", False),
    ("string reads bytes", "string", "bytes", True),
    ("bytes reads string", "bytes", "string", True),
    ("boolean is not an int", "int", "boolean", False),
    ("null reads null", "null", "null", True),
    (
        "logical type is its primitive",
        "long",
        {"type": "long", "logicalType": "timestamp-millis"},
        True,
    ),
    ("reader union reads int", ["null", "int"], "int", True),
    ("reader union reads by promotion", ["null", "long"], "int", True),
    ("reader union without the type", ["null", "string"], "int", False),
    ("writer union needs every branch", "int", ["null", "int"], False),
    ("writer union into wider union", ["null", "string", "int"], ["null", "int"], True),
    ("writer union branch promoted", ["null", "double"], ["null", "int", "float"], True),
    ("writer union with unreadable branch", ["null", "int"], ["null", "int", "string"], False),
    (
        "array items promoted",
        {"type": "array", "items": "long"},
        {"type": "array", "items": "int"},
        True,
    ),
    (
        "array items incompatible",
        {"type": "array", "items": "int"},
        {"type": "array", "items": "string"},
        False,
    ),
    (
        "map values promoted",
        {"type": "map", "values": "double"},
        {"type": "map", "values": "float"},
        True,
    ),
    (
        "map values incompatible",
        {"type": "map", "values": "int"},
        {"type": "map", "values": "long"},
        False,
    ),
    (
        "array is not a map",
        {"type": "map", "values": "int"},
        {"type": "array", "items": "int"},
        False,
    ),
    ("enum with more symbols", {**COLOR, "symbols": ["red", "green", "blue"]}, COLOR, True),
    ("enum missing a writer symbol", {**COLOR, "symbols": ["red"]}, COLOR, False),
    (
        "enum missing a symbol but with a default",
        {**COLOR, "symbols": ["red"], "default": "red"},
        COLOR,
        True,
    ),
    ("enum of another name", {**COLOR, "name": "Colour"}, COLOR, False),
    ("enum renamed with an alias", {**COLOR, "name": "Colour", "aliases": ["Color"]}, COLOR, True),
    (
        "fixed same size",
        {"type": "fixed", "name": "H", "size": 16},
        {"type": "fixed", "name": "H", "size": 16},
        True,
    ),
    (
        "fixed other size",
        {"type": "fixed", "name": "H", "size": 8},
        {"type": "fixed", "name": "H", "size": 16},
        False,
    ),
    (
        "fixed other name",
        {"type": "fixed", "name": "G", "size": 16},
        {"type": "fixed", "name": "H", "size": 16},
        False,
    ),
    ("record same fields", POINT, POINT, True),
    ("record names are not compared (as Pulsar)", {**POINT, "name": "Other"}, POINT, True),
    ("removed field is skipped", _record(_f("x", "int")), POINT, True),
    (
        "added field without default",
        _record(_f("x", "int"), _f("y", "int"), _f("z", "int")),
        POINT,
        False,
    ),
    (
        "added field with default",
        _record(_f("x", "int"), _f("y", "int"), _f("z", "int", default=0)),
        POINT,
        True,
    ),
    (
        "added optional field with null default",
        _record(_f("x", "int"), _f("y", "int"), _f("z", ["null", "string"], default=None)),
        POINT,
        True,
    ),
    (
        "added optional field without default",
        _record(_f("x", "int"), _f("y", "int"), _f("z", ["null", "string"])),
        POINT,
        False,
    ),
    ("field type promoted", _record(_f("x", "long"), _f("y", "double")), POINT, True),
    ("field type narrowed", POINT, _record(_f("x", "long"), _f("y", "int")), False),
    (
        "required field made optional",
        _record(_f("x", ["null", "int"]), _f("y", "int")),
        POINT,
        True,
    ),
    (
        "optional field made required",
        POINT,
        _record(_f("x", ["null", "int"]), _f("y", "int")),
        False,
    ),
    (
        "field renamed with an alias",
        _record(_f("left", "int", aliases=["x"]), _f("y", "int")),
        POINT,
        True,
    ),
    ("field renamed without an alias", _record(_f("left", "int"), _f("y", "int")), POINT, False),
    ("field order does not matter", _record(_f("y", "int"), _f("x", "int")), POINT, True),
    (
        "nested record gains a defaulted field",
        _record(
            _f(
                "p",
                _record(_f("x", "int"), _f("y", "int"), _f("z", "int", default=1), name="Point"),
            )
        ),
        _record(_f("p", POINT)),
        True,
    ),
    (
        "nested record field narrowed",
        _record(_f("p", _record(_f("x", "int"), name="Point"))),
        _record(_f("p", _record(_f("x", "long"), name="Point"))),
        False,
    ),
    (
        "named type referenced twice",
        _record(_f("a", POINT), _f("b", "Point")),
        _record(_f("a", POINT), _f("b", "Point")),
        True,
    ),
    (
        "array of records in a union",
        _record(_f("ps", ["null", {"type": "array", "items": _record(_f("x", "long"), name="P")}])),
        _record(_f("ps", ["null", {"type": "array", "items": _record(_f("x", "int"), name="P")}])),
        True,
    ),
    (
        "map of enums losing a symbol",
        _record(_f("m", {"type": "map", "values": {**COLOR, "symbols": ["red"]}})),
        _record(_f("m", {"type": "map", "values": COLOR})),
        False,
    ),
    (
        "recursive record",
        _record(_f("v", "int"), _f("next", ["null", "Node"], default=None), name="Node"),
        _record(_f("v", "int"), _f("next", ["null", "Node"]), name="Node"),
        True,
    ),
    (
        "namespaced reference",
        _record(_f("c", {**COLOR, "namespace": "a.b"}), _f("d", "a.b.Color"), namespace="x"),
        _record(_f("c", {**COLOR, "namespace": "a.b"}), _f("d", "a.b.Color"), namespace="x"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("reader", "writer", "expected"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_resolution(reader: Any, writer: Any, expected: bool) -> None:
    assert _readable(reader, writer) is expected


@pytest.mark.parametrize(
    "text", ["not json", '{"type": "Missing"}', '{"type": "record", "fields": [1]}', "3"]
)
def test_invalid_schema_is_refused(text: str) -> None:
    with pytest.raises(avro_compat.InvalidAvroSchema):
        avro_compat.parse(text)


# -- strategies ---------------------------------------------------------------------------

V1 = _record(_f("name", ["null", "string"]), _f("age", ["null", "int"]), name="User")
ADD_OPTIONAL = _record(*V1["fields"], _f("email", ["null", "string"], default=None), name="User")
ADD_REQUIRED = _record(*V1["fields"], _f("email", "string"), name="User")
AGE_REQUIRED = _record(_f("age", "int"), _f("name", ["null", "string"]), name="User2")
AGE_LONG = _record(_f("name", ["null", "string"]), _f("age", ["null", "long"]), name="User")


def _info(schema: Any) -> SchemaInfo:
    return SchemaInfo("AVRO", json.dumps(schema).encode())


STRATEGY_CASES = [
    # strategy, existing versions, new, accepted
    ("BACKWARD", [V1], ADD_OPTIONAL, True),
    ("BACKWARD", [V1], ADD_REQUIRED, False),
    ("BACKWARD", [V1], AGE_LONG, True),  # new reads old: int → long
    ("BACKWARD", [V1], AGE_REQUIRED, False),  # old data may hold a null age
    ("FORWARD", [V1], ADD_REQUIRED, True),  # old reader skips the new field
    ("FORWARD", [V1], AGE_REQUIRED, True),  # Pulsar's test_schema_evolve
    ("FORWARD", [V1], AGE_LONG, False),  # old reader cannot narrow long → int
    ("FULL", [V1], ADD_OPTIONAL, True),
    ("FULL", [V1], AGE_REQUIRED, False),
    ("FULL", [V1], AGE_LONG, False),
    ("BACKWARD", [AGE_REQUIRED, V1], AGE_LONG, True),  # only the latest version counts
    ("BACKWARD_TRANSITIVE", [V1, ADD_OPTIONAL], AGE_LONG, True),
    ("BACKWARD_TRANSITIVE", [ADD_REQUIRED, V1], ADD_REQUIRED, False),
    ("FORWARD_TRANSITIVE", [V1, ADD_OPTIONAL], AGE_LONG, False),
    (
        "FULL_TRANSITIVE",
        [V1, ADD_OPTIONAL],
        _record(*ADD_OPTIONAL["fields"], _f("x", ["null", "int"], default=None), name="User"),
        True,
    ),
    ("ALWAYS_COMPATIBLE", [V1], {"type": "record", "name": "X", "fields": [_f("z", "int")]}, True),
    ("ALWAYS_INCOMPATIBLE", [V1], ADD_OPTIONAL, False),
]


@pytest.mark.parametrize(("strategy", "existing", "new", "accepted"), STRATEGY_CASES)
def test_strategy(strategy: str, existing: list[Any], new: Any, accepted: bool) -> None:
    infos = [_info(s) for s in existing]
    if accepted:
        check(strategy, _info(new), infos)
    else:
        with pytest.raises(IncompatibleSchemaError):
            check(strategy, _info(new), infos)


def test_schemas_that_are_not_avro_are_compared_by_content() -> None:
    old = SchemaInfo("PROTOBUF_NATIVE", b"\x0a\x03abc")
    check("FULL", SchemaInfo("PROTOBUF_NATIVE", b"\x0a\x03abc"), [old])
    with pytest.raises(IncompatibleSchemaError):
        check("FULL", SchemaInfo("PROTOBUF_NATIVE", b"\x0a\x03xyz"), [old])
