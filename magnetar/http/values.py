"""Message values as the console shows them, decoded by the topic's schema (pure: bytes in,
``(value, encoding)`` out).

Encodings: ``json`` (JSON schema, or schemaless bytes that parse as JSON), ``avro`` (the
record decoded with the writer's Avro schema, as JSON), ``number``/``boolean`` (Pulsar's
primitive schemas: big-endian, as Pulsar's Java schemas write them; DATE, TIME and TIMESTAMP
are epoch milliseconds), ``text`` (STRING, or UTF-8 bytes) and ``base64`` where nothing
better exists (PROTOBUF without a descriptor to decode with, binary bytes, a value that does
not fit its schema).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import struct
import uuid
from typing import Any

TEXT_TYPES = ("STRING", "JSON")
# Pulsar primitive schema → struct format of its big-endian encoding
PRIMITIVES = {
    "INT8": ">b",
    "INT16": ">h",
    "INT32": ">i",
    "INT64": ">q",
    "FLOAT": ">f",
    "DOUBLE": ">d",
    "DATE": ">q",
    "TIME": ">q",
    "TIMESTAMP": ">q",
    "LOCAL_DATE": ">q",  # epoch day
    "LOCAL_TIME": ">q",  # nanosecond of the day
}


def parse_avro(definition: bytes) -> Any:
    """A parsed Avro schema for :func:`decode` (ValueError when it is not one)."""
    import fastavro

    try:
        return fastavro.parse_schema(json.loads(definition))
    except Exception as e:  # fastavro raises several types for a bad schema
        raise ValueError(f"not an Avro schema: {e}") from None


def decode(raw: bytes, schema: str, avro: Any = None) -> tuple[Any, str]:
    """``raw`` decoded for a topic whose schema type is ``schema``; ``avro`` is the parsed
    writer schema (:func:`parse_avro`) for AVRO topics."""
    if schema == "AVRO" and avro is not None:
        return _avro(raw, avro)
    if schema in PRIMITIVES:
        fmt = PRIMITIVES[schema]
        if len(raw) == struct.calcsize(fmt):
            return struct.unpack(fmt, raw)[0], "number"
        return _b64(raw)
    if schema == "BOOLEAN" and len(raw) == 1:
        return raw != b"\x00", "boolean"
    if schema in ("BOOLEAN", "PROTOBUF", "PROTOBUF_NATIVE", "AVRO"):
        return _b64(raw)
    return _text_or_json(raw, schema)


def _avro(raw: bytes, parsed: Any) -> tuple[Any, str]:
    import fastavro

    stream = io.BytesIO(raw)
    try:
        record = fastavro.schemaless_reader(stream, parsed, None)
    except Exception:  # bytes that are not this schema's: show them as they are
        return _b64(raw)
    if stream.tell() != len(raw):
        return _b64(raw)  # trailing bytes: not a value of this schema
    return jsonable(record), "avro"


def _text_or_json(raw: bytes, schema: str) -> tuple[Any, str]:
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return _b64(raw)
    if schema == "JSON" or (schema not in TEXT_TYPES and text[:1] in "{["):
        try:
            return json.loads(text), "json"
        except ValueError:
            pass
    return text, "text"


def _b64(raw: bytes) -> tuple[str, str]:
    return base64.b64encode(raw).decode(), "base64"


def jsonable(value: Any) -> Any:
    """A decoded Avro value as JSON can carry it (bytes as base64, times as ISO text)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return value
