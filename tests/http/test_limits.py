"""Bounds on partitions per topic and topics per namespace (issue 21 item 1): a count past
the limit is refused with Pulsar's status and a reason naming the setting, nothing is
created, the server keeps its memory and goes on serving REST and Kafka Metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pulsar
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, http_client, run_standalone, store_snapshot, unique

MAX_TOPICS = 12  # small, so filling a namespace is quick; partitions keep their default
DEFAULT_MAX_PARTITIONS = 1024
PARTITIONS_SETTING = "max_num_partitions_per_partitioned_topic"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory, "--max-topics-per-namespace", str(MAX_TOPICS))


@pytest.fixture(scope="module")
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


def fresh_namespace(admin: AdminHttp) -> str:
    ns = f"{unique('limits')}/ns"
    admin.ok("PUT", f"/admin/v2/tenants/{ns.split('/')[0]}", {})
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    return ns


def rss_bytes(server: StandaloneProcess) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


@pytest.mark.parametrize("count", [99999999999999999999999, 100_000, DEFAULT_MAX_PARTITIONS + 1])
def test_too_many_partitions_is_refused_and_memory_stays(
    standalone: StandaloneProcess, admin: AdminHttp, count: int
) -> None:
    ns = "public/default"  # the Kafka namespace: Metadata lists it after the refusal
    topic = unique("huge")
    before, rss_before = store_snapshot(admin, ns), rss_bytes(standalone)

    reply = admin.refused("PUT", f"/admin/v2/persistent/{ns}/{topic}/partitions", count)

    assert reply.status == 406  # Pulsar's NOT_ACCEPTABLE
    assert f"less than or equal to {DEFAULT_MAX_PARTITIONS}" in reply.reason
    assert PARTITIONS_SETTING in reply.reason
    assert store_snapshot(admin, ns) == before
    bootstrap = f"127.0.0.1:{standalone.kafka_port}"
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert topic not in metadata.topics
    assert rss_bytes(standalone) - rss_before < 64 * 1024 * 1024


def test_growing_past_the_partition_limit_is_refused(admin: AdminHttp) -> None:
    ns = fresh_namespace(admin)
    path = f"/admin/v2/persistent/{ns}/grown/partitions"
    admin.ok("PUT", path, 2)

    reply = admin.refused("POST", path, DEFAULT_MAX_PARTITIONS + 1)

    assert reply.status == 406 and PARTITIONS_SETTING in reply.reason
    assert admin.get(path) == {"partitions": 2}
    for count in (0, -1):
        assert admin.refused("PUT", f"/admin/v2/persistent/{ns}/x/partitions", count).status == 406


def test_kafka_create_topics_respects_the_partition_limit(standalone: StandaloneProcess) -> None:
    kafka = AdminClient({"bootstrap.servers": f"127.0.0.1:{standalone.kafka_port}"})
    topic = unique("kafka-huge")

    future = kafka.create_topics([NewTopic(topic, num_partitions=100_000)])[topic]

    with pytest.raises(confluent_kafka.KafkaException) as refused:
        future.result(30)
    error = refused.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_PARTITIONS
    assert PARTITIONS_SETTING in error.str()
    assert topic not in kafka.list_topics(timeout=10).topics


def test_a_full_namespace_refuses_new_topics_of_every_kind(
    standalone: StandaloneProcess, admin: AdminHttp
) -> None:
    ns = fresh_namespace(admin)
    base = f"/admin/v2/persistent/{ns}"
    admin.ok("PUT", f"{base}/parted/partitions", MAX_TOPICS - 3)  # each partition counts
    admin.ok("PUT", f"{base}/plain-1")
    client = http_client(standalone)
    try:
        # a producer loads (and registers) every partition: they were counted already
        client.create_producer(f"persistent://{ns}/parted").close()
        admin.ok("PUT", f"{base}/plain-2")
        before = store_snapshot(admin, ns)

        for method, path, body in [
            ("PUT", f"{base}/two/partitions", 2),
            ("POST", f"{base}/parted/partitions", MAX_TOPICS - 1),
        ]:
            reply = admin.refused(method, path, body)
            assert reply.status == 412, reply  # Pulsar's PRECONDITION_FAILED
            assert "Exceed maximum number of topics in namespace" in reply.reason
            assert "max_topics_per_namespace" in reply.reason

        admin.ok("PUT", f"{base}/plain-3")  # the last one that fits
        assert admin.refused("PUT", f"{base}/plain-4").status == 412
        with pytest.raises(pulsar.NotAllowedError):  # auto-creation by a producer too
            client.create_producer(f"persistent://{ns}/auto", send_timeout_millis=5000)
    finally:
        client.close()
    after = store_snapshot(admin, ns)
    assert after["topics"] == [*before["topics"], f"persistent://{ns}/plain-3"]
    assert after["partitioned"] == before["partitioned"]
    admin.ok("DELETE", f"{base}/plain-3")
    admin.ok("PUT", f"{base}/plain-5")  # room again once a topic is deleted
