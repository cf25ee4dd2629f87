"""Errors of the Pulsar wire codec.

All derive from :class:`ProtocolError`. None is retriable: the same bytes fail the same way.
What the connection should do differs, and each class says so.
"""

from __future__ import annotations

from magnetar.core.errors import MagnetarError
from magnetar.protocols.pulsar._proto.pulsar_api_pb2 import BaseCommand


class ProtocolError(MagnetarError):
    """The peer sent bytes that do not follow the Pulsar binary protocol."""

    code = "pulsar.protocol"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


class FrameTooLargeError(ProtocolError):
    """A frame announced more bytes than the connection accepts.

    Raised as soon as the 4-byte length is seen, before the frame is buffered. The stream
    cannot be resynchronised without reading the frame, so close the connection.
    """

    code = "pulsar.frame_too_large"

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(
            f"frame of {size} bytes exceeds the limit of {max_size} bytes; "
            "send smaller messages or batches, or raise the broker's max frame size"
        )
        self.size = size
        self.max_size = max_size


class MalformedFrameError(ProtocolError):
    """A frame of valid length whose contents cannot be decoded.

    The decoder has consumed the frame, so decoding could go on, but a peer that sends garbage
    is usually best disconnected. ``command`` is the decoded command when only the part after
    it (metadata, magic numbers) was bad, else None.
    """

    code = "pulsar.malformed_frame"

    def __init__(self, message: str, command: BaseCommand | None = None) -> None:
        super().__init__(message)
        self.command = command


class MessageRefusedError(ProtocolError):
    """A well-formed SEND whose message cannot be stored as sent (a timestamp beyond what the
    log can hold, say). Answered with SEND_ERROR ServerError.ChecksumError: the one error on
    which the C++ client fails that message alone and keeps the producer (any other error
    makes it reconnect and resend the same message forever)."""

    code = "pulsar.message_refused"
    pulsar_error = "ChecksumError"  # fails that message alone (see above)
    kafka_error = "INVALID_RECORD"


class ChecksumError(ProtocolError):
    """The CRC32C of a SEND or MESSAGE frame does not match its metadata and payload.

    The frame is consumed and the stream stays in sync. ``command`` is the decoded command, so a
    broker can answer SEND_ERROR (ServerError.ChecksumError) for the right producer and
    sequence id and keep the connection.
    """

    code = "pulsar.checksum"

    def __init__(self, command: BaseCommand, expected: int, actual: int) -> None:
        super().__init__(
            f"checksum mismatch on {command_name(command)}: frame says {expected:#010x}, "
            f"metadata and payload hash to {actual:#010x}; the message was corrupted in transit"
        )
        self.command = command
        self.expected = expected
        self.actual = actual


class BatchFormatError(ProtocolError):
    """A batch payload does not split into the announced messages."""

    code = "pulsar.batch_format"


class CompressionError(ProtocolError):
    """A payload does not decompress with its codec, or not to its announced size."""

    code = "pulsar.compression"


class UnsupportedCompressionError(CompressionError):
    """The metadata names a compression codec that Magnetar does not know."""

    code = "pulsar.compression_unsupported"

    def __init__(self, codec: int) -> None:
        super().__init__(f"unknown compression codec {codec}; use NONE, LZ4, ZLIB, ZSTD or SNAPPY")
        self.codec = codec


def command_name(command: BaseCommand) -> str:
    """The command's type name (``SEND``), or its number when unknown."""
    try:
        return BaseCommand.Type.Name(command.type)
    except ValueError:
        return str(command.type)
