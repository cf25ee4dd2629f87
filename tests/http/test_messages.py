"""``GET /magnetar/v1/topics/.../messages``: the console's message browser, over plain HTTP
against a real standalone, with messages from both protocols."""

from __future__ import annotations

import base64

import pulsar

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
