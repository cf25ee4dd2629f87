"""A storage node's Arrow Flight endpoint: bulk reads of its ledgers, straight from its own
files, for the Spark source (seed 001's storage reader: history never goes through a broker).

A ticket is JSON ``{"ledger": id, "start": offset, "end": offset}``; the answer streams the
entries this node holds whose offsets fall in ``[start, end)``, in the Parquet layout of
:mod:`magnetar.tier.parquet`, rows outside the range cut. The planner only sends a node a
range it holds whole (a fragment of a ledger whose write quorum is its ensemble).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from magnetar.tier.parquet import SCHEMA, entries_to_table

if TYPE_CHECKING:
    from magnetar.cluster.node import StorageNode

CHUNK_ENTRIES = 2000


class NodeFlightServer(flight.FlightServerBase):
    def __init__(self, node: StorageNode, loop: asyncio.AbstractEventLoop, location: str) -> None:
        super().__init__(location)
        self.node = node
        self.loop = loop
        self.streams = 0  # do_get calls served
        self._thread = threading.Thread(target=self.serve, name="node-flight", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.GeneratorStream:
        try:
            request = json.loads(ticket.ticket)
            ledger_id, start, end = (
                int(request["ledger"]),
                int(request["start"]),
                int(request["end"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise flight.FlightServerError(f"bad ticket: {e}") from None
        ledger = self.node.ledger(ledger_id)
        if ledger is None:
            raise flight.FlightServerError(f"ledger {ledger_id} is not on {self.node.node_id}")
        self.streams += 1
        return flight.GeneratorStream(SCHEMA, self._batches(ledger_id, start, end))

    def _batches(self, ledger_id: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        ledger = self.node.ledger(ledger_id)
        assert ledger is not None
        eids = [eid for eid in ledger.ids if _overlaps(ledger.rows[eid], start, end)]
        for at in range(0, len(eids), CHUNK_ENTRIES):
            chunk = eids[at : at + CHUNK_ENTRIES]
            records = asyncio.run_coroutine_threadsafe(
                self.node.read_records(ledger_id, chunk), self.loop
            ).result()
            table = entries_to_table(r.entry(ledger_id) for r in records)
            offsets = table.column("offset")
            yield from table.filter(
                pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
            ).to_batches()

    def stop(self) -> None:
        self.shutdown()
        self._thread.join(timeout=10)


def _overlaps(row: tuple[int, int, int, int], start: int, end: int) -> bool:
    """Whether the entry of ``row`` (local offset, base offset, count, time) has an offset
    in ``[start, end)``."""
    _, base, count, _ = row
    return base < end and base + count > start
