"""kill -9 of the server in the middle of a produce: no acknowledged record is lost, and the
idempotent producer's retries after the restart store nothing twice."""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka
import pytest

from magnetar.protocols.kafka import records
from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import RawKafka

from kafka.protocol.producer import InitProducerIdRequest  # isort: skip

N = 3000


@pytest.mark.slow
def test_kill_mid_produce_loses_no_acknowledged_record(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path / "data").start()
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    topic = "crash"
    acked: set[bytes] = set()

    def delivered(err: object, msg: confluent_kafka.Message) -> None:
        if err is None:
            acked.add(msg.value())

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "batch.num.messages": 50,
            "message.timeout.ms": 60_000,
        }
    )
    acked_before_kill: set[bytes] = set()
    try:
        for i in range(N):
            producer.produce(topic, value=f"r{i:05d}".encode(), on_delivery=delivered)
            if i % 100 == 99:  # keep about 300 records in flight
                deadline = time.monotonic() + 60
                while len(acked) < i - 300 and time.monotonic() < deadline:
                    producer.poll(0.05)
            if i == N // 3:
                server.kill()  # SIGKILL while records are in flight: nothing is flushed
                acked_before_kill = set(acked)
                server.start()  # same data dir, same ports
        assert producer.flush(60) == 0
    finally:
        server.stop()
    assert acked_before_kill, "the kill never happened"
    assert len(acked) == N

    server = StandaloneProcess(
        tmp_path / "data", pulsar_port=server.pulsar_port, kafka_port=server.kafka_port
    ).start()
    try:
        stored = _consume_all(f"127.0.0.1:{server.kafka_port}", topic)
    finally:
        server.stop()
    assert acked_before_kill <= set(stored)  # every acknowledged record survived
    assert len(stored) == len(set(stored)) == N  # retries after the restart were not stored twice


def _consume_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "auto.offset.reset": "earliest"}
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        quiet_until = time.monotonic() + 20
        while time.monotonic() < quiet_until:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
                quiet_until = time.monotonic() + 2  # done once nothing came for 2 s
    finally:
        consumer.close()
    return got


def test_idempotent_retry_is_recognised_after_a_restart(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path / "data").start()
    try:
        raw = RawKafka(server.kafka_port)
        try:
            init = raw.request(
                InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=1)
            )
            batch = records.encode(
                [records.Record(b"k", b"v%d" % i, 1_700_000_000_000) for i in range(3)],
                producer_id=init.producer_id,
                producer_epoch=init.producer_epoch,
                base_sequence=0,
            )
            assert raw.produce("idem", batch) == (0, 0)
        finally:
            raw.close()
        server.kill()
        server.start()
        raw = RawKafka(server.kafka_port)
        try:
            assert raw.produce("idem", batch) == (0, 0)  # the retry: answered, not stored
            assert raw.end_offset("idem") == 3
        finally:
            raw.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_pipelined_idempotent_batches_are_admitted_in_order_while_the_topic_loads(
    tmp_path: Path,
) -> None:
    """An idempotent producer pipelines batches on one connection to a topic that is not
    loaded yet (after a restart, or a move to this broker). The first requests wait for the
    load; later ones must not overtake them, or a batch is judged out of order — a fatal
    error for the client (found by bench/failover.py)."""
    from kafka.protocol.producer import ProduceRequest

    server = StandaloneProcess(tmp_path / "data").start()
    try:
        raw = RawKafka(server.kafka_port)
        init = raw.request(
            InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=1)
        )
        history = [records.Record(b"k", b"h" * 100, 1_700_000_000_000) for _ in range(50)]
        for _ in range(200):  # history for the producer state rebuild to read
            assert raw.produce("pipelined", records.encode(history))[0] == 0
        raw.close()
        server.kill()
        server.start()
        raw = RawKafka(server.kafka_port)
        try:
            frames = []
            for i in range(50):
                batch = records.encode(
                    [records.Record(b"k", b"v%d" % i, 1_700_000_000_000)],
                    producer_id=init.producer_id,
                    producer_epoch=init.producer_epoch,
                    base_sequence=i,
                )
                part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)
                request = ProduceRequest[7](
                    transactional_id=None,
                    acks=-1,
                    timeout_ms=10_000,
                    topic_data=[
                        ProduceRequest.TopicProduceData(name="pipelined", partition_data=[part])
                    ],
                )
                request.with_header(correlation_id=1000 + i, client_id="raw-test")
                frames.append(request)
            # all in flight before any answer
            raw.send_bytes(b"".join(bytes(r.encode(framed=True, header=True)) for r in frames))
            codes = []
            for request in frames:
                frame = raw.read_frame()
                assert frame is not None
                answer = request.header.get_response_class().decode(frame, header=True)
                codes.append(answer.responses[0].partition_responses[0].error_code)
            assert codes == [0] * len(frames), codes
            assert raw.end_offset("pipelined") == 200 * 50 + 50
        finally:
            raw.close()
    finally:
        server.stop()
