"""Arrow Flight bulk reads (port 8815): ``do_get`` streams an offset range of one partition
as Arrow record batches in the Parquet layout of :mod:`magnetar.tier.parquet`.

This is the history path of seed 001 for segments still on the storage node: Spark
executors call it directly, never the per-message consumer protocol. A ticket is JSON:
``{"topic": "tenant/ns/topic[-partition-N]", "start": offset, "end": offset}``, and with
authorization on the ``"grant"`` the plan gave that partition (:mod:`magnetar.core.grants`).
Flight calls arrive on gRPC threads; storage is read on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from magnetar.broker import Broker, Topic
from magnetar.core.errors import MagnetarError
from magnetar.core.grants import GrantError, ReadGrants
from magnetar.core.names import TopicName
from magnetar.tier.parquet import SCHEMA, entries_to_table

CHUNK_ENTRIES = 2000


class BulkReadServer(flight.FlightServerBase):
    def __init__(
        self,
        broker: Broker,
        loop: asyncio.AbstractEventLoop,
        location: str,
        grants: ReadGrants | None = None,
    ) -> None:
        super().__init__(location)
        self.grants = grants  # with authorization on, a ticket needs a plan's read grant
        self.broker = broker
        self.loop = loop
        self._thread = threading.Thread(target=self.serve, name="magnetar-flight", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.GeneratorStream:
        try:
            request = json.loads(ticket.ticket)
            name = TopicName.parse(request["topic"])
            start, end = int(request["start"]), int(request["end"])
        except (ValueError, KeyError, TypeError) as e:
            raise flight.FlightServerError(f"bad ticket: {e}") from None
        if self.grants is not None:
            try:
                self.grants.check(str(request["topic"]), str(request.get("grant", "")))
            except GrantError as e:
                raise flight.FlightUnauthorizedError(str(e)) from None
        try:
            topic = self._call(self.broker.get_topic(name, create=False))
        except MagnetarError as e:
            raise flight.FlightServerError(str(e)) from None
        return flight.GeneratorStream(SCHEMA, self._batches(topic, start, end))

    def _batches(self, topic: Topic, start: int, end: int) -> Iterator[pa.RecordBatch]:
        offset = max(start, topic.start_offset)
        end = min(end, topic.end_offset)
        while offset < end:
            entries = self._call(topic.read(offset, max_entries=CHUNK_ENTRIES, max_bytes=32 << 20))
            if not entries:
                break
            table = entries_to_table(e for e in entries if e.base_offset < end)
            mask = pc.and_(
                pc.greater_equal(table.column("offset"), start),
                pc.less(table.column("offset"), end),
            )
            yield from table.filter(mask).to_batches()
            offset = entries[-1].next_offset

    def stop(self) -> None:
        self.shutdown()
        self._thread.join(timeout=10)
