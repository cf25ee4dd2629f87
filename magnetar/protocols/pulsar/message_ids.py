"""Conversions between Magnetar's MessageId and the wire's MessageIdData.

The wire carries ledger and entry ids as uint64; Pulsar's sentinels are signed (earliest is
(-1, -1)), so they travel in two's complement: -1 arrives as 2**64 - 1.
"""

from __future__ import annotations

from magnetar.core.ids import MessageId
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def to_wire(message_id: MessageId) -> pb.MessageIdData:
    """The MessageIdData for ``message_id``; batch index and partition only when set (≥ 0)."""
    data = pb.MessageIdData(
        ledger_id=message_id.ledger_id % _U64, entry_id=message_id.entry_id % _U64
    )
    if message_id.batch_index >= 0:
        data.batch_index = message_id.batch_index
    if message_id.partition >= 0:
        data.partition = message_id.partition
    return data


def from_wire(data: pb.MessageIdData) -> MessageId:
    """The MessageId a client sent (ledger/entry read as signed 64-bit integers)."""
    return MessageId(
        ledger_id=_signed(data.ledger_id),
        entry_id=_signed(data.entry_id),
        batch_index=data.batch_index,
        partition=data.partition,
    )


def _signed(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value
