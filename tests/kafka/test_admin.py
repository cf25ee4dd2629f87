"""Admin calls from the real clients, and what the Pulsar side (REST admin) sees of them."""

from __future__ import annotations

import json
import time
import urllib.request

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from magnetar.testing.server import StandaloneProcess


def _get(server: StandaloneProcess, path: str) -> object:
    with urllib.request.urlopen(f"{server.http_url}{path}", timeout=10) as response:
        return json.load(response)


def test_confluent_admin_create_describe_delete(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)
    with pytest.raises(confluent_kafka.KafkaException) as exists:
        admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)
    assert exists.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
    assert _get(standalone, f"/admin/v2/persistent/public/default/{topic}/partitions") == {
        "partitions": 3
    }
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "delete"

    admin.delete_topics([topic])[topic].result(30)
    metadata = admin.list_topics(timeout=10)
    assert topic not in metadata.topics


def test_kafka_python_admin_and_group_listing(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic(topic, num_partitions=2, replication_factor=1)])
        assert topic in admin.list_topics()
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
        for i in range(10):
            producer.send(topic, f"m{i}".encode(), partition=i % 2)
        producer.close()

        group = f"g-{topic}"
        consumer = kafka.KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        got = 0
        deadline = time.monotonic() + 30
        while got < 10 and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(500).values())
        consumer.commit()
        assert group in [g["group_id"] for g in admin.list_groups()]
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Stable" and len(described["members"]) == 1
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {0: 5, 1: 5}
        consumer.close()

        # The group's committed offsets are a durable subscription the Pulsar side sees.
        stats = _get(standalone, f"/admin/v2/persistent/public/default/{topic}-partition-0/stats")
        assert stats["subscriptions"][group]["msgBacklog"] == 0  # type: ignore[index]
        assert stats["subscriptions"][group]["isDurable"] is True  # type: ignore[index]
    finally:
        admin.close()
