"""Kafka admin writes (issue 17): CreatePartitions, AlterConfigs / IncrementalAlterConfigs on
topic policies, DeleteRecords, DeleteGroups, OffsetDelete, DescribeLogDirs, ElectLeaders and
DescribeTopicPartitions, through confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient; each wrong call gets Kafka's error code."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka
import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import KafkaAdminClient
from kafka.protocol.consumer import FetchRequest

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import run_standalone
from tests.kafka.conftest import TIMEOUT_S, RawKafka

MAX_PARTITIONS = 8


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Segments of 10 entries, a fast retention sweep and at most 8 partitions a topic."""
    yield from run_standalone(
        tmp_path_factory,
        "--segment-max-entries", "10",
        "--retention-check-interval", "0.2",
        "--max-num-partitions-per-partitioned-topic", str(MAX_PARTITIONS),
    )  # fmt: skip


@pytest.fixture
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def kp_admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        yield client
    finally:
        client.close()


def _create(admin: AdminClient, topic: str, partitions: int) -> None:
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(TIMEOUT_S)


def _error(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        future.result(TIMEOUT_S)  # type: ignore[attr-defined]
    error: KafkaError = refused.value.args[0]
    return error


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, b"v%d" % i, partition=partition)
        producer.flush(TIMEOUT_S)  # one batch (one entry) each: segments of 10 entries
    assert producer.flush(TIMEOUT_S) == 0


# -- CreatePartitions ----------------------------------------------------------------------


def test_create_partitions_grows_a_topic_that_then_takes_records(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    _create(admin, topic, 2)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(TIMEOUT_S)
    assert len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 5
    _produce(bootstrap, topic, 1, partition=4)
    offsets = admin.list_offsets(
        {TopicPartition(topic, 4): confluent_kafka.admin.OffsetSpec.latest()}
    )
    assert offsets[TopicPartition(topic, 4)].result(TIMEOUT_S).offset == 1


def test_create_partitions_refusals(admin: AdminClient, topic: str) -> None:
    _create(admin, topic, 3)
    cases = {
        "smaller": (NewPartitions(topic, 2), KafkaError.INVALID_PARTITIONS, "must be larger"),
        "over max": (NewPartitions(topic, MAX_PARTITIONS + 1), KafkaError.INVALID_PARTITIONS,
                     "max_num_partitions_per_partitioned_topic"),
        "unknown": (NewPartitions(topic + "-none", 4), KafkaError.UNKNOWN_TOPIC_OR_PART, "exist"),
        "replicas": (NewPartitions(topic, 4, replica_assignment=[[7]]),
                     KafkaError.INVALID_REPLICA_ASSIGNMENT, "one replica"),
    }  # fmt: skip
    for label, (new, code, text) in cases.items():
        error = _error(admin.create_partitions([new])[new.topic])
        assert (error.code(), label) == (code, label)
        assert text in error.str(), label
    # validate_only checks and changes nothing
    admin.create_partitions([NewPartitions(topic, 6)], validate_only=True)[topic].result(TIMEOUT_S)
    assert len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 3


def test_an_auto_created_topic_cannot_grow(bootstrap: str, admin: AdminClient, topic: str) -> None:
    _produce(bootstrap, topic, 1)  # auto-created: one non-partitioned topic
    error = _error(admin.create_partitions([NewPartitions(topic, 2)])[topic])
    assert error.code() == KafkaError.INVALID_PARTITIONS
    assert "not partitioned" in error.str()


def test_kafka_python_create_partitions(kp_admin: KafkaAdminClient, topic: str) -> None:
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.admin import NewTopic as KpNewTopic

    kp_admin.create_topics([KpNewTopic(topic, 1, 1)])
    kp_admin.create_partitions({topic: KpNewPartitions(total_count=3)})
    assert {p["partition_index"] for p in kp_admin.describe_topics([topic])[0]["partitions"]} == {
        0,
        1,
        2,
    }
    with pytest.raises(kafka.errors.InvalidPartitionsError):
        kp_admin.create_partitions({topic: KpNewPartitions(total_count=2)})


# -- AlterConfigs / IncrementalAlterConfigs ------------------------------------------------


def _configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(TIMEOUT_S)  # type: ignore[no-any-return]


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry) -> object:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
    return admin.incremental_alter_configs([resource])[resource]


def test_incremental_alter_sets_and_deletes_topic_policies(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    _create(admin, topic, 1)
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    _incremental(
        admin, topic,
        ConfigEntry("retention.ms", "120000", incremental_operation=SET),
        ConfigEntry("max.message.bytes", "2000", incremental_operation=SET),
    ).result(TIMEOUT_S)  # type: ignore[attr-defined]  # fmt: skip
    configs = _configs(admin, topic)
    assert configs["retention.ms"].value == "120000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.bytes"].value == "-1"
    assert configs["max.message.bytes"].value == "2000"
    # the loaded partition follows at once: a bigger record is refused
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 100_000})
    failures: list[KafkaError] = []
    producer.produce(topic, b"x" * 5_000, on_delivery=lambda err, _: failures.append(err))
    producer.flush(TIMEOUT_S)
    assert [e.code() for e in failures] == [KafkaError.MSG_SIZE_TOO_LARGE]
    _incremental(
        admin, topic,
        ConfigEntry("retention.ms", None, incremental_operation=DELETE),
        ConfigEntry("max.message.bytes", None, incremental_operation=DELETE),
    ).result(TIMEOUT_S)  # type: ignore[attr-defined]  # fmt: skip
    configs = _configs(admin, topic)
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_alter_configs_replaces_the_whole_topic_config(admin: AdminClient, topic: str) -> None:
    _create(admin, topic, 1)
    SET = AlterConfigOpType.SET
    entry = ConfigEntry("max.message.bytes", "3000", incremental_operation=SET)
    _incremental(admin, topic, entry).result(TIMEOUT_S)  # type: ignore[attr-defined]
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic, set_config={"retention.bytes": str(2 * 1024 * 1024)}
    )
    with pytest.warns(DeprecationWarning):  # confluent-kafka prefers the incremental call
        altered = admin.alter_configs([resource])[resource]
    altered.result(TIMEOUT_S)
    configs = _configs(admin, topic)
    assert configs["retention.bytes"].value == str(2 * 1024 * 1024)
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value  # left out


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("cleanup.policy", "shred", "cleanup.policy"),
        ("retention.ms", "1500", "minutes"),
        ("max.message.bytes", "999999999", "broker's limit"),
        ("no.such.config", "1", "no.such.config"),
        ("retention.bytes", "many", "not a number"),
    ],
)
def test_alter_refuses_what_a_topic_cannot_have(
    admin: AdminClient, topic: str, name: str, value: str, text: str
) -> None:
    _create(admin, topic, 1)
    error = _error(
        _incremental(
            admin, topic, ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        )
    )
    assert error.code() == KafkaError.INVALID_CONFIG
    assert text in error.str()
    assert _configs(admin, topic)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_alter_refusals_by_resource(admin: AdminClient, topic: str) -> None:
    SET = AlterConfigOpType.SET
    entry = ConfigEntry("retention.ms", "60000", incremental_operation=SET)
    assert _error(_incremental(admin, topic, entry)).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    broker = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[entry])
    error = _error(admin.incremental_alter_configs([broker])[broker])
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "static" in error.str()
    _create(admin, topic, 1)
    entry = ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.APPEND)
    error = _error(_incremental(admin, topic, entry))
    assert (error.code(), "only for list configs" in error.str()) == (
        KafkaError.INVALID_CONFIG,
        True,
    )


def test_kafka_python_alter_configs(kp_admin: KafkaAdminClient, topic: str) -> None:
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewTopic as KpNewTopic

    kp_admin.create_topics([KpNewTopic(topic, 1, 1)])
    kp_admin.alter_configs(
        [KpConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "180000"})]
    )
    described = kp_admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])
    assert described["topic"][topic]["retention.ms"]["value"] == "180000"


# -- DeleteRecords ---------------------------------------------------------------------------


def _fetch_error(raw: RawKafka, topic: str, offset: int) -> int:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )  # fmt: skip
    request = FetchRequest[11](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, rack_id="",
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])], forgotten_topics_data=[],
    )  # fmt: skip
    return int(raw.request(request).responses[0].partitions[0].error_code)


def _first_offset(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    spec = confluent_kafka.admin.OffsetSpec.earliest()
    return int(admin.list_offsets({tp: spec})[tp].result(TIMEOUT_S).offset)


def test_delete_records_moves_the_start_and_survives_a_restart(
    standalone: StandaloneProcess, admin: AdminClient, bootstrap: str, raw: RawKafka, topic: str
) -> None:
    _create(admin, topic, 1)
    _produce(bootstrap, topic, 35)
    tp = TopicPartition(topic, 0, 25)
    deleted = admin.delete_records([tp])[tp].result(TIMEOUT_S)
    assert deleted.low_watermark == 25
    assert _first_offset(admin, topic) == 25
    assert _fetch_error(raw, topic, 10) == KafkaError.OFFSET_OUT_OF_RANGE
    assert _fetch_error(raw, topic, 25) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    first = None
    while first is None:
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None
        first = message
    consumer.close()
    assert (first.offset(), first.value()) == (25, b"v25")
    # the segments wholly below offset 25 (two of 10 entries) are gone from storage
    stats = _internal_stats(standalone, topic)
    assert min(int(s["firstOffset"]) for s in stats) >= 20
    # a smaller offset changes nothing; one past the end is refused
    tp_low = TopicPartition(topic, 0, 5)
    assert admin.delete_records([tp_low])[tp_low].result(TIMEOUT_S).low_watermark == 25
    tp_past = TopicPartition(topic, 0, 36)
    assert _error(admin.delete_records([tp_past])[tp_past]).code() == KafkaError.OFFSET_OUT_OF_RANGE
    standalone.stop()
    standalone.start()
    assert _first_offset(AdminClient({"bootstrap.servers": bootstrap}), topic) == 25
    again = RawKafka(standalone.kafka_port)
    try:
        assert _fetch_error(again, topic, 24) == KafkaError.OFFSET_OUT_OF_RANGE
    finally:
        again.close()


def _internal_stats(standalone: StandaloneProcess, topic: str) -> list[dict[str, object]]:
    import json
    import urllib.request

    path = f"/admin/v2/persistent/public/default/{topic}-partition-0/internalStats"
    url = standalone.http_url + path
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
        return list(json.load(answer)["ledgers"])


def test_delete_records_all_and_unknown_partitions(
    kp_admin: KafkaAdminClient, bootstrap: str, topic: str
) -> None:
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.structs import TopicPartition as KpTopicPartition

    kp_admin.create_topics([KpNewTopic(topic, 1, 1)])
    _produce(bootstrap, topic, 4)
    low = kp_admin.delete_records({KpTopicPartition(topic, 0): -1})
    assert low[KpTopicPartition(topic, 0)]["low_watermark"] == 4
    with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
        kp_admin.delete_records({KpTopicPartition(topic, 3): 1})


# -- DeleteGroups / OffsetDelete ------------------------------------------------------------


def _commit(bootstrap: str, group: str, topic: str, offset: int, *, keep: bool = False) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})  # fmt: skip
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    if not keep:
        consumer.close()
    return consumer


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset)
    finally:
        consumer.close()


def test_delete_groups_removes_committed_offsets(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    _create(admin, topic, 1)
    _produce(bootstrap, topic, 3)
    _commit(bootstrap, topic, topic, 2)
    assert _committed(bootstrap, topic, topic) == 2
    admin.delete_consumer_groups([topic])[topic].result(TIMEOUT_S)
    assert _committed(bootstrap, topic, topic) == confluent_kafka.OFFSET_INVALID
    error = _error(admin.delete_consumer_groups([topic])[topic])
    assert error.code() == KafkaError.GROUP_ID_NOT_FOUND


def test_delete_groups_refuses_a_group_with_members(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    _create(admin, topic, 1)
    _produce(bootstrap, topic, 1)
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                       "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        member.subscribe([topic])
        message = member.poll(TIMEOUT_S)
        assert message is not None and message.error() is None
        error = _error(admin.delete_consumer_groups([topic])[topic])
        assert error.code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()


def test_offset_delete(kp_admin: KafkaAdminClient, admin: AdminClient, bootstrap: str,
                       topic: str) -> None:  # fmt: skip
    from kafka.structs import TopicPartition as KpTopicPartition

    _create(admin, topic, 1)
    _produce(bootstrap, topic, 3)
    _commit(bootstrap, topic, topic, 3)
    tp = KpTopicPartition(topic, 0)
    result = kp_admin.delete_group_offsets(topic, [tp])
    assert result[tp] is kafka.errors.NoError
    assert _committed(bootstrap, topic, topic) == confluent_kafka.OFFSET_INVALID
    with pytest.raises(kafka.errors.GroupIdNotFoundError):
        kp_admin.delete_group_offsets(topic + "-none", [tp])
    # a member subscribed to the topic keeps its offsets
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    try:
        member.subscribe([topic])
        message = member.poll(TIMEOUT_S)
        assert message is not None and message.error() is None
        member.commit(message, asynchronous=False)
        result = kp_admin.delete_group_offsets(topic, [tp])
        assert result[tp] is kafka.errors.GroupSubscribedToTopicError
    finally:
        member.close()


# -- DescribeLogDirs, ElectLeaders, DescribeTopicPartitions ---------------------------------


def test_describe_log_dirs_reports_partition_sizes(
    kp_admin: KafkaAdminClient, admin: AdminClient, bootstrap: str, topic: str
) -> None:
    _create(admin, topic, 2)
    _produce(bootstrap, topic, 3, partition=1)
    (broker,) = kp_admin.describe_log_dirs({topic: [0, 1]})
    (log_dir,) = broker["log_dirs"]
    assert log_dir["error_code"] == 0
    sizes = {p["partition_index"]: p["partition_size"] for t in log_dir["topics"]
             for p in t["partitions"]}  # fmt: skip
    assert sizes[0] == 0 and sizes[1] > 0


def test_elect_leaders_is_never_needed(admin: AdminClient, topic: str) -> None:
    from confluent_kafka import ElectionType

    _create(admin, topic, 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 5)]
    results = admin.elect_leaders(ElectionType.PREFERRED, tps).result(TIMEOUT_S)
    codes = {tp.partition: error.code() if error else 0 for tp, error in results.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 1: KafkaError.ELECTION_NOT_NEEDED,
                     5: KafkaError.UNKNOWN_TOPIC_OR_PART}  # fmt: skip


def test_describe_topic_partitions_pages(
    kp_admin: KafkaAdminClient, admin: AdminClient, topic: str
) -> None:
    _create(admin, topic + "-a", 3)
    _create(admin, topic + "-b", 2)
    names = [topic + "-a", topic + "-b"]
    first = kp_admin.describe_topic_partitions(names, response_partition_limit=4)
    assert [(t["name"], len(t["partitions"])) for t in first["topics"]] == [
        (names[0], 3),
        (names[1], 1),
    ]
    assert first["next_cursor"] == {"topic_name": names[1], "partition_index": 1}
    rest = kp_admin.describe_topic_partitions(names, cursor=first["next_cursor"])
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [1]
    assert rest["next_cursor"] is None


def test_replica_moves_are_no_ops_on_the_one_replica(
    kp_admin: KafkaAdminClient, admin: AdminClient, topic: str
) -> None:
    from kafka.structs import TopicPartition as KpTopicPartition
    from kafka.structs import TopicPartitionReplica

    _create(admin, topic, 2)
    (broker,) = kp_admin.describe_log_dirs({topic: [0]})
    here = broker["log_dirs"][0]["log_dir"]
    replica = TopicPartitionReplica(topic, 0, 0)
    assert kp_admin.alter_replica_log_dirs({replica: here})[replica] is kafka.errors.NoError
    moved = kp_admin.alter_replica_log_dirs({replica: "/elsewhere"})[replica]
    assert moved is kafka.errors.LogDirNotFoundError
    tp = KpTopicPartition(topic, 1)
    assert kp_admin.alter_partition_reassignments({tp: [0]}) == {tp: None}
    refused = kp_admin.alter_partition_reassignments({tp: [0, 1]})[tp]
    assert refused is kafka.errors.InvalidReplicationAssignmentError
    assert kp_admin.list_partition_reassignments([tp]) == {}
