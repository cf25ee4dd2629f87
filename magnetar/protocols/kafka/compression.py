"""Record-batch compression codecs, as Kafka clients write them. Pure functions.

The codec id is the low three bits of a batch's attributes:

- 1 GZIP: a gzip stream (RFC 1952).
- 2 SNAPPY: Java, kafka-python and aiokafka write the *xerial* framing
  (``\\x82SNAPPY\\x00`` + version + compat, then ``[u32 length][raw snappy block]``...);
  librdkafka writes one raw snappy block. Both are read; :func:`compress` writes xerial,
  which every client reads.
- 3 LZ4: the LZ4 *frame* format (magic ``04 22 4D 18``).
- 4 ZSTD: one zstd frame.

Decompressed sizes are capped (``max_size``) so a hostile batch cannot exhaust memory.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from magnetar.protocols.kafka.errors import CorruptRecordError, UnsupportedCompressionError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_U32 = struct.Struct(">I")
DEFAULT_MAX_SIZE = 256 * 1024 * 1024

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


def decompress(codec: int, data: Bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """``data`` decompressed. Raises CorruptRecordError when it does not decompress or
    inflates beyond ``max_size``; UnsupportedCompressionError for an unknown codec."""
    if codec == NONE:
        return bytes(data)
    if codec not in NAMES:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}; use 0-4")
    try:
        out = _decompress(codec, bytes(data), max_size)
    except (cramjam.DecompressionError, zlib.error, struct.error, ValueError) as exc:
        raise CorruptRecordError(f"{NAMES[codec]} records do not decompress: {exc}") from exc
    if len(out) > max_size:
        raise CorruptRecordError(f"{NAMES[codec]} records inflate beyond {max_size} bytes")
    return out


def _decompress(codec: int, data: bytes, max_size: int) -> bytes:
    if codec == GZIP:
        d = zlib.decompressobj(wbits=31)
        out = d.decompress(data, max_size + 1)
        if not d.eof:
            raise ValueError("gzip stream is truncated")
        return out
    if codec == SNAPPY:
        if data.startswith(XERIAL_MAGIC):
            return _xerial_decompress(data, max_size)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    return bytes(cramjam.zstd.decompress(data))


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
        block = bytes(cramjam.snappy.decompress_raw(data[pos : pos + size]))
        total += len(block)
        if total > max_size:
            raise ValueError(f"inflates beyond {max_size} bytes")
        parts.append(block)
        pos += size
    return b"".join(parts)
