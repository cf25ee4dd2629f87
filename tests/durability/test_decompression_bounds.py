"""Every decompression is bounded (issue 22, item 2): codec by codec, without a server.

A few bytes may claim, or really hold, a gigabyte once inflated. Each codec must refuse such
a payload before it allocates the claimed size and never write past the bound; the peak RSS
of this process (reset through /proc/self/clear_refs) shows what was really allocated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import zstandard

from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.protocols.kafka import compression as kafka_codecs
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.conversion import to_kafka_batch
from magnetar.protocols.kafka.errors import CorruptRecordError
from magnetar.protocols.pulsar import compression as pulsar_codecs
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.entry_format import PulsarEntryFormat
from magnetar.protocols.pulsar.errors import CompressionError, MessageRefusedError
from magnetar.protocols.pulsar.frames import pack_payload

MiB = 1024 * 1024
LIMIT = 1 * MiB
BOMB = 256 * MiB  # what the hostile payloads inflate to
HEADROOM = 64 * MiB  # well under the bomb: what a bounded decompression may cost at most
CLAIM = 10**9  # an uncompressed_size no message may have


def _peak_rss_growth(work: Callable[[], object]) -> int:
    """Bytes the peak RSS of this process rose by while ``work`` ran."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status("VmRSS")
    with contextlib.suppress(CompressionError, CorruptRecordError):
        work()  # the refusals under test; the callers check them separately
    return _status("VmHWM") - before


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


@pytest.fixture(scope="module")
def zeros() -> bytes:
    return bytes(BOMB)


# -- Pulsar: one codec per MessageMetadata.compression -----------------------------------------

PULSAR_CODECS = [pulsar_codecs.LZ4, pulsar_codecs.ZLIB, pulsar_codecs.ZSTD, pulsar_codecs.SNAPPY]


@pytest.mark.parametrize("codec", PULSAR_CODECS, ids=pb.CompressionType.Name)
def test_pulsar_claim_beyond_the_limit_is_refused_before_allocating(codec: int) -> None:
    data = pulsar_codecs.compress(codec, b"x" * 64)
    with pytest.raises(CompressionError, match="over the 1048576 allowed"):
        pulsar_codecs.decompress(codec, data, CLAIM, max_size=LIMIT)
    assert _peak_rss_growth(lambda: pulsar_codecs.decompress(codec, data, CLAIM)) < HEADROOM


@pytest.mark.slow
@pytest.mark.parametrize("codec", PULSAR_CODECS, ids=pb.CompressionType.Name)
def test_pulsar_payload_inflating_past_its_claim_stops_at_the_claim(
    codec: int, zeros: bytes
) -> None:
    """A payload that claims 1 KiB and holds 256 MiB is cut at 1 KiB, and refused."""
    data = pulsar_codecs.compress(codec, zeros)
    with pytest.raises(CompressionError):
        pulsar_codecs.decompress(codec, data, 1024, max_size=LIMIT)
    grown = _peak_rss_growth(lambda: pulsar_codecs.decompress(codec, data, 1024, max_size=LIMIT))
    assert grown < HEADROOM


@pytest.mark.parametrize("codec", PULSAR_CODECS, ids=pb.CompressionType.Name)
def test_pulsar_payload_shorter_than_its_claim_is_refused(codec: int) -> None:
    data = pulsar_codecs.compress(codec, b"y" * 1000)
    with pytest.raises(CompressionError):
        pulsar_codecs.decompress(codec, data, 1001, max_size=LIMIT)
    assert pulsar_codecs.decompress(codec, data, 1000, max_size=LIMIT) == b"y" * 1000


def test_pulsar_default_bound_is_the_process_max_message_size() -> None:
    data = pulsar_codecs.compress(pulsar_codecs.LZ4, b"z" * 4096)
    old = formats.max_message_size()
    formats.limit_message_size(4095)
    try:
        with pytest.raises(CompressionError, match="over the 4095 allowed"):
            pulsar_codecs.decompress(pulsar_codecs.LZ4, data, 4096)
    finally:
        formats.limit_message_size(old)
    assert pulsar_codecs.decompress(pulsar_codecs.LZ4, data, 4096) == b"z" * 4096


def test_pulsar_publish_check_refuses_a_bomb_and_passes_an_honest_payload() -> None:
    honest = b"honest " * 100
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        compression=pb.CompressionType.LZ4,
        uncompressed_size=len(honest),
    )
    pulsar_codecs.check_payload(metadata, pulsar_codecs.compress(pb.LZ4, honest), max_size=LIMIT)
    metadata.uncompressed_size = CLAIM
    with pytest.raises(MessageRefusedError, match="claims to decompress to 1000000000"):
        pulsar_codecs.check_payload(metadata, b"\x00" * 64, max_size=LIMIT)


def test_pulsar_offload_unpack_of_a_stored_bomb_is_bounded(zeros: bytes) -> None:
    """An entry stored before publish checked it: offload and Spark (formats.unpack_columns)
    refuse it instead of inflating it."""
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        compression=pb.CompressionType.LZ4,
        uncompressed_size=CLAIM,
    )
    entry = pack_payload(metadata, pulsar_codecs.compress(pb.LZ4, zeros))
    codec = PulsarEntryFormat()
    with pytest.raises(CompressionError):
        codec.unpack_columns(entry)
    with pytest.raises(CompressionError):
        codec.unpack(entry)
    assert _peak_rss_growth(lambda: formats.unpack_columns(formats.PULSAR, entry)) < HEADROOM


# -- Kafka: one codec per record-batch attribute ---------------------------------------------


def _kafka_bombs(zeros: bytes) -> dict[str, tuple[int, bytes]]:
    """Each codec as the clients write it, holding 256 MiB of zeros."""
    raw_snappy = bytes(cramjam.snappy.compress_raw(zeros))
    return {
        "gzip": (kafka_codecs.GZIP, kafka_codecs.compress(kafka_codecs.GZIP, zeros)),
        "snappy-xerial": (kafka_codecs.SNAPPY, kafka_codecs.compress(kafka_codecs.SNAPPY, zeros)),
        "snappy-raw": (kafka_codecs.SNAPPY, raw_snappy),
        "lz4-frame-linked": (kafka_codecs.LZ4, lz4.frame.compress(zeros)),
        "lz4-frame": (kafka_codecs.LZ4, kafka_codecs.compress(kafka_codecs.LZ4, zeros)),
        "zstd-sized": (kafka_codecs.ZSTD, kafka_codecs.compress(kafka_codecs.ZSTD, zeros)),
        "zstd-unsized": (
            kafka_codecs.ZSTD,
            zstandard.ZstdCompressor(write_content_size=False).compress(zeros),
        ),
    }


KAFKA_VARIANTS = [
    "gzip",
    "snappy-xerial",
    "snappy-raw",
    "lz4-frame-linked",
    "lz4-frame",
    "zstd-sized",
    "zstd-unsized",
]


@pytest.fixture(scope="module")
def kafka_bombs(zeros: bytes) -> dict[str, tuple[int, bytes]]:
    return _kafka_bombs(zeros)


@pytest.mark.slow
@pytest.mark.parametrize("variant", KAFKA_VARIANTS)
def test_kafka_bomb_is_refused_without_inflating_it(
    variant: str, kafka_bombs: dict[str, tuple[int, bytes]]
) -> None:
    codec, data = kafka_bombs[variant]
    with pytest.raises(CorruptRecordError, match="within 1048576 bytes"):
        kafka_codecs.decompress(codec, data, max_size=LIMIT)
    grown = _peak_rss_growth(lambda: kafka_codecs.decompress(codec, data, max_size=LIMIT))
    assert grown < HEADROOM


@pytest.mark.parametrize("variant", KAFKA_VARIANTS)
def test_kafka_payload_up_to_the_limit_decompresses(variant: str) -> None:
    exact = bytes(range(256)) * (LIMIT // 256)
    codec, data = _kafka_bombs(exact)[variant]
    assert kafka_codecs.decompress(codec, data, max_size=LIMIT) == exact
    with pytest.raises(CorruptRecordError):
        kafka_codecs.decompress(codec, data, max_size=LIMIT - 1)


def test_kafka_truncated_gzip_is_corrupt() -> None:
    data = kafka_codecs.compress(kafka_codecs.GZIP, b"g" * 10_000)
    with pytest.raises(CorruptRecordError):
        kafka_codecs.decompress(kafka_codecs.GZIP, data[:-12], max_size=LIMIT)


def test_kafka_batch_decode_is_bounded_by_the_process_max_message_size() -> None:
    """The conversion and offload paths (records.decode) take the server's bound."""
    value = b"v" * 4096
    batch = records.encode([records.Record(None, value, 1)], codec=kafka_codecs.ZSTD)
    old = formats.max_message_size()
    formats.limit_message_size(1024)
    try:
        with pytest.raises(CorruptRecordError):
            records.decode(batch)
    finally:
        formats.limit_message_size(old)
    assert [r.value for r in records.decode(batch)] == [value]


def test_kafka_fetch_conversion_of_a_stored_pulsar_bomb_is_bounded(zeros: bytes) -> None:
    """A Pulsar entry stored before publish checked it: the Kafka fetch path converts it into
    a CORRUPT_MESSAGE error, not into a gigabyte."""
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        compression=pb.CompressionType.ZSTD,
        uncompressed_size=CLAIM,
    )
    payload = pack_payload(metadata, pulsar_codecs.compress(pb.ZSTD, zeros))
    entry = Entry(
        base_offset=0,
        count=1,
        publish_time=1,
        event_time=-1,
        format=formats.PULSAR,
        payload=payload,
    )
    with pytest.raises(CorruptRecordError):
        to_kafka_batch(entry)
    grown = _peak_rss_growth(lambda: to_kafka_batch(entry))
    assert grown < HEADROOM
