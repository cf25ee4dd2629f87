"""Framing of the Pulsar binary protocol: bytes in, frames out, and back. No I/O.

Wire layout, every integer big-endian::

    any command      [total u32][command_size u32][BaseCommand]
    SEND / MESSAGE   [total u32][command_size u32][BaseCommand]
                     [0x0e02][size u32][BrokerEntryMetadata]     optional (a broker's MESSAGE)
                     [0x0e01][crc32c u32]                        optional (absent before v6)
                     [metadata_size u32][MessageMetadata][data]  <- the checksummed span

``total`` counts every byte after itself. The CRC32C covers the checksummed span, which is
also what a broker stores for an entry: the producer's message or batch exactly as received
(:attr:`Payload.raw`), so dispatching it later needs no re-encoding.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import crc32c
from google.protobuf.message import DecodeError

from magnetar.core.values import value_class
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import (
    ChecksumError,
    FrameTooLargeError,
    MalformedFrameError,
    command_name,
)

BytesLike = bytes | bytearray | memoryview

PROTOCOL_VERSION = 20
"""The protocol version Magnetar speaks (that of pulsar-client 3.13 / C++ client 4.2.0)."""

MAGIC_CHECKSUM = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
"""Pulsar's default largest message (or batch); announced in CONNECTED."""

FRAME_PADDING = 10 * 1024
"""Room for the command and metadata around a message of the largest size."""

DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING
"""Largest ``total`` a :class:`FrameDecoder` accepts unless told otherwise."""

PAYLOAD_COMMANDS = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})
"""Command types followed by metadata and a payload."""

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_SIZES = struct.Struct(">II")
_MAGIC_AND_U32 = struct.Struct(">HI")

# A command's body field has the field number equal to its Type value (e.g. SEND = 6 → send).
_BODY_FIELDS = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"}


@value_class()
class Payload:
    """What follows the command in a SEND or MESSAGE frame.

    The views share one immutable buffer per frame; keep them as long as you like, or take
    ``bytes(...)`` of the parts you keep to let the rest of the frame go.
    """

    metadata: pb.MessageMetadata
    """The parsed MessageMetadata (one message, or a batch of ``num_messages_in_batch``)."""
    raw_metadata: memoryview
    """The MessageMetadata exactly as received."""
    data: memoryview
    """The message or batch bytes, still compressed with ``metadata.compression``."""
    raw: memoryview
    """``[metadata_size u32][MessageMetadata][data]`` as received: what the CRC32C covers."""
    checksum: int | None
    """The CRC32C the frame carried (verified), or None when the sender sent none."""
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None


@value_class()
class Frame:
    """One decoded frame: a command, and for SEND and MESSAGE its payload."""

    command: pb.BaseCommand
    payload: Payload | None = None

    @property
    def type(self) -> int:
        """The command type, a ``BaseCommand.Type`` value."""
        return self.command.type


# --- encoding -------------------------------------------------------------------------------


def encode_command(command: pb.BaseCommand) -> bytes:
    """A frame holding ``command`` alone. Raises EncodeError if a required field is unset."""
    body = command.SerializeToString()
    return _SIZES.pack(len(body) + 4, len(body)) + body


def pack_payload(metadata: pb.MessageMetadata, data: BytesLike) -> bytes:
    """The checksummed span ``[metadata_size][MessageMetadata][data]`` (see Payload.raw)."""
    raw_metadata = metadata.SerializeToString()
    return b"".join((_U32.pack(len(raw_metadata)), raw_metadata, data))


def encode_payload_command(
    command: pb.BaseCommand, metadata: pb.MessageMetadata, data: BytesLike
) -> bytes:
    """A SEND or MESSAGE frame carrying ``data`` described by ``metadata``, with its CRC32C."""
    return encode_raw_payload_command(command, pack_payload(metadata, data))


def encode_raw_payload_command(
    command: pb.BaseCommand, raw: BytesLike, *, checksum: int | None = None
) -> bytes:
    """A SEND or MESSAGE frame around an already packed span (``Payload.raw`` or stored bytes).

    ``checksum`` is the span's CRC32C when the caller has it stored; it is computed otherwise.
    """
    body = command.SerializeToString()
    crc = crc32c.crc32c(raw) if checksum is None else checksum
    total = 4 + len(body) + _MAGIC_AND_U32.size + len(raw)
    head = _SIZES.pack(total, len(body)) + body + _MAGIC_AND_U32.pack(MAGIC_CHECKSUM, crc)
    return head + raw


# --- decoding -------------------------------------------------------------------------------


def decode_frame(frame: BytesLike) -> Frame:
    """Decode one complete frame, its leading 4-byte ``total`` included.

    Raises MalformedFrameError or ChecksumError (see errors.py).
    """
    view = memoryview(frame)
    if len(view) < 8:
        raise MalformedFrameError(f"a frame needs at least 8 bytes, got {len(view)}")
    (total,) = _U32.unpack_from(view)
    if total != len(view) - 4:
        have = len(view) - 4
        raise MalformedFrameError(f"frame announces {total} bytes after its size, has {have}")
    return _decode_body(view[4:])


def parse_payload(raw: BytesLike, *, checksum: int | None = None) -> Payload:
    """Split a stored checksummed span (``Payload.raw``) into metadata and data.

    Verifies ``checksum`` when given. Raises MalformedFrameError when the span is not
    ``[metadata_size][MessageMetadata][data]``.
    """
    view = memoryview(raw)
    if checksum is not None:
        _verify(None, view, checksum)
    return _split_raw(None, view, checksum, None)


def _decode_body(body: memoryview) -> Frame:
    """Decode ``[command_size][BaseCommand][payload part]`` (a frame after its ``total``)."""
    if len(body) < 4:
        raise MalformedFrameError("frame too short for its command size")
    (command_size,) = _U32.unpack_from(body)
    end = 4 + command_size
    if end > len(body):
        raise MalformedFrameError(f"command of {command_size} bytes overruns its frame")
    command = _parse_command(body[4:end])
    rest = body[end:]
    if command.type not in PAYLOAD_COMMANDS:
        if rest:
            raise MalformedFrameError(
                f"{command_name(command)} frame has {len(rest)} unexpected bytes after it", command
            )
        return Frame(command)
    return Frame(command, _decode_payload(command, rest))


def _parse_command(data: memoryview) -> pb.BaseCommand:
    command = pb.BaseCommand()
    try:
        command.ParseFromString(data)
    except DecodeError as exc:
        raise MalformedFrameError(f"command does not parse: {exc}") from exc
    if not command.IsInitialized():
        missing = ", ".join(command.FindInitializationErrors())
        raise MalformedFrameError(f"command lacks required fields ({missing})")
    field = _BODY_FIELDS.get(command.type)
    if field is not None and not command.HasField(field):
        raise MalformedFrameError(f"{command_name(command)} command without its body", command)
    return command


def _decode_payload(command: pb.BaseCommand, rest: memoryview) -> Payload:
    broker_entry_metadata = None
    if _magic_at(rest) == MAGIC_BROKER_ENTRY_METADATA:
        broker_entry_metadata, rest = _take_broker_entry_metadata(command, rest)
    checksum = None
    if _magic_at(rest) == MAGIC_CHECKSUM:
        if len(rest) < _MAGIC_AND_U32.size:
            raise MalformedFrameError("checksum cut short", command)
        checksum = _MAGIC_AND_U32.unpack_from(rest)[1]
        rest = rest[_MAGIC_AND_U32.size :]
        _verify(command, rest, checksum)
    return _split_raw(command, rest, checksum, broker_entry_metadata)


def _magic_at(view: memoryview) -> int | None:
    return _U16.unpack_from(view)[0] if len(view) >= 2 else None


def _take_broker_entry_metadata(
    command: pb.BaseCommand, rest: memoryview
) -> tuple[pb.BrokerEntryMetadata, memoryview]:
    if len(rest) < _MAGIC_AND_U32.size:
        raise MalformedFrameError("broker entry metadata size cut short", command)
    size = _MAGIC_AND_U32.unpack_from(rest)[1]
    end = _MAGIC_AND_U32.size + size
    if end > len(rest):
        raise MalformedFrameError("broker entry metadata overruns its frame", command)
    metadata = pb.BrokerEntryMetadata()
    _parse_into(metadata, rest[_MAGIC_AND_U32.size : end], command, "broker entry metadata")
    return metadata, rest[end:]


def _verify(command: pb.BaseCommand | None, raw: memoryview, expected: int) -> None:
    actual = crc32c.crc32c(raw)
    if actual == expected:
        return
    if command is None:
        raise MalformedFrameError(f"stored payload fails its checksum {expected:#010x}")
    raise ChecksumError(command, expected, actual)


def _split_raw(
    command: pb.BaseCommand | None,
    raw: memoryview,
    checksum: int | None,
    broker_entry_metadata: pb.BrokerEntryMetadata | None,
) -> Payload:
    if len(raw) < 4:
        raise MalformedFrameError("payload lacks its metadata size", command)
    (size,) = _U32.unpack_from(raw)
    end = 4 + size
    if end > len(raw):
        raise MalformedFrameError(f"metadata of {size} bytes overruns its frame", command)
    metadata = pb.MessageMetadata()
    _parse_into(metadata, raw[4:end], command, "message metadata")
    return Payload(metadata, raw[4:end], raw[end:], raw, checksum, broker_entry_metadata)


def _parse_into(
    message: pb.MessageMetadata | pb.BrokerEntryMetadata,
    data: memoryview,
    command: pb.BaseCommand | None,
    what: str,
) -> None:
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise MalformedFrameError(f"{what} does not parse: {exc}", command) from exc
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise MalformedFrameError(f"{what} lacks required fields ({missing})", command)


# --- incremental decoding -------------------------------------------------------------------


class FrameDecoder:
    """Cuts a byte stream into frames: :meth:`feed` what the socket gave, take frames out.

    Errors and what they leave behind:

    - FrameTooLargeError, or a ``total`` too small to hold a command size (MalformedFrameError):
      raised as soon as the 4-byte size arrives; framing is lost, every later call raises the
      same error. Close the connection.
    - MalformedFrameError inside a frame of sane size, ChecksumError: the frame is consumed and
      the next call goes on with the following frame.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self._max_frame_size = max_frame_size
        self._broken: FrameTooLargeError | MalformedFrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buffer)

    def feed(self, data: BytesLike) -> None:
        """Append received bytes; raises at once if they announce an unacceptable frame."""
        self._raise_if_broken()
        self._buffer += data
        self._next_size()

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive."""
        size = self._next_size()
        if size is None or len(self._buffer) < 4 + size:
            return None
        with memoryview(self._buffer) as view:
            # One copy per frame: the frame's views then outlive the buffer's compaction.
            frame = bytes(view[4 : 4 + size])
        del self._buffer[: 4 + size]
        return _decode_body(memoryview(frame))

    def __iter__(self) -> Iterator[Frame]:
        """Every complete frame buffered now. An error ends the iteration; iterate again."""
        while (frame := self.next_frame()) is not None:
            yield frame

    def _next_size(self) -> int | None:
        self._raise_if_broken()
        if len(self._buffer) < 4:
            return None
        (size,) = _U32.unpack_from(self._buffer)
        if size > self._max_frame_size:
            self._broken = FrameTooLargeError(size, self._max_frame_size)
        elif size < 4:
            self._broken = MalformedFrameError(f"frame announces {size} bytes, fewer than 4")
        self._raise_if_broken()
        return size

    def _raise_if_broken(self) -> None:
        if self._broken is not None:
            raise self._broken.with_traceback(None)
