"""Retention and message TTL, enforced by a periodic sweep over loaded topics.

Message TTL (``messageTTL``): messages older than the TTL are acknowledged on behalf of
every durable subscription, so they stop counting as backlog.

Retention (``retention``): a closed segment whose every message has been acknowledged by
all durable subscriptions (or that has no subscriptions to wait for) is deleted once it is
older than the retention time or lies beyond the retention size, as in Pulsar; ``-1`` means
unlimited on that axis. Magnetar's default — a namespace that sets nothing — keeps every
event forever (seed 000: the ledger is the source of truth), unlike Pulsar's 0/0.
Only a prefix of the log is ever removed, and never the open segment.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from magnetar.broker.broker import Broker
from magnetar.broker.topic import Topic
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.ledger import SegmentState

log = logging.getLogger(__name__)
MiB = 1024 * 1024


class RetentionService:
    def __init__(self, broker: Broker, *, interval: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.broker = broker
        self.interval = interval
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("retention sweep failed")

    async def sweep(self) -> int:
        """Apply TTL and retention to every loaded topic now; returns segments deleted.

        A topic that fails is logged and skipped, so one bad topic never stops TTL and
        retention for all the others; the next sweep tries it again.
        """
        deleted = 0
        for topic in list(self.broker.topics.values()):
            try:
                deleted += await self._sweep_topic(topic)
            except Exception:
                log.exception("retention sweep of %s failed", topic.name)
        return deleted

    async def _sweep_topic(self, topic: Topic) -> int:
        # segments holding only deleted records (DeleteRecords) go whatever the policy
        deleted = len(await topic.ledger.trim_deleted())
        return deleted + await self._apply_policies(topic)

    async def _apply_policies(self, topic: Topic) -> int:
        policies = await self.broker.policies(topic.name)
        if policies.message_ttl_in_seconds:
            await self._expire(topic, policies.message_ttl_in_seconds)
        retention = await self.broker.retention(topic.name)
        minutes = int(retention.get("retentionTimeInMinutes", -1))
        size_mb = int(retention.get("retentionSizeInMB", -1))
        if minutes < 0 and size_mb < 0:
            return 0
        return await self._trim(topic, minutes, size_mb)

    async def _expire(self, topic: Topic, ttl_seconds: int) -> None:
        cutoff = await topic.ledger.find_offset(self.clock.now_ms() - ttl_seconds * 1000)
        for sub in topic.subscriptions.values():
            if sub.durable and cutoff > sub.cursor.mark_delete:
                sub.ack_cumulative(cutoff - 1)

    async def _trim(self, topic: Topic, minutes: int, size_mb: int) -> int:
        ledger = topic.ledger
        durable = [s for s in topic.subscriptions.values() if s.durable]
        consumed = min((s.cursor.mark_delete for s in durable), default=ledger.end_offset)
        # A prefix only, as the ledger trims: stop at the first segment still being read
        # by a subscription or being offloaded.
        candidates = list(
            itertools.takewhile(
                lambda s: s.end_offset <= consumed and s.state is not SegmentState.OFFLOADING,
                ledger.segments()[:-1],
            )
        )
        remaining = sum(s.size for s in candidates)
        now = self.clock.now_ms()
        keep_from = None
        for seg in candidates:
            expired = minutes >= 0 and now - seg.max_publish_time > minutes * 60_000
            too_big = size_mb >= 0 and remaining > size_mb * MiB
            if not (expired or too_big):
                break
            remaining -= seg.size
            keep_from = seg.end_offset
        if keep_from is None:
            return 0
        return len(await ledger.trim(keep_from))

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
