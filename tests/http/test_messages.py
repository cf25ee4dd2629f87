"""``GET /magnetar/v1/topics/.../messages``: the console's message browser, over plain HTTP
against a real standalone, with messages from both protocols."""

from __future__ import annotations

import base64
import struct
from typing import Any

import _pulsar
import pulsar
from pulsar.schema import AvroSchema, Double, Integer, Record, Schema, String, StringSchema

from magnetar.protocols.kafka import wire  # noqa: F401  (silences kafka-python's warning)
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, unique

from kafka import KafkaProducer  # isort: skip


def test_pages_of_decoded_messages_from_both_protocols(standalone: StandaloneProcess) -> None:
    local = unique("browse")
    client = pulsar.Client(
        standalone.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    producer = client.create_producer(
        f"persistent://public/default/{local}", batching_enabled=False
    )
    producer.send(b'{"n": 0}', partition_key="k0", properties={"p": "1"})
    producer.send(b"plain text")
    producer.send(b"\xff\x00binary")
    client.close()
    kafka = KafkaProducer(bootstrap_servers=f"127.0.0.1:{standalone.kafka_port}")
    kafka.send(local, key=b"kk", value=b"from kafka").get(timeout=20)
    kafka.close()
    admin = AdminHttp(standalone.http_url)
    path = f"/magnetar/v1/topics/public/default/{local}/messages"

    page = admin.get(path + "?position=earliest&limit=10")
    assert page["endOffset"] == 4
    values = [(m["offset"], m["value"], m["encoding"]) for m in page["messages"]]
    assert values == [
        (0, {"n": 0}, "json"),
        (1, "plain text", "text"),
        (2, base64.b64encode(b"\xff\x00binary").decode(), "base64"),
        (3, "from kafka", "text"),
    ]
    first = page["messages"][0]
    assert first["key"] == "k0" and first["properties"] == {"p": "1"}
    assert first["messageId"].endswith(":0")
    assert page["messages"][3]["key"] == "kk"

    newest = admin.get(path + "?limit=2")["messages"]
    assert [m["offset"] for m in newest] == [2, 3]
    assert [m["offset"] for m in admin.get(path + "?position=1&limit=2")["messages"]] == [1, 2]
    at = admin.get(path + f"?time={first['publishTime']}&limit=1")["messages"]
    assert at[0]["offset"] == 0
    assert "limit" in admin.refused("GET", path + "?limit=0").reason
    assert (
        admin.call("GET", f"/magnetar/v1/topics/public/default/{unique('none')}/messages").status
        == 404
    )


class _Primitive(Schema):
    """A Pulsar primitive schema the Python client has no class for (it has STRING and
    BYTES only): Pulsar's big-endian encoding, as its Java schemas write it."""

    def __init__(self, kind: str, fmt: str) -> None:
        # the binding names no BOOLEAN: its wire value (pulsar.proto Schema.Type) is 5
        schema_type = getattr(_pulsar.SchemaType, kind, None) or _pulsar.SchemaType(5)
        super().__init__(object, schema_type, None, kind)
        self.kind, self.fmt = kind, fmt

    def encode(self, obj: Any) -> bytes:
        return struct.pack(self.fmt, obj)

    def decode(self, data: bytes) -> Any:
        return struct.unpack(self.fmt, data)[0]


class Order(Record):
    id = Integer()
    item = String()
    price = Double()


PRIMITIVE_CASES: list[tuple[Schema, list[Any], str]] = [
    (_Primitive("INT8", ">b"), [-5, 7], "number"),
    (_Primitive("INT16", ">h"), [-300, 1200], "number"),
    (_Primitive("INT32", ">i"), [-70000, 42], "number"),
    (_Primitive("INT64", ">q"), [-(2**40), 2**62], "number"),
    (_Primitive("FLOAT", ">f"), [1.5, -0.25], "number"),
    (_Primitive("DOUBLE", ">d"), [3.141592653589793, -1e300], "number"),
    (_Primitive("BOOLEAN", ">?"), [True, False], "boolean"),
    (StringSchema(), ["héllo", "{not json"], "text"),
]


def test_values_are_decoded_by_the_topic_schema(standalone: StandaloneProcess) -> None:
    """AVRO records (by the version each message was written with) and Pulsar's primitive
    schemas come back decoded, published by the real client with those schemas (encoded as
    Pulsar's Java schemas do; the primitive schema registered through Pulsar's schema REST
    API, since the C++ client sends only STRING/JSON/AVRO/PROTOBUF schemas)."""
    client = pulsar.Client(
        standalone.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    admin = AdminHttp(standalone.http_url)
    try:
        local = unique("avro")
        producer = client.create_producer(local, schema=AvroSchema(Order))
        producer.send(Order(id=1, item="book", price=12.5))
        producer.send(Order(id=2, item="pen", price=1.25))
        producer.close()
        page = admin.get(f"/magnetar/v1/topics/public/default/{local}/messages?limit=10")
        assert page["schema"] == "AVRO"
        assert [(m["value"], m["encoding"]) for m in page["messages"]] == [
            ({"id": 1, "item": "book", "price": 12.5}, "avro"),
            ({"id": 2, "item": "pen", "price": 1.25}, "avro"),
        ]
        for schema, values, encoding in PRIMITIVE_CASES:
            kind = getattr(schema, "kind", "STRING")
            local = unique(kind.lower())
            if kind != "STRING":  # the C++ client sends these as NONE: register like Pulsar's
                schema_path = f"/admin/v2/schemas/public/default/{local}/schema"
                body = {"type": kind, "schema": "", "properties": {}}
                assert admin.ok("POST", schema_path, body) == {"version": {"version": 0}}
                assert admin.get(schema_path)["type"] == kind
            producer = client.create_producer(local, schema=schema, batching_enabled=False)
            for v in values:
                producer.send(v)
            producer.close()
            page = admin.get(f"/magnetar/v1/topics/public/default/{local}/messages?limit=10")
            assert page["schema"] == kind
            got = [(m["value"], m["encoding"]) for m in page["messages"]]
            assert got == [(v, encoding) for v in values], kind
        refused = admin.refused("POST", schema_path, {"type": "WHATEVER", "schema": ""})
        assert "unknown schema type" in refused.reason
        none = f"/admin/v2/schemas/public/default/{unique('plain')}/schema"
        assert admin.call("GET", none).status == 404
    finally:
        client.close()
