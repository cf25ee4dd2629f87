"""Topic-level deduplication (Pulsar's topic policy ``deduplicationEnabled``) on a real
standalone with pulsar-client: set on a loaded topic it takes effect at once, set on a
partitioned topic it governs every partition, removed the namespace's setting applies
again; ``?applied=true`` says which one is in force."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, unique


@pytest.fixture(scope="module")
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


@pytest.fixture(scope="module")
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


def _send_twice(client: pulsar.Client, topic: str, name: str, key: str | None = None) -> None:
    """Sequence ids 1 and 2, then 1 and 2 again, as a producer that retries would."""
    for _ in range(2):
        producer = client.create_producer(topic, producer_name=name, batching_enabled=False)
        for seq in (1, 2):
            producer.send(b"x", sequence_id=seq, partition_key=key)
        producer.close()


def test_a_topic_policy_turns_dedup_on_for_a_loaded_topic(
    admin: AdminHttp, client: pulsar.Client
) -> None:
    topic = unique("dedup-topic")
    path = f"/admin/v2/persistent/public/default/{topic}"
    _send_twice(client, topic, unique("p"))
    assert admin.get(path + "/stats")["msgInCounter"] == 4, "the namespace does not dedup"
    assert admin.get(path + "/deduplicationEnabled") is None
    assert admin.get(path + "/deduplicationEnabled?applied=true") is False
    admin.ok("POST", path + "/deduplicationEnabled", True)
    assert admin.get(path + "/deduplicationEnabled") is True
    _send_twice(client, topic, unique("p"))
    assert admin.get(path + "/stats")["msgInCounter"] == 6, "dedup on at once"
    assert admin.get("/admin/v2/namespaces/public/default/deduplication") is not True
    admin.ok("DELETE", path + "/deduplicationEnabled")
    assert admin.get(path + "/deduplicationEnabled?applied=true") is False
    _send_twice(client, topic, unique("p"))
    assert admin.get(path + "/stats")["msgInCounter"] == 10
    assert admin.refused("POST", path + "/deduplicationEnabled", "yes").status == 400


def test_a_policy_on_a_partitioned_topic_governs_its_partitions(
    admin: AdminHttp, client: pulsar.Client
) -> None:
    topic = unique("dedup-parts")
    path = f"/admin/v2/persistent/public/default/{topic}"
    admin.ok("PUT", path + "/partitions", 2)
    admin.ok("POST", path + "/deduplicationEnabled", True)
    partition = f"{path}-partition-1/deduplicationEnabled?applied=true"
    assert admin.get(partition) is True
    _send_twice(client, f"{topic}-partition-1", unique("p"))
    assert admin.get(f"{path}-partition-1/stats")["msgInCounter"] == 2


def test_topic_retention_and_max_message_size(admin: AdminHttp, client: pulsar.Client) -> None:
    """Pulsar's topic-level retention and maxMessageSize: set, applied at once (a bigger
    message is refused to that producer only), shown with ?applied=true, removed."""
    topic = unique("size-topic")
    path = f"/admin/v2/persistent/public/default/{topic}"
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"x" * 10_000)
    assert admin.get(path + "/maxMessageSize") is None
    assert admin.get(path + "/maxMessageSize?applied=true") == 5 * 1024 * 1024
    admin.ok("POST", path + "/maxMessageSize", 5000)
    assert admin.get(path + "/maxMessageSize") == 5000
    with pytest.raises(pulsar.ChecksumError):  # the one error that fails just that message
        producer.send(b"x" * 10_000)
    producer.send(b"small")
    admin.ok("DELETE", path + "/maxMessageSize")
    producer.send(b"x" * 10_000)

    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    assert admin.get(path + "/retention") is None
    admin.ok("POST", path + "/retention", retention)
    assert admin.get(path + "/retention") == retention
    assert admin.get(path + "/retention?applied=true") == retention
    admin.ok("DELETE", path + "/retention")
    assert admin.get(path + "/retention") is None
    assert admin.refused("POST", path + "/maxMessageSize", 0).status == 400
