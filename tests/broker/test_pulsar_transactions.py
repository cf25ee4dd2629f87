"""Pulsar transactions are refused at once, as by a Pulsar broker whose transaction
coordinator is disabled. pulsar-client 3.13 (Python) has no transaction API
(``enable_transaction`` is not a Client argument), so the commands its C++ core sends go
over a raw connection: each gets a CommandError NotAllowedError naming the reason, not
silence until the client's operation timeout."""

from __future__ import annotations

import pytest

from magnetar.protocols.pulsar import transactions
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RawConnection

T = pb.BaseCommand.Type


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def transaction_command(kind: int, request_id: int, extra: bytes = b"") -> pb.BaseCommand:
    """A BaseCommand of ``kind`` whose body (field number ``kind``) holds ``request_id``
    (field 1) and ``extra`` fields, as the C++ client encodes it."""
    body = b"\x08" + _varint(request_id) + extra
    command = pb.BaseCommand(type=kind)
    command.MergeFromString(_varint(kind << 3 | 2) + _varint(len(body)) + body)
    return command


@pytest.mark.parametrize("kind", transactions.COMMANDS, ids=T.Name)
def test_request_id_is_read_from_the_unknown_body(kind: int) -> None:
    extra = b"\x10" + _varint(5) + b"\x22\x03abc"  # tc_id / txnid 5, a string field
    command = transaction_command(kind, 1 << 40, extra)
    assert transactions.request_id_of(command) == 1 << 40


def test_no_body_or_a_broken_one_has_no_request_id() -> None:
    assert transactions.request_id_of(pb.BaseCommand(type=T.NEW_TXN)) is None
    broken = pb.BaseCommand(type=T.NEW_TXN)
    broken.MergeFromString(_varint(T.NEW_TXN << 3 | 2) + b"\x00")  # empty body
    assert transactions.request_id_of(broken) is None


@pytest.mark.parametrize("kind", [T.TC_CLIENT_CONNECT_REQUEST, T.NEW_TXN, T.END_TXN], ids=T.Name)
async def test_transaction_commands_are_refused_at_once(
    standalone: StandaloneProcess, kind: int
) -> None:
    async with RawConnection.open(standalone.pulsar_port) as conn:
        reply = await conn.request_raw(transaction_command(kind, 42))
        assert reply.type == T.ERROR
        assert reply.error.request_id == 42
        assert reply.error.error == pb.ServerError.NotAllowedError
        assert "Transactions are not enabled" in reply.error.message
        ping = await conn.request(T.PING, ping=pb.CommandPing())
        assert ping.type == T.PONG  # the connection stays usable
