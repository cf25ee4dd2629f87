"""Kafka transactions as every reader sees them (issue 17): a Pulsar consumer, a Pulsar
reader, the HTTP message browser, the Spark source and a Kafka read_committed consumer get
the committed records only, each once — nothing of an aborted transaction, no markers, and
nothing at or after a transaction still open (Kafka's read_committed) until it commits.
Part of the log is offloaded first, so markers and aborted records are also dropped when
read back from Parquet."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from magnetar.testing.server import StandaloneProcess
from tests.kafka.reading import read_to_end
from tests.spark.conftest import SEGMENT_ENTRIES, Admin, offload, wait_until

pytestmark = pytest.mark.slow
TIMEOUT_S = 30.0


def _txn_producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _send(producer: Producer, topic: str, values: list[bytes]) -> None:
    """One stored batch per value (each flushed), so the records span several segments."""
    for value in values:
        producer.produce(topic, value, key=value)
        producer.flush(TIMEOUT_S)


def _values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i:03d}".encode() for i in range(n)]


def _pulsar_receive(consumer: pulsar.Consumer, expect: int) -> list[bytes]:
    """``expect`` messages (acknowledged), then none more within a short wait."""
    got = []
    for _ in range(expect):
        message = consumer.receive(int(TIMEOUT_S * 1000))
        consumer.acknowledge(message)
        got.append(message.data())
    with pytest.raises(pulsar.Timeout):
        extra = consumer.receive(500)
        got.append(extra.data())  # shown in the failure
    return got


def _read_all_with_reader(client: pulsar.Client, name: str) -> list[bytes]:
    reader = client.create_reader(name, pulsar.MessageId.earliest)
    got = []
    try:
        while reader.has_message_available():
            got.append(reader.read_next(int(TIMEOUT_S * 1000)).data())
    finally:
        reader.close()
    return got


def _browse(admin: Admin, topic: str) -> dict[str, Any]:
    page: dict[str, Any] = admin.get(
        f"/magnetar/v1/topics/public/default/{topic}-partition-0/messages"
        "?position=earliest&limit=500"
    )
    return page


def _spark_values(spark: SparkSession, server: StandaloneProcess, topic: str) -> list[bytes]:
    rows = (
        spark.read.format("magnetar").option("url", server.http_url).option("topics", topic).load()
    )
    return [bytes(r.value) for r in rows.orderBy("offset").collect()]


def test_readers_get_committed_records_only(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, topic: str
) -> None:
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    kafka_admin = AdminClient({"bootstrap.servers": bootstrap})
    kafka_admin.create_topics([NewTopic(topic, 1)])[topic].result(TIMEOUT_S)
    name = f"persistent://public/default/{topic}-partition-0"
    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = _txn_producer(bootstrap, f"tid-{topic}")
    plain = Producer({"bootstrap.servers": bootstrap})
    committed, aborted = _values("committed", SEGMENT_ENTRIES), _values("aborted", SEGMENT_ENTRIES)
    later, pending = _values("later", 3), _values("open", 3)
    try:
        producer.begin_transaction()
        _send(producer, topic, committed)
        producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        _send(producer, topic, aborted)
        producer.abort_transaction(TIMEOUT_S)
        _send(plain, topic, [b"plain"])
        producer.begin_transaction()
        _send(producer, topic, later)
        producer.commit_transaction(TIMEOUT_S)
        # closed segments go to the object store: markers and aborted rows come from Parquet
        offload(admin, topic, 0)
        producer.begin_transaction()
        _send(producer, topic, pending)  # left open for now
        _send(plain, topic, [b"after-open"])  # behind the open transaction: waits with it

        visible = [*committed, b"plain", *later]
        assert _pulsar_receive(consumer, len(visible)) == visible
        assert _read_all_with_reader(client, name) == visible
        page = _browse(admin, topic)
        assert [m["value"] for m in page["messages"]] == [v.decode() for v in visible]
        assert page["lastStableOffset"] < page["endOffset"]
        assert _spark_values(spark, server, topic) == visible
        got = read_to_end(
            bootstrap, topic, len(visible), isolation="read_committed", timeout_s=TIMEOUT_S
        )
        assert [message.value() for message in got] == visible

        producer.commit_transaction(TIMEOUT_S)  # the consumer waiting at the LSO gets the rest
        rest = [*pending, b"after-open"]
        assert _pulsar_receive(consumer, len(rest)) == rest
        assert _read_all_with_reader(client, name) == visible + rest
        assert _spark_values(spark, server, topic) == visible + rest
        wait_until(lambda: admin.backlog(f"{topic}-partition-0", "sub") == 0, "no backlog")
    finally:
        client.close()
