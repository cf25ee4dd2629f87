"""Payload compression codecs, as the Pulsar clients use them.

A compressed payload (one message, or a whole batch) carries its codec in
``MessageMetadata.compression`` and its original length in ``uncompressed_size``:

- LZ4: one raw LZ4 *block*, no frame and no size prefix; the length comes from the metadata.
- ZLIB: a zlib stream (RFC 1950, with its 2-byte header and Adler-32 trailer).
- ZSTD: one zstd frame.
- SNAPPY: raw snappy (no framing format).

Every decompression is checked against ``uncompressed_size``, as the clients do, and bounded:
a payload claiming more than the max message size is refused before anything is allocated
(the C++ client's consumer discards such a message too, as ``UncompressedSizeCorruption``:
"Uncompressed size is itself corrupted since it cannot be bigger than the MaxMessageSize"),
and no codec may write past the size claimed.
"""

from __future__ import annotations

import zlib

import cramjam

from magnetar.core import formats
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import (
    CompressionError,
    MessageRefusedError,
    UnsupportedCompressionError,
)
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
    cannot inflate further; ``max_size`` (default: the process's
    :func:`~magnetar.core.formats.max_message_size`) bounds ``uncompressed_size`` itself, checked
    before allocating. Raises CompressionError when the data is corrupt, of another length or
    too large, and UnsupportedCompressionError for an unknown codec.
    """
    if codec not in CODECS:
        raise UnsupportedCompressionError(codec)
    limit = formats.max_message_size() if max_size is None else max_size
    if uncompressed_size > limit:
        raise CompressionError(
            f"payload claims to decompress to {uncompressed_size} bytes, over the {limit} "
            "allowed; send smaller messages or batches, or raise the server's max message size"
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
    """The payload described by ``metadata``, uncompressed (bounded as :func:`decompress`)."""
    if metadata.compression == NONE:
        return bytes(data)
    size = metadata.uncompressed_size
    return decompress(metadata.compression, data, size, max_size=max_size)


def check_payload(metadata: pb.MessageMetadata, data: BytesLike, *, max_size: int) -> None:
    """Refuse, at publish, a compressed payload that does not decompress to its claimed size
    within ``max_size``: stored, it would fail (or, unbounded, exhaust memory) on every read.
    Raises MessageRefusedError, which the producer gets as SEND_ERROR ChecksumError and which
    fails that message alone. Pulsar's own broker answers a corrupt message with ChecksumError
    ("Checksum failed on the broker", Producer.checkAndStartPublish) and invalid metadata with
    MetadataError; the C++ client treats any error but ChecksumError as a broken connection and
    resends the message forever, so a payload that cannot be stored is answered as corrupt.

    An encrypted payload (``encryption_keys``) is compressed before it is encrypted: only its
    consumers can decompress it, so it is stored as sent, as Pulsar's broker does."""
    if metadata.compression == NONE or metadata.encryption_keys:
        return
    try:
        decompress_payload(metadata, data, max_size=max_size)
    except CompressionError as exc:
        raise MessageRefusedError(f"message refused: {exc}") from exc


def _decompress(codec: int, data: BytesLike, size: int) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == ZLIB:
        return _inflate(data, size)
    if codec == SNAPPY and cramjam.snappy.decompress_raw_len(data) != size:
        claimed = cramjam.snappy.decompress_raw_len(data)
        raise CompressionError(f"SNAPPY payload says {claimed} bytes, metadata says {size}")
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
