"""Topic configs given at creation are applied or refused, never accepted and dropped (issue
23, item 1): retention.ms / retention.bytes / max.message.bytes become the topic's policies
(enforced, and reported by DescribeConfigs with their source); a config no topic can have
(an unknown cleanup policy or name, retention in other than whole minutes or MiB) is refused with
INVALID_CONFIG naming it, and nothing is created."""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka
import kafka
import pulsar
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import run_standalone
from tests.kafka.conftest import TIMEOUT_S

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Segments of 10 entries and a retention sweep every 0.2 s, so retention shows fast."""
    yield from run_standalone(
        tmp_path_factory, "--segment-max-entries", "10", "--retention-check-interval", "0.2"
    )


@pytest.mark.parametrize(
    "config",
    [
        {"cleanup.policy": "compact,shred"},
        {"max.message.bytes": "10000000"},  # above the broker's 5 MiB
        {"no.such.config": "1"},
        {"retention.ms": "90000"},  # 1.5 minutes: Pulsar keeps whole minutes
        {"retention.bytes": "1000"},
        {"compression.type": "zstd"},
    ],
)
def test_confluent_create_with_an_unappliable_config_is_refused(
    bootstrap: str, topic: str, config: dict[str, str]
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(TIMEOUT_S)
    error = refused.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert next(iter(config)) in error.str()
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics  # nothing created


def test_a_config_the_topic_has_anyway_is_accepted_and_reported(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "delete", "message.timestamp.type": "CreateTime"}
    admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert {k: described[k].value for k in config} == config


def test_kafka_python_create_with_compact(bootstrap: str, topic: str) -> None:
    """cleanup.policy=compact is the topic's compaction policy (tests/kafka/test_compaction.py
    reads it); an unknown policy is refused."""
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        configs = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])
        policy = configs["topic"][topic]["cleanup.policy"]
        assert (policy["value"], policy["config_source"]) == ("compact", "DYNAMIC_TOPIC_CONFIG")
        bad = KpNewTopic(f"{topic}-x", 1, 1, topic_configs={"cleanup.policy": "shred"})
        with pytest.raises(kafka.errors.InvalidConfigurationError, match=r"cleanup\.policy"):
            admin.create_topics([bad])
    finally:
        admin.close()


def test_retention_and_size_are_the_topics_own(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"retention.ms": "3600000", "retention.bytes": str(MiB), "max.message.bytes": "200000"}
    admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    for name, value in config.items():
        assert described[name].value == value
        assert described[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert not described[name].is_default

    # max.message.bytes is enforced: a bigger batch is refused, for Kafka and Pulsar alike
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                         "message.max.bytes": 10_000_000})  # fmt: skip
    errors: list[confluent_kafka.KafkaError] = []
    producer.produce(topic, b"x" * 300_000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert errors and errors[0] is not None
    assert errors[0].code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE
    client = pulsar.Client(standalone.pulsar_url, operation_timeout_seconds=10)
    partition = f"persistent://public/default/{topic}-partition-0"
    try:  # refused as Pulsar refuses it: the client retries until its send timeout
        big = client.create_producer(partition, batching_enabled=False, send_timeout_millis=2000)
        with pytest.raises(pulsar.PulsarException):
            big.send(b"y" * 300_000)
        client.create_producer(partition).send(b"small")
    finally:
        client.close()

    # retention.bytes is applied: 4 MiB written with no reader, 1 MiB kept (whole segments)
    for i in range(40):  # one entry each (segments roll every 10 entries)
        producer.produce(topic, b"%03d" % i + b"z" * 100_000)
        assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:  # trimmed to about retention.bytes (whole segments), not just started
            low, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, 0), timeout=10
            )
            if low > 0 and (high - low) * 100_000 <= 2 * MiB:
                break
            assert time.monotonic() < deadline, f"not trimmed to retention.bytes: {low}..{high}"
            time.sleep(0.2)
    finally:
        consumer.close()


def test_a_plain_topic_reports_defaults(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert described["retention.ms"].value == "-1"  # the namespace keeps everything
    assert described["max.message.bytes"].value == str(5 * MiB + 10 * 1024)  # with batch room
    assert all(described[k].is_default for k in ("retention.ms", "max.message.bytes"))


def test_kafka_python_sees_types_sources_and_what_can_change(bootstrap: str, topic: str) -> None:
    """DescribeConfigs v3+: config types; the topic-policy configs are not read-only (they
    change over Pulsar's topic REST); the broker reports its advertised listener."""
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1)])
        everything = {"config_filter": "all"}  # defaults too
        configs = admin.describe_configs(
            [KpResource(ConfigResourceType.TOPIC, topic)], **everything
        )
        retention = configs["topic"][topic]["retention.bytes"]
        assert (retention["config_type"], retention["read_only"]) == ("LONG", False)
        assert retention["config_source"] == "DEFAULT_CONFIG" and retention["value"] == "-1"
        assert configs["topic"][topic]["cleanup.policy"]["read_only"] is False
        node = admin._client.least_loaded_node()
        broker = admin.describe_configs([KpResource(ConfigResourceType.BROKER, node)], **everything)
        listeners = broker["broker"][str(node)]["advertised.listeners"]
        assert listeners["value"] == f"PLAINTEXT://{bootstrap}"
        assert listeners["config_source"] == "STATIC_BROKER_CONFIG"
    finally:
        admin.close()
