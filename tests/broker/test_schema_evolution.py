"""Schema evolution with the official client, as apache/pulsar-client-python's
``test_schema_evolve``: under FORWARD, a second producer registers a version whose ``age``
became required and that adds an optional field; a consumer and a reader holding the first
version read both producers' messages. The broker must judge compatibility with Avro's
resolution rules (``["null","int"]`` reads ``"int"``), not by comparing field types literally.
"""

from __future__ import annotations

import json
import urllib.request
import uuid

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS


class User1(Record):
    name = String()
    age = Integer()


class User2(Record):
    _sorted_fields = True
    name = String()
    age = Integer(required=True)
    email = String()


def _admin(standalone: StandaloneProcess, method: str, path: str, body: object) -> int:
    request = urllib.request.Request(
        f"{standalone.http_url}/admin/v2/{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


@pytest.fixture
def namespace(standalone: StandaloneProcess) -> str:
    """A namespace of its own, so its strategy changes no other test's topics."""
    name = f"public/evolve-{uuid.uuid4().hex[:8]}"
    assert _admin(standalone, "PUT", f"namespaces/{name}", {}) in (200, 204)
    return name


def test_forward_compatible_version_is_read_by_old_consumers(
    standalone: StandaloneProcess, client: pulsar.Client, namespace: str
) -> None:
    assert (
        _admin(standalone, "PUT", f"namespaces/{namespace}/schemaCompatibilityStrategy", "FORWARD")
        == 204
    )
    topic = f"persistent://{namespace}/schema-evolve"
    producer1 = client.create_producer(topic, schema=AvroSchema(User1))
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(User1))
    reader = client.create_reader(topic, pulsar.MessageId.earliest, schema=AvroSchema(User1))
    producer2 = client.create_producer(topic, schema=AvroSchema(User2))

    for i in range(5):
        producer1.send(User1(name=f"User1 {i}", age=100 + i))
        producer2.send(User2(name=f"User2 {i}", age=200 + i, email=f"u{i}@example.org"))

    expected = [(f"User{k} {i}", 100 * k + i) for i in range(5) for k in (1, 2)]
    for source in (lambda: consumer.receive(RECEIVE_MS), lambda: reader.read_next(RECEIVE_MS)):
        got = [source().value() for _ in expected]
        assert [(v.name, v.age) for v in got] == expected


def test_backward_incompatible_version_is_refused(
    standalone: StandaloneProcess, client: pulsar.Client, namespace: str
) -> None:
    """Under BACKWARD the new version must read old data: old data may hold a null age."""
    assert (
        _admin(standalone, "PUT", f"namespaces/{namespace}/schemaCompatibilityStrategy", "BACKWARD")
        == 204
    )
    topic = f"persistent://{namespace}/schema-backward"
    client.create_producer(topic, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(User2))
