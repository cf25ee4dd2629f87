"""Payload compression codecs, as the Pulsar clients use them.

A compressed payload (one message, or a whole batch) carries its codec in
``MessageMetadata.compression`` and its original length in ``uncompressed_size``:

- LZ4: one raw LZ4 *block*, no frame and no size prefix; the length comes from the metadata.
- ZLIB: a zlib stream (RFC 1950, with its 2-byte header and Adler-32 trailer).
- ZSTD: one zstd frame.
- SNAPPY: raw snappy (no framing format).

Every decompression is checked against ``uncompressed_size``, as the clients do.
"""

from __future__ import annotations

import zlib

import cramjam

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import CompressionError, UnsupportedCompressionError
from magnetar.protocols.pulsar.frames import BytesLike

NONE = pb.CompressionType.NONE
LZ4 = pb.CompressionType.LZ4
ZLIB = pb.CompressionType.ZLIB
ZSTD = pb.CompressionType.ZSTD
SNAPPY = pb.CompressionType.SNAPPY

CODECS = (NONE, LZ4, ZLIB, ZSTD, SNAPPY)


def compress(codec: int, data: BytesLike) -> bytes:
    """``data`` compressed with ``codec`` (a CompressionType value)."""
    if codec == NONE:
        return bytes(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise UnsupportedCompressionError(codec)


def decompress(
    codec: int, data: BytesLike, uncompressed_size: int, *, max_size: int | None = None
) -> bytes:
    """``data`` decompressed to exactly ``uncompressed_size`` bytes.

    Decompression never writes past ``uncompressed_size``, so a corrupt or hostile payload
    cannot inflate further; ``max_size`` also bounds ``uncompressed_size`` itself. Raises
    CompressionError when the data is corrupt or of another length, and
    UnsupportedCompressionError for an unknown codec.
    """
    if codec not in CODECS:
        raise UnsupportedCompressionError(codec)
    if max_size is not None and uncompressed_size > max_size:
        raise CompressionError(
            f"payload would decompress to {uncompressed_size} bytes, over the {max_size} allowed"
        )
    try:
        result = _decompress(codec, data, uncompressed_size)
    except (cramjam.DecompressionError, zlib.error) as exc:
        raise CompressionError(f"{_name(codec)} payload does not decompress: {exc}") from exc
    if len(result) != uncompressed_size:
        raise CompressionError(
            f"{_name(codec)} payload decompresses to {len(result)} bytes, "
            f"metadata says {uncompressed_size}"
        )
    return result


def decompress_payload(
    metadata: pb.MessageMetadata, data: BytesLike, *, max_size: int | None = None
) -> bytes:
    """The payload described by ``metadata``, uncompressed."""
    if metadata.compression == NONE:
        return bytes(data)
    size = metadata.uncompressed_size
    return decompress(metadata.compression, data, size, max_size=max_size)


def _decompress(codec: int, data: BytesLike, size: int) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == ZLIB:
        return _inflate(data, size)
    out = bytearray(size)
    if codec == LZ4:
        written = cramjam.lz4.decompress_block_into(data, out)
    elif codec == ZSTD:
        written = cramjam.zstd.decompress_into(data, out)
    else:
        written = cramjam.snappy.decompress_raw_into(data, out)
    return bytes(out) if written == size else bytes(out[:written])


def _inflate(data: BytesLike, size: int) -> bytes:
    decompressor = zlib.decompressobj()
    # At most one byte more than announced: enough to notice a longer stream, no more.
    result = decompressor.decompress(data, size + 1)
    if not decompressor.eof or decompressor.unused_data:
        raise CompressionError(f"ZLIB payload is truncated or does not end after {size} bytes")
    return result


def _name(codec: int) -> str:
    return pb.CompressionType.Name(codec)
