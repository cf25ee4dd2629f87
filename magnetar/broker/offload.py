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
import logging
import re
from dataclasses import dataclass

from magnetar.broker.broker import Broker
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.topic import Topic
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.storage import SegmentInfo, SegmentState

log = logging.getLogger(__name__)
_SEGMENT_KEY = re.compile(r"^(?P<partition>.+)/(?P<sid>\d{20})\.(parquet|manifest\.json)$")


@dataclass
class OffloadStatus:
    """Pulsar's OffloadProcessStatus: NOT_RUN, RUNNING, SUCCESS or ERROR."""

    status: str = "NOT_RUN"
    last_error: str = ""
    requested_before: int = -1  # an admin request still to satisfy (offset), or -1
    offloaded: int = 0  # segments offloaded by this node since start


class OffloadService:
    def __init__(self, broker: Broker, *, interval: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker = broker
        self.interval = interval
        self.clock = clock
        self.status: dict[str, OffloadStatus] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.broker.tier is None:
            return
        await self.cleanup_orphans()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("offload sweep failed")

    # -- requests -----------------------------------------------------------------------

    def request(self, topic: Topic, before: int) -> int:
        """Offload every closed segment wholly before offset ``before``; returns how many
        segments that is. InvalidRequestError when there is nothing to offload."""
        due = [s for s in self._closed_local(topic) if s.end_offset <= before]
        if not due:
            raise InvalidRequestError(
                f"nothing to offload in {topic.name}: no closed segment lies before the given "
                "message (the open segment is never offloaded; wait for it to roll)"
            )
        status = self.status.setdefault(str(topic.name), OffloadStatus())
        status.requested_before = max(status.requested_before, before)
        self._start(topic, due)
        return len(due)

    def status_of(self, topic: Topic) -> OffloadStatus:
        return self.status.get(str(topic.name), OffloadStatus())

    # -- the sweep ------------------------------------------------------------------------

    async def sweep(self) -> None:
        for topic in list(self.broker.topics.values()):
            due = await self._due(topic)
            if due:
                self._start(topic, due)
            await self._drop_local_copies(topic)

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
            local = sum(s.size for s in topic.ledger.segments() if s.local)
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
        if key in self._running and not self._running[key].done():
            return
        self.status.setdefault(key, OffloadStatus()).status = "RUNNING"
        task = asyncio.get_running_loop().create_task(self._offload(topic, due))
        self._running[key] = task

    async def _offload(self, topic: Topic, due: list[SegmentInfo]) -> None:
        status = self.status.setdefault(str(topic.name), OffloadStatus())
        try:
            for seg in due:
                await topic.ledger.offload(seg.segment_id)
                status.offloaded += 1
        except Exception as e:
            status.status, status.last_error = "ERROR", f"{type(e).__name__}: {e}"
            log.warning("offload of %s failed (will retry): %s", topic.name, e)
            return
        status.status, status.last_error = "SUCCESS", ""
        if not [s for s in self._closed_local(topic) if s.end_offset <= status.requested_before]:
            status.requested_before = -1

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

    async def cleanup_orphans(self) -> int:
        """Delete objects no segment record vouches for: half-written uploads, objects of
        offloads interrupted by a crash (their segments were reverted to CLOSED)."""
        tier = self.broker.tier
        assert tier is not None
        keys = await asyncio.to_thread(tier.store.list)
        removed = 0
        for key in keys:
            if not self._vouched(key):
                await asyncio.to_thread(tier.store.delete, key)
                removed += 1
        return removed

    def _vouched(self, key: str) -> bool:
        m = _SEGMENT_KEY.match(key)
        if m is None:
            return False  # temp files of interrupted uploads, stray objects
        partition, sid = m.group("partition"), int(m.group("sid"))
        storage = self.broker.storage
        if not storage.has_partition(partition):
            return False
        return any(
            s.segment_id == sid and s.state in (SegmentState.OFFLOADED, SegmentState.OFFLOADING)
            for s in storage.segments(partition)
        )

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
