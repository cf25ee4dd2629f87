"""``magnetar.http.values``: message values decoded by schema type, as plain byte round trips
(the end-to-end test with the real client is in test_messages.py)."""

from __future__ import annotations

import base64
import io
import json
import struct

import fastavro
import pytest

from magnetar.http.values import decode, parse_avro

AVRO = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": ["null", "string"]},
    ],
}


def _b64(raw: bytes) -> tuple[str, str]:
    return base64.b64encode(raw).decode(), "base64"


@pytest.mark.parametrize(
    ("schema", "raw", "expected"),
    [
        ("INT8", struct.pack(">b", -3), (-3, "number")),
        ("INT16", struct.pack(">h", -300), (-300, "number")),
        ("INT32", struct.pack(">i", 1 << 30), (1 << 30, "number")),
        ("INT64", struct.pack(">q", -(1 << 60)), (-(1 << 60), "number")),
        ("FLOAT", struct.pack(">f", 0.5), (0.5, "number")),
        ("DOUBLE", struct.pack(">d", 2.25), (2.25, "number")),
        ("TIMESTAMP", struct.pack(">q", 1_700_000_000_000), (1_700_000_000_000, "number")),
        ("BOOLEAN", b"\x01", (True, "boolean")),
        ("BOOLEAN", b"\x00", (False, "boolean")),
        ("INT32", b"\x00\x01", _b64(b"\x00\x01")),  # the wrong size for its schema
        ("STRING", "{é".encode(), ("{é", "text")),
        ("JSON", b'{"a": 1}', ({"a": 1}, "json")),
        ("NONE", b"[1]", ([1], "json")),
        ("NONE", b"\xff\x00", _b64(b"\xff\x00")),
        ("PROTOBUF", b"\x08\x01", _b64(b"\x08\x01")),  # no descriptor to decode it with
    ],
)
def test_primitive_and_text_values(schema: str, raw: bytes, expected: tuple[object, str]) -> None:
    assert decode(raw, schema) == expected


def test_avro_records_decode_with_their_schema_and_fall_back_to_base64() -> None:
    parsed = parse_avro(json.dumps(AVRO).encode())
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, {"id": 7, "blob": b"\x00\xff", "note": None})
    raw = buffer.getvalue()
    assert decode(raw, "AVRO", parsed) == ({"id": 7, "blob": "AP8=", "note": None}, "avro")
    assert decode(raw + b"\x00junk", "AVRO", parsed) == _b64(raw + b"\x00junk")
    assert decode(raw, "AVRO", None) == _b64(raw)  # no usable schema
    with pytest.raises(ValueError, match="not an Avro schema"):
        parse_avro(b"{not json")
