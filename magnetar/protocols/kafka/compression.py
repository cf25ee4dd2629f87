"""Record-batch compression codecs, as Kafka clients write them. Pure functions.

The codec id is the low three bits of a batch's attributes:

- 1 GZIP: a gzip stream (RFC 1952).
- 2 SNAPPY: Java, kafka-python and aiokafka write the *xerial* framing
  (``\\x82SNAPPY\\x00`` + version + compat, then ``[u32 length][raw snappy block]``...);
  librdkafka writes one raw snappy block. Both are read; :func:`compress` writes xerial,
  which every client reads.
- 3 LZ4: the LZ4 *frame* format (magic ``04 22 4D 18``).
- 4 ZSTD: one zstd frame.

Decompression is bounded (``max_size``, by default the server's max message size) and never
allocates beyond the bound, so a hostile batch of a few bytes cannot exhaust memory.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from magnetar.core import formats
from magnetar.protocols.kafka.errors import CorruptRecordError, UnsupportedCompressionError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_U32 = struct.Struct(">I")

Bytes = bytes | bytearray | memoryview


def compress(codec: int, data: Bytes) -> bytes:
    """``data`` compressed with ``codec`` (0-4)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(bytes(data)))
    if codec == SNAPPY:
        return _xerial_compress(bytes(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(bytes(data)))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(bytes(data)))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}; use 0-4")


def decompress(codec: int, data: Bytes, *, max_size: int | None = None) -> bytes:
    """``data`` decompressed, never to more than ``max_size`` bytes (default: the process's
    :func:`~magnetar.core.formats.max_message_size`): no codec is let write past the bound, so
    a small hostile batch cannot make the server allocate much more than that.

    Raises CorruptRecordError when it does not decompress or would inflate beyond the bound;
    UnsupportedCompressionError for an unknown codec.
    """
    if codec == NONE:
        return bytes(data)
    if codec not in NAMES:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}; use 0-4")
    limit = formats.max_message_size() if max_size is None else max_size
    try:
        out = _decompress(codec, bytes(data), limit)
    except (cramjam.DecompressionError, zlib.error, struct.error, ValueError) as exc:
        raise CorruptRecordError(
            f"{NAMES[codec]} records do not decompress within {limit} bytes ({exc}); send "
            "smaller batches, or raise the server's max message size"
        ) from exc
    return out


def _decompress(codec: int, data: bytes, limit: int) -> bytes:
    if codec == GZIP:
        return _gunzip(data, limit)
    if codec == SNAPPY:
        if data.startswith(XERIAL_MAGIC):
            return _xerial_decompress(data, limit)
        return _snappy_raw(data, limit)
    # LZ4 frames and zstd frames need not state their size: decompress into a buffer one byte
    # larger than allowed (the pages of a fresh bytearray cost nothing until written), which
    # fails, unwritten beyond it, when the data would go further.
    out = bytearray(limit + 1)
    if codec == LZ4:
        written = cramjam.lz4.decompress_into(data, out)
    else:
        written = cramjam.zstd.decompress_into(data, out)
    if written > limit:
        raise ValueError(f"inflates beyond {limit} bytes")
    return bytes(memoryview(out)[:written])


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise ValueError(f"inflates beyond {limit} bytes")
    if not d.eof:
        raise ValueError("gzip stream is truncated")
    return out


def _snappy_raw(block: bytes, limit: int) -> bytes:
    """One raw snappy block; its header states its length, checked before allocating."""
    size = int(cramjam.snappy.decompress_raw_len(block))
    if size > limit:
        raise ValueError(f"snappy block says {size} bytes, beyond {limit}")
    out = bytearray(size)
    written = cramjam.snappy.decompress_raw_into(block, out)
    return bytes(out) if written == size else bytes(memoryview(out)[:written])


def _xerial_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        parts += (_U32.pack(len(block)), block)
    return b"".join(parts)


def _xerial_decompress(data: bytes, max_size: int) -> bytes:
    pos, parts, total = len(_XERIAL_HEADER), [], 0
    while pos < len(data):
        (size,) = _U32.unpack_from(data, pos)
        pos += 4
        if pos + size > len(data):
            raise ValueError("xerial snappy block overruns the data")
        block = _snappy_raw(data[pos : pos + size], max_size - total)
        total += len(block)
        if total > max_size:
            raise ValueError(f"inflates beyond {max_size} bytes")
        parts.append(block)
        pos += size
    return b"".join(parts)
