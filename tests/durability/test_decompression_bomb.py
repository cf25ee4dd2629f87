"""Decompression bombs sent to a real standalone (issue 22, item 2).

A Pulsar SEND of 64 bytes claiming LZ4 (or ZLIB, ZSTD, SNAPPY) with ``uncompressed_size`` of
10^9 used to be stored as is, and every Kafka fetch of it then allocated a gigabyte. Now the
producer gets SEND_ERROR for that message alone, nothing is stored, and the server's peak RSS
(its VmHWM, reset through /proc/<pid>/clear_refs) stays far below what the bomb claims; a
Kafka batch inflating beyond the max message size is refused at produce the same way.
Clients of other topics, Pulsar and Kafka, notice nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest

from magnetar.protocols.kafka import compression as kafka_codecs
from magnetar.protocols.kafka import records
from magnetar.protocols.pulsar import compression as pulsar_codecs
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import encode_payload_command
from magnetar.testing.server import StandaloneProcess
from tests.durability.test_pulsar_bad_input import (
    T,
    _send_parts,
    fresh_topic,
    pulsar_client,
    raw_connection,
    read_all,
    round_trip,
    send_frame,
)
from tests.kafka.conftest import RawKafka

MiB = 1024 * 1024
BOMB = 256 * MiB  # what the inflating payloads really hold
CLAIM = 10**9
HEADROOM = 64 * MiB  # the server may grow by this much at most while refusing bombs
CORRUPT_MESSAGE = 2


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for process {pid}")


def _peak_growth(server: StandaloneProcess, work: Callable[[], None]) -> int:
    """How far the server's peak RSS rose above its RSS while ``work`` ran."""
    assert server.proc is not None
    pid = server.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status(pid, "VmRSS")
    work()
    return _status(pid, "VmHWM") - before


def _bomb_send(producer_name: str, sequence_id: int, codec: int, size: int, data: bytes) -> bytes:
    cmd, metadata = _send_parts(1, sequence_id, producer_name)
    metadata.compression = codec  # type: ignore[assignment]
    metadata.uncompressed_size = size
    return encode_payload_command(cmd, metadata, data)


def _bombs() -> list[tuple[int, int, bytes]]:
    """(codec, claimed size, data): a 64-byte claim per codec, and 256 MiB of zeros per codec
    claiming 1 KiB (which must be cut at 1 KiB, not inflated)."""
    zeros = bytes(BOMB)
    claims = [(codec, CLAIM, b"\x00" * 64) for codec in pulsar_codecs.CODECS[1:]]
    inflating = [
        (codec, 1024, pulsar_codecs.compress(codec, zeros))
        for codec in (pulsar_codecs.LZ4, pulsar_codecs.ZSTD)  # these fit in one frame
    ]
    return claims + inflating


def _assert_other_clients_unaffected(server: StandaloneProcess) -> None:
    topic = fresh_topic("bystander")
    with pulsar_client(server) as client:
        consumer = client.subscribe(topic, "s")
        round_trip(client.create_producer(topic), consumer, b"business as usual")
    kafka_topic = f"bystander-{uuid.uuid4().hex[:8]}"
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(kafka_topic, b"kafka as usual")
    assert producer.flush(10) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([kafka_topic])
        message = None
        while message is None:
            message = consumer.poll(10)
            assert message is not None, "the Kafka consumer got nothing within 10 s"
        assert message.error() is None
        assert message.value() == b"kafka as usual"
    finally:
        consumer.close()


@pytest.mark.slow
def test_pulsar_bombs_are_refused_at_publish_and_cost_no_memory(
    standalone: StandaloneProcess,
) -> None:
    topic = fresh_topic("bomb")
    bombs = _bombs()
    errors: list[pb.CommandSendError] = []

    def send_bombs() -> None:
        with raw_connection(standalone) as raw:
            name = raw.create_producer(topic, producer_id=1)
            for seq, (codec, size, data) in enumerate(bombs):
                raw.send(_bomb_send(name, seq, codec, size, data))
                errors.append(raw.expect(T.SEND_ERROR).send_error)
            raw.send(send_frame(1, len(bombs), name, b"intact"))
            assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == len(bombs)

    grown = _peak_growth(standalone, send_bombs)
    assert grown < HEADROOM, f"the server grew by {grown / MiB:.0f} MiB refusing bombs"
    assert [e.sequence_id for e in errors] == list(range(len(bombs)))
    assert {e.error for e in errors} == {pb.ServerError.ChecksumError}
    assert all("message refused" in e.message for e in errors)
    with pulsar_client(standalone) as client:
        assert read_all(client, topic) == [b"intact"]  # no bomb was stored
    _assert_other_clients_unaffected(standalone)


@pytest.mark.slow
@pytest.mark.parametrize("codec", [kafka_codecs.GZIP, kafka_codecs.LZ4, kafka_codecs.ZSTD])
def test_kafka_bomb_is_refused_at_produce_and_costs_no_memory(
    standalone: StandaloneProcess, codec: int
) -> None:
    topic = f"bomb-{uuid.uuid4().hex[:8]}"
    bomb = records.encode([records.Record(None, bytes(BOMB), 1_700_000_000_000)], codec=codec)
    assert len(bomb) < 2 * MiB  # it fits any request, and inflates to 256 MiB
    raw = RawKafka(standalone.kafka_port)
    answers: list[tuple[int, int]] = []
    good = records.encode([records.Record(None, b"fine", 1)], codec=codec)
    try:
        assert raw.produce(topic, good) == (0, 0)
        grown = _peak_growth(standalone, lambda: answers.append(raw.produce(topic, bomb)))
        assert answers[0][0] == CORRUPT_MESSAGE
        assert raw.end_offset(topic) == 1  # nothing of the bomb was stored
        assert raw.produce(topic, good) == (0, 1)
    finally:
        raw.close()
    assert grown < HEADROOM, f"the server grew by {grown / MiB:.0f} MiB refusing a bomb"
    _assert_other_clients_unaffected(standalone)
