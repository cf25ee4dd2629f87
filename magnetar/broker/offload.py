"""Offload policy: which closed segments go to the object store, and when local copies go.

Triggers, as in Pulsar: the namespace's ``offloadThreshold`` (bytes of local data a topic
may keep; 0 = offload every segment as soon as it closes; negative = off) and
``offloadThresholdInSeconds`` (offload segments older than this), and an explicit request
(admin ``PUT .../offload``). Offloads run in the background, one per topic at a time, and
never block produce or consume. A failed offload leaves the segment local and CLOSED; the
next sweep retries it. Local copies of offloaded segments are deleted after the
namespace's ``offloadDeletionLagMs``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field

from magnetar.broker.broker import Broker
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.schemas import RECORD_TYPES
from magnetar.broker.topic import Topic
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.errors import MagnetarError
from magnetar.ledger import SegmentState, ValueSchema
from magnetar.ledger import SegmentView as SegmentInfo
from magnetar.ledger.errors import SegmentNotOffloadableError
from magnetar.ledger.table_commits import unregistered

log = logging.getLogger(__name__)


@dataclass
class OffloadStatus:
    """Pulsar's OffloadProcessStatus: NOT_RUN, RUNNING, SUCCESS or ERROR."""

    status: str = "NOT_RUN"
    last_error: str = ""
    requested_before: int = -1  # an admin request still to satisfy (offset), or -1
    offloaded: int = 0  # segments offloaded by this node since start
    offloaded_bytes: int = 0  # their bytes (as stored locally), since start
    # segments due (by policy or request) and not offloaded yet: the offload lag
    queued: dict[int, SegmentInfo] = field(default_factory=dict)

    def lag(self, now_ms: int) -> tuple[int, float]:
        """Bytes due for offload and not offloaded yet, and the seconds the oldest of them
        has waited since its segment closed."""
        queued = list(self.queued.values())
        if not queued:
            return 0, 0.0
        oldest = min(s.closed_ms or s.created_ms for s in queued)
        return sum(s.size for s in queued), max(0.0, (now_ms - oldest) / 1000)


class OffloadService:
    def __init__(
        self,
        broker: Broker,
        *,
        interval: float,
        clock: Clock = SYSTEM_CLOCK,
        snapshot_max_age_ms: int = 3_600_000,
        min_snapshots: int = 10,
    ) -> None:
        self.broker = broker
        self.interval = interval
        # Iceberg table maintenance (namespace policy icebergMaintenance, on by default)
        self.snapshot_max_age_ms = snapshot_max_age_ms
        self.min_snapshots = min_snapshots
        self.clock = clock
        self.status: dict[str, OffloadStatus] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if not self.broker.ledgers.can_offload:
            return
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sweep()

    # -- requests -----------------------------------------------------------------------

    def request(self, topic: Topic, before: int) -> int:
        """Offload every closed segment wholly before offset ``before``, in the background;
        returns how many segments that starts (0 when all of them are offloaded already).

        Nothing is durable when this returns: the status says when it is done. Raises
        InvalidRequestError, changing nothing, when no closed segment lies before ``before``.
        """
        wanted = [s for s in topic.ledger.segments()[:-1] if s.end_offset <= before]
        if not wanted:
            raise InvalidRequestError(
                f"nothing to offload in {topic.name}: no closed segment lies before the given "
                "message. The open segment, which holds the latest messages, is never "
                "offloaded: wait for it to roll (segment size, entries or age) and retry"
            )
        due = [s for s in wanted if s.state is SegmentState.CLOSED and s.local]
        if due:
            status = self.status.setdefault(str(topic.name), OffloadStatus())
            status.requested_before = max(status.requested_before, before)
            self._start(topic, due)
        return len(due)

    def status_of(self, topic: Topic) -> OffloadStatus:
        return self.status.get(str(topic.name), OffloadStatus())

    # -- the sweep ------------------------------------------------------------------------

    async def sweep(self) -> None:
        """Start the offloads the policies ask for and drop local copies past their lag, on
        every loaded topic. A topic that fails (deleted meanwhile, say) is logged and skipped:
        it never stops the others. Magnetar's own errors (a metadata store between sessions,
        a partition released meanwhile) are expected and retried by the next sweep: one line
        each; anything else with its traceback."""
        for topic in list(self.broker.topics.values()):
            try:
                await self._sweep_topic(topic)
            except MagnetarError as e:
                log.warning("offload sweep of %s failed, retried next sweep: %s", topic.name, e)
            except Exception:
                log.exception("offload sweep of %s failed", topic.name)

    async def _sweep_topic(self, topic: Topic) -> None:
        due = await self._due(topic)
        if due:
            self._start(topic, due)
        await self._drop_local_copies(topic)
        await self._register_history(topic)
        await self._maintain_table(topic)

    async def _register_history(self, topic: Topic) -> None:
        """Backfill: one OFFLOADED segment whose rows are not in the topic's table yet
        (offloaded before the catalog was turned on) is registered per sweep, oldest first."""
        if not self.broker.ledgers.has_tables:
            return
        waiting = [s for s in topic.ledger.segments() if unregistered(s)]
        if waiting:
            await topic.ledger.register_in_table(
                waiting[0].segment_id, value_schema=await self._value_schema(topic)
            )

    async def _maintain_table(self, topic: Topic) -> None:
        """Compact the partition's small data files and expire old snapshots of the topic's
        table, unless its namespace turned maintenance off. Partitions share a table: the
        first partition expires its snapshots."""
        if not self.broker.ledgers.has_tables:
            return
        policies = await self.broker.policies(topic.name)
        if policies.iceberg_maintenance is False:
            return
        compacted = await topic.ledger.compact_table()
        if compacted:
            log.info("compacted %d data files of %s's Iceberg table", compacted, topic.name)
        if topic.name.partition > 0:
            return
        expired = await topic.ledger.expire_table_snapshots(
            max_age_ms=self.snapshot_max_age_ms, keep=self.min_snapshots
        )
        if expired:
            log.info("expired %d snapshots of %s's Iceberg table", expired, topic.name)

    async def _due(self, topic: Topic) -> list[SegmentInfo]:
        closed = self._closed_local(topic)
        if not closed:
            return []
        policies = await self.broker.policies(topic.name)
        status = self.status.get(str(topic.name))
        chosen = {
            s.segment_id for s in closed if status and s.end_offset <= status.requested_before
        }
        if policies.offload_threshold >= 0:
            # What still has to go: offloaded segments waiting for their lag do not count.
            segments = topic.ledger.segments()
            local = sum(
                s.size for s in segments if s.local and s.state is not SegmentState.OFFLOADED
            )
            for s in closed:
                if local <= policies.offload_threshold:
                    break
                chosen.add(s.segment_id)
                local -= s.size
        if policies.offload_threshold_in_seconds >= 0:
            horizon = self.clock.now_ms() - policies.offload_threshold_in_seconds * 1000
            chosen |= {s.segment_id for s in closed if s.max_publish_time <= horizon}
        return [s for s in closed if s.segment_id in chosen]

    @staticmethod
    def _closed_local(topic: Topic) -> list[SegmentInfo]:
        return [s for s in topic.ledger.segments() if s.state is SegmentState.CLOSED and s.local]

    def _start(self, topic: Topic, due: list[SegmentInfo]) -> None:
        key = str(topic.name)
        status = self.status.setdefault(key, OffloadStatus())
        status.queued.update((s.segment_id, s) for s in due)
        if key in self._running and not self._running[key].done():
            return
        status.status = "RUNNING"
        task = asyncio.get_running_loop().create_task(self._offload(topic, due))
        self._running[key] = task

    async def _offload(self, topic: Topic, due: list[SegmentInfo]) -> None:
        status = self.status.setdefault(str(topic.name), OffloadStatus())
        try:
            for seg in due:
                if await self._offload_one(topic, seg):
                    status.offloaded += 1
                    status.offloaded_bytes += seg.size
                status.queued.pop(seg.segment_id, None)
        except asyncio.CancelledError:  # the topic was unloaded, or the broker closes
            status.status, status.last_error = "ERROR", "cancelled: the topic left this broker"
            raise
        except Exception as e:
            status.status, status.last_error = "ERROR", f"{type(e).__name__}: {e}"
            log.warning("offload of %s failed (will retry): %s", topic.name, e)
            return
        status.status, status.last_error = "SUCCESS", ""
        if not [s for s in self._closed_local(topic) if s.end_offset <= status.requested_before]:
            status.requested_before = -1

    async def _offload_one(self, topic: Topic, seg: SegmentInfo) -> bool:
        """Offload ``seg``; False if it was no longer offloadable (trimmed by retention, or
        offloaded by an admin call meanwhile), which is no failure."""
        try:
            await topic.ledger.offload(seg.segment_id, value_schema=await self._value_schema(topic))
        except SegmentNotOffloadableError as e:
            log.info("skipping offload: %s", e)
            return False
        return True

    async def _value_schema(self, topic: Topic) -> ValueSchema | None:
        """The topic's schema versions, which type its Iceberg table's columns."""
        versions = await self.broker.schemas.versions(topic.name.base.path)
        if not versions:
            return None
        definitions = []
        for v in versions:
            try:
                definitions.append(json.loads(v.data) if v.type in RECORD_TYPES else None)
            except ValueError:
                definitions.append(None)
        return ValueSchema(versions[-1].type, tuple(definitions))

    async def _drop_local_copies(self, topic: Topic) -> None:
        policies = await self.broker.policies(topic.name)
        lag = policies.offload_deletion_lag_ms
        if lag is None:
            lag = self.broker.settings.offload_deletion_lag_ms
        now = self.clock.now_ms()
        for seg in topic.ledger.segments():
            offloaded = seg.state is SegmentState.OFFLOADED and seg.local and seg.offload
            if offloaded and now - int(seg.offload.get("offloadedMs", now)) >= lag:  # type: ignore[union-attr]
                await topic.ledger.drop_local_copy(seg.segment_id)

    async def aclose(self) -> None:
        """Stop sweeping and cancel running offloads; their segments go back to CLOSED."""
        tasks = [*self._running.values(), *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
