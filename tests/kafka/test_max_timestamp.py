"""ListOffsets by maximum timestamp (KIP-734, spec -3, ListOffsets v7): the offset and
timestamp of the record with the largest timestamp, as confluent-kafka-python's
test_list_offsets checks with OffsetSpec.max_timestamp() (issue 23, item 2; before, the
answer was offset 0)."""

from __future__ import annotations

import confluent_kafka
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.kafka.conftest import TIMEOUT_S, RawKafka

from kafka.protocol.consumer import ListOffsetsRequest  # isort: skip

BASE_TS = 1_700_000_000_000


def _list(admin: AdminClient, topic: str, spec: OffsetSpec) -> tuple[int, int]:
    tp = TopicPartition(topic, 0)
    found = admin.list_offsets({tp: spec})[tp].result(TIMEOUT_S)
    return found.offset, found.timestamp


def _produce(bootstrap: str, topic: str, batches: list[list[int]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for batch in batches:  # one record batch each: flushed before the next
        for ts in batch:
            producer.produce(topic, value=b"v%d" % ts, timestamp=BASE_TS + ts)
        assert producer.flush(TIMEOUT_S) == 0


def test_confluent_list_offsets_max_timestamp(bootstrap: str, topic: str) -> None:
    # The largest timestamp (+9) is in the middle of the second batch, and again later.
    _produce(bootstrap, topic, [[5, 1], [3, 9, 4], [9, 2], [7]])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert _list(admin, topic, OffsetSpec.max_timestamp()) == (3, BASE_TS + 9)
    assert _list(admin, topic, OffsetSpec.earliest())[0] == 0
    assert _list(admin, topic, OffsetSpec.latest())[0] == 8


def test_max_timestamp_of_an_empty_partition_is_none(
    bootstrap: str, raw: RawKafka, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(TIMEOUT_S)
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-3)
    topics = [ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])]
    answer = raw.request(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=topics))
    found = answer.topics[0].partitions[0]
    assert (found.error_code, found.offset, found.timestamp) == (0, -1, -1)
