"""The storage-node protocol: length-prefixed binary frames over TCP (docs/cluster-protocol.md).

A request is ``[u32 length][u8 op][u32 request id][body]``; its answer carries the same op
and id, then a status byte and the op's answer body. Requests on one connection may be
answered out of order (a node answers an add when it is on disk, a read when it is read).

A replicated entry travels and is stored as a *record*
(:class:`~magnetar.storage.ledger_records.Record`): its ledger entry id, its offsets and
times, and the producer's payload.
"""

from __future__ import annotations

import asyncio
import enum
import struct

from magnetar.storage.ledger_records import Record

FRAME = struct.Struct(">IBI")  # length (of op + id + body), op, request id
INDEX_ROW = struct.Struct(">QQIq")  # entry id, base offset, count, publish time
LEDGER = struct.Struct(">Q")
ADD = struct.Struct(">QqB")  # ledger, lac, flags
READ = struct.Struct(">QQQI")  # ledger, first entry, last entry, max bytes
LAC = struct.Struct(">qq")  # last add confirmed, last entry stored (-1: none)
MAX_FRAME = 64 << 20

FLAG_RECOVERY = 1  # an add by a recoverer: allowed on a fenced ledger


class Op(enum.IntEnum):
    ADD = 1
    READ = 2
    FENCE = 3  # BookKeeper's fencing read: no add of the ledger is accepted afterwards
    LAC = 4
    INDEX = 5  # (entry id, base offset, count, publish time) of every entry held
    DELETE = 6
    PING = 7
    CHECK = 8  # verify every entry of a ledger held here: JSON {entries, damaged, problem}


class Status(enum.IntEnum):
    OK = 0
    NO_ENTRY = 1
    FENCED = 2
    READ_ONLY = 3
    NO_LEDGER = 4
    ERROR = 5
    # a stored copy fails its checksum or structure: the answer is DAMAGED (see below),
    # the reader takes the records before the damage and the rest from another replica
    DAMAGED = 6


def frame(op: int, request_id: int, body: bytes) -> bytes:
    return FRAME.pack(FRAME.size - 4 + len(body), op, request_id) + body


def pack_records(records: list[Record]) -> bytes:
    out = bytearray()
    for r in records:
        packed = r.pack()
        out += struct.pack(">I", len(packed)) + packed
    return bytes(out)


def unpack_records(data: bytes | memoryview) -> list[Record]:
    records, at = [], 0
    view = memoryview(data)
    while at < len(view):
        (size,) = struct.unpack_from(">I", view, at)
        records.append(Record.unpack(view[at + 4 : at + 4 + size]))
        at += 4 + size
    return records


def pack_damaged(problem: str, records: list[Record]) -> bytes:
    """A DAMAGED answer to a read: what is wrong, then the intact records before it."""
    text = problem.encode()
    return struct.pack(">I", len(text)) + text + pack_records(records)


def unpack_damaged(body: bytes) -> tuple[str, list[Record]]:
    (size,) = struct.unpack_from(">I", body)
    return body[4 : 4 + size].decode(errors="replace"), unpack_records(body[4 + size :])


class FrameError(ValueError):
    """A frame that breaks the protocol: the connection is closed."""


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """The next frame's (op, request id, body) from an asyncio StreamReader."""
    head = await reader.readexactly(FRAME.size)
    length, op, rid = FRAME.unpack(head)
    if not FRAME.size - 4 <= length <= MAX_FRAME:
        raise FrameError(f"frame length {length} outside 5..{MAX_FRAME}")
    body = await reader.readexactly(length - (FRAME.size - 4))
    return op, rid, body
