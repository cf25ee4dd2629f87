"""Wrong transaction calls get Kafka's error codes (issue 17): a bad timeout, an unknown
transactional id or producer id, a stale epoch, an unknown partition, offsets for a group
not added to the transaction, and control batches from a producer."""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.errors import ErrorCode
from tests.kafka.conftest import TS, RawKafka


def _init(raw: RawKafka, tid: str, timeout_ms: int = 60_000) -> tuple[int, int, int]:
    answer = raw.request(InitProducerIdRequest[1](transactional_id=tid,
                                                  transaction_timeout_ms=timeout_ms))  # fmt: skip
    return answer.error_code, answer.producer_id, answer.producer_epoch


def _add(raw: RawKafka, tid: str, pid: int, epoch: int, topic: str, partition: int) -> int:
    Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    request = AddPartitionsToTxnRequest[3](
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[Topic(name=topic, partitions=[partition])],
    )
    answer = raw.request(request)
    return int(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def _end(raw: RawKafka, tid: str, pid: int, epoch: int, commit: bool) -> int:
    request = EndTxnRequest[3](
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return int(raw.request(request).error_code)


def test_transaction_coordinator_is_found(raw: RawKafka) -> None:
    found = raw.request(FindCoordinatorRequest[1](key="some-tid", key_type=1))
    assert found.error_code == 0 and found.node_id == 0
    bad = raw.request(FindCoordinatorRequest[1](key="x", key_type=7))
    assert bad.error_code == ErrorCode.INVALID_REQUEST


def test_wrong_calls_are_refused(raw: RawKafka, topic: str) -> None:
    assert _init(raw, "tid-bad-timeout", 0)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    error, pid, epoch = _init(raw, "tid-" + topic)
    assert error == 0
    raw.produce(topic, records.encode([records.Record(b"k", b"v", TS)]))  # the topic exists
    tid = "tid-" + topic
    assert _add(raw, tid, pid, epoch, topic, 5) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _add(raw, tid, pid + 1, epoch, topic, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _add(raw, "tid-unknown", pid, epoch, topic, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _add(raw, tid, pid, epoch, topic, 0) == 0
    # offsets of a group the transaction did not add
    Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    request = TxnOffsetCommitRequest[2](
        transactional_id=tid, group_id="g", producer_id=pid, producer_epoch=epoch,
        topics=[Topic(name=topic, partitions=[Topic.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1,
            committed_metadata=None)])],
    )  # fmt: skip
    answer = raw.request(request)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
    added = raw.request(AddOffsetsToTxnRequest[1](transactional_id=tid, producer_id=pid,
                                                  producer_epoch=epoch, group_id="g"))  # fmt: skip
    assert added.error_code == 0
    # a newer epoch fences this one
    error, same_pid, newer = _init(raw, tid)
    assert (error, same_pid, newer) == (0, pid, epoch + 1)
    assert _end(raw, tid, pid, epoch, True) == ErrorCode.PRODUCER_FENCED
    assert _end(raw, tid, pid, newer, True) == ErrorCode.INVALID_TXN_STATE  # nothing open
    assert _end(raw, tid, pid, newer, False) == 0  # aborting nothing is fine


def test_a_producer_cannot_write_control_batches(raw: RawKafka, topic: str) -> None:
    marker = records.Record(b"\x00\x00\x00\x01", b"", TS)
    flags = records.CONTROL | records.TRANSACTIONAL
    batch = records.encode([marker], producer_id=1, producer_epoch=0, attributes=flags)
    assert raw.produce(topic, batch)[0] == ErrorCode.INVALID_RECORD


def test_a_transactional_batch_needs_its_partition_added(raw: RawKafka, topic: str) -> None:
    raw.produce(topic, records.encode([records.Record(b"k", b"v", TS)]))  # the topic exists
    error, pid, epoch = _init(raw, "tid-" + topic)
    assert error == 0
    batch = records.encode([records.Record(b"k", b"v", TS)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=0,
                           attributes=records.TRANSACTIONAL)  # fmt: skip
    assert raw.produce(topic, batch)[0] == ErrorCode.INVALID_TXN_STATE
    assert _add(raw, "tid-" + topic, pid, epoch, topic, 0) == 0
    assert raw.produce(topic, batch)[0] == 0
    assert _end(raw, "tid-" + topic, pid, epoch, False) == 0
