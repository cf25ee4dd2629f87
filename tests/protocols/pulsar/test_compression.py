"""Payload codecs: round trips for every codec, and refusal of bad data."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocols.pulsar import compression
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import CompressionError, UnsupportedCompressionError

CODECS = pytest.mark.parametrize("codec", compression.CODECS, ids=lambda c: str(c))
data_of_all_kinds = st.binary(max_size=4096) | st.builds(
    lambda chunk, times: chunk * times, st.binary(min_size=1, max_size=16), st.integers(1, 500)
)


@CODECS
@given(data=data_of_all_kinds)
def test_round_trip(codec: int, data: bytes) -> None:
    assert compression.decompress(codec, compression.compress(codec, data), len(data)) == data


@CODECS
def test_empty_payload_round_trip(codec: int) -> None:
    assert compression.decompress(codec, compression.compress(codec, b""), 0) == b""


@pytest.mark.parametrize("codec", compression.CODECS[1:], ids=lambda c: str(c))
@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_uncompressed_size_is_refused(codec: int, delta: int) -> None:
    data = b"abcdefgh" * 100
    with pytest.raises(CompressionError):
        compression.decompress(codec, compression.compress(codec, data), len(data) + delta)


@pytest.mark.parametrize("codec", compression.CODECS[1:], ids=lambda c: str(c))
def test_corrupt_data_is_refused(codec: int) -> None:
    with pytest.raises(CompressionError):
        compression.decompress(codec, b"\xff\xfe garbage \x00\x01", 100)


def test_zlib_trailing_garbage_is_refused() -> None:
    with pytest.raises(CompressionError):
        compression.decompress(compression.ZLIB, zlib.compress(b"abc") + b"x", 3)


def test_max_size_bounds_the_announced_size() -> None:
    packed = compression.compress(compression.ZSTD, b"a" * 1000)
    with pytest.raises(CompressionError, match="over the 999 allowed"):
        compression.decompress(compression.ZSTD, packed, 1000, max_size=999)


def test_unknown_codec_is_refused() -> None:
    with pytest.raises(UnsupportedCompressionError) as caught:
        compression.decompress(9, b"", 0)
    assert caught.value.codec == 9
    with pytest.raises(UnsupportedCompressionError):
        compression.compress(9, b"")


def test_lz4_is_a_raw_block_and_zlib_has_its_header() -> None:
    data = b"hello hello hello hello"
    # A raw LZ4 block starts with a token, not the LZ4 frame magic 04 22 4d 18.
    assert not compression.compress(compression.LZ4, data).startswith(b"\x04\x22\x4d\x18")
    assert compression.compress(compression.ZLIB, data)[:1] == b"\x78"
    assert compression.compress(compression.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"


def test_decompress_payload_follows_the_metadata() -> None:
    data = b"payload" * 10
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=0,
        compression=pb.CompressionType.SNAPPY,
        uncompressed_size=len(data),
    )
    packed = compression.compress(compression.SNAPPY, data)
    assert compression.decompress_payload(metadata, packed) == data
