"""Pulsar transactions are not supported: each transaction command is answered at once with
the error Pulsar gives when its transaction coordinator is disabled (a CommandError,
NotAllowedError, "Transactions are not enabled."), so a client fails instead of waiting for
its operation timeout.

The protocol definition Magnetar compiles leaves the transaction command bodies out (their
types are enum values only), so a body arrives as an unknown field of BaseCommand whose field
number is the command's type; its ``request_id`` is field 1 in every one of them. Pure: bytes
in, numbers out.
"""

from __future__ import annotations

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb

T = pb.BaseCommand.Type
COMMANDS = (
    T.TC_CLIENT_CONNECT_REQUEST,
    T.NEW_TXN,
    T.ADD_PARTITION_TO_TXN,
    T.ADD_SUBSCRIPTION_TO_TXN,
    T.END_TXN,
    T.END_TXN_ON_PARTITION,
    T.END_TXN_ON_SUBSCRIPTION,
)
NOT_ENABLED = (
    "Transactions are not enabled. Magnetar does not support Pulsar transactions: "
    "create the client without enable_transaction, or use an idempotent producer "
    "(deduplication) instead"
)
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def request_id_of(command: pb.BaseCommand) -> int | None:
    """The ``request_id`` of a transaction command, or None when it carries none."""
    body = _field(command.SerializeToString(), command.type, _LENGTH)
    if not isinstance(body, bytes):
        return None
    value = _field(body, 1, _VARINT)
    return value if isinstance(value, int) else None


def _field(data: bytes, number: int, wire_type: int) -> int | bytes | None:
    """The last value of field ``number`` in the protobuf message ``data`` (None if absent
    or if the bytes are not a valid message)."""
    found: int | bytes | None = None
    pos = 0
    try:
        while pos < len(data):
            tag, pos = _varint(data, pos)
            kind = tag & 7
            value: int | bytes
            if kind == _VARINT:
                value, pos = _varint(data, pos)
            elif kind == _LENGTH:
                size, pos = _varint(data, pos)
                value, pos = data[pos : pos + size], pos + size
                if pos > len(data):
                    return None
            elif kind in (_FIXED64, _FIXED32):
                pos += 8 if kind == _FIXED64 else 4
                continue
            else:
                return None
            if tag >> 3 == number and kind == wire_type:
                found = value
    except IndexError:
        return None
    return found


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")
