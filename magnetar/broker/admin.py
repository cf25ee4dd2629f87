"""Administrative operations on topics and subscriptions, in Pulsar's shapes.

The HTTP admin API is a thin layer over this module: every refusal is a BrokerError whose
class maps to an HTTP status (404 not found, 409 exists / not empty, 412 precondition).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker import policies as paths
from magnetar.broker.broker import Broker
from magnetar.broker.errors import (
    AlreadyExistsError,
    InvalidRequestError,
    NotEmptyError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from magnetar.broker.subscription import Subscription, SubType
from magnetar.broker.topic import Topic
from magnetar.core.ids import MessageId
from magnetar.core.names import TopicName


class PreconditionFailedError(NotEmptyError):
    """The resource is in use (connected producers or consumers); use force to override."""

    code = "broker.precondition_failed"
    http_status = 412


@dataclass
class _RateSample:
    at: float = field(default_factory=time.monotonic)
    msgs_in: int = 0
    bytes_in: int = 0
    msgs_out: int = 0


def position(topic: Topic, offset: int) -> str:
    """Pulsar's ``ledger:entry`` text for the entry holding ``offset``."""
    firsts = topic.ledger.segment_first_offsets()
    best = None
    for sid, first in sorted(firsts.items()):
        if first <= offset:
            best = (sid, offset - first)
    return f"{best[0]}:{best[1]}" if best else "-1:-1"


def backlog_bytes(topic: Topic, start: int) -> int:
    """Bytes of the entries from offset ``start`` (a mark-delete position) to the end.

    Estimated as Pulsar estimates a cursor's backlog size: entry sizes as stored (headers
    included), whole segments after ``start``, and the share of the segment holding it in
    proportion to its messages; messages acknowledged individually beyond ``start`` still
    count. Offloaded segments count; segments retention deleted do not.
    """
    total = 0
    for seg in topic.ledger.segments():
        if seg.state.value == "DELETED" or seg.end_offset <= start:
            continue
        if seg.first_offset >= start:
            total += seg.size
        else:  # the segment holding ``start``
            total += seg.size * (seg.end_offset - start) // (seg.end_offset - seg.first_offset)
    return total


class TopicAdmin:
    """Topic and subscription administration for one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._samples: dict[str, _RateSample] = {}

    # -- topics -------------------------------------------------------------------------

    async def create(self, name: TopicName) -> None:
        """Create a non-partitioned topic (409 if it, or a partitioned one, exists)."""
        await self.broker.policies(name)
        if await self.broker.topic_exists(name) or await self.broker.partitions(name):
            raise AlreadyExistsError(f"topic {name} already exists")
        await self.broker.get_topic(name, create=True)

    async def require(self, name: TopicName) -> Topic:
        """The loaded topic, or TopicNotFoundError if it was never created."""
        await self.broker.policies(name)
        if not await self.broker.topic_exists(name):
            raise TopicNotFoundError(f"topic {name} does not exist")
        return await self.broker.get_topic(name, create=False)

    async def delete(self, name: TopicName, *, force: bool = False) -> None:
        """Delete a topic and all its data; refused while clients are connected (412)."""
        topic = await self.require(name)
        connected = len(topic.producers) + sum(
            len(s.consumers) for s in topic.subscriptions.values()
        )
        if connected and not force:
            raise PreconditionFailedError(
                f"topic {name} has {connected} connected producer(s)/consumer(s); "
                "close them or pass force=true"
            )
        await self.broker.delete_topic(topic)

    async def grow_partitions(self, name: TopicName, partitions: int) -> None:
        current = await self.broker.partitions(name)
        if current == 0:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        if partitions <= current:
            raise InvalidRequestError(
                f"topic {name} has {current} partitions; the new count must be larger"
            )
        await self.broker.set_partitions(name, partitions)

    async def delete_partitioned(self, name: TopicName, *, force: bool = False) -> None:
        n = await self.broker.partitions(name)
        if n == 0:
            raise TopicNotFoundError(f"partitioned topic {name} does not exist")
        for i in range(n):
            part = name.partition_name(i)
            if await self.broker.topic_exists(part):
                await self.delete(part, force=force)
        await self.broker.meta.delete(
            paths.partitioned_path(name.tenant, name.namespace, name.local)
        )

    # -- stats --------------------------------------------------------------------------

    async def stats(self, name: TopicName) -> dict[str, Any]:
        topic = await self.require(name)
        storage_size = sum(s.size for s in topic.ledger.segments())
        msgs_in = topic.ledger.end_offset
        delivered = sum(c.delivered for s in topic.subscriptions.values() for c in s.consumers)
        now = _RateSample(msgs_in=msgs_in, bytes_in=storage_size, msgs_out=delivered)
        before = self._samples.get(str(name), now)
        self._samples[str(name)] = now
        span = max(now.at - before.at, 1e-9)

        def rate(a: int, b: int) -> float:
            return max(0.0, (a - b) / span) if before is not now else 0.0

        return {
            "msgRateIn": rate(now.msgs_in, before.msgs_in),
            "msgThroughputIn": rate(now.bytes_in, before.bytes_in),
            "msgRateOut": rate(now.msgs_out, before.msgs_out),
            "msgInCounter": msgs_in,
            "storageSize": storage_size,
            # Bytes, as Pulsar reports it: the backlog of the slowest subscription.
            "backlogSize": max(
                (backlog_bytes(topic, s.cursor.mark_delete) for s in topic.subscriptions.values()),
                default=0,
            ),
            "publishers": [
                {
                    "producerName": p.name,
                    "accessMode": p.access_mode.name.title().replace("_", ""),
                    "msgCount": p.published,
                }
                for p in topic.producers
            ],
            "subscriptions": {n: self._sub_stats(topic, s) for n, s in topic.subscriptions.items()},
            "deduplicationStatus": "Enabled" if topic.dedup else "Disabled",
        }

    @staticmethod
    def _sub_stats(topic: Topic, sub: Subscription) -> dict[str, Any]:
        return {
            "type": _type_name(sub.type),
            "msgBacklog": sub.backlog,  # messages
            "backlogSize": backlog_bytes(topic, sub.cursor.mark_delete),  # bytes
            "isDurable": sub.durable,
            # Magnetar's own: messages retention deleted before this subscription read them.
            "msgSkippedByRetention": sub.skipped_by_retention,
            "unackedMessages": sub.unacked,
            "blockedSubscriptionOnUnackedMsgs": sub.blocked_on_unacked,
            # Magnetar's own: where dispatch waits at damaged data ("ledger:entry", else
            # None), and the messages skipped as damaged (auto_skip_non_recoverable_data)
            "blockedAtDamagedPosition": (
                None if sub.damage.blocked_at is None else position(topic, sub.damage.blocked_at)
            ),
            "msgSkippedAsDamaged": sub.damage.skipped,
            "consumers": [
                {
                    "consumerName": c.name,
                    "availablePermits": c.permits,
                    "unackedMessages": c.unacked,
                    "blockedConsumerOnUnackedMsgs": c.blocked_on_unacked,
                    "priorityLevel": c.priority,
                }
                for c in sub.consumers
            ],
        }

    async def internal_stats(self, name: TopicName) -> dict[str, Any]:
        topic = await self.require(name)
        segments = topic.ledger.segments()
        end = topic.ledger.end_offset
        damaged = topic.ledger.damaged()
        return {
            "entriesAddedCounter": end,
            "numberOfEntries": end - topic.ledger.start_offset,
            "totalSize": sum(s.size for s in segments),
            "currentLedgerEntries": segments[-1].entries if segments else 0,
            "currentLedgerSize": segments[-1].size if segments else 0,
            "lastConfirmedEntry": position(topic, end - 1) if end else "-1:-1",
            "state": "LedgerOpened",
            "ledgers": [
                {
                    "ledgerId": s.segment_id,
                    "entries": s.entries,
                    "size": s.size,
                    "firstOffset": s.first_offset,
                    "lastOffset": s.last_offset,
                    "firstPublishTime": s.first_publish_time if s.entries else None,
                    "maxPublishTime": s.max_publish_time if s.entries else None,
                    "timestamp": s.closed_ms or s.created_ms,
                    "state": s.state.value,
                    "offloaded": s.state.value == "OFFLOADED",
                    "local": s.local,
                    "location": _location(s.local, s.offload),
                    # Magnetar's own: what a read or check found wrong with it ("" if nothing)
                    "damaged": damaged.get(s.segment_id, ""),
                }
                for s in segments
            ],
            "damagedLedgers": sorted(damaged),
            "compactedLedger": _compacted_ledger(topic),
            "cursors": {
                n: {
                    "markDeletePosition": position(topic, s.cursor.mark_delete - 1),
                    "markDeleteOffset": s.cursor.mark_delete,
                    "readPosition": position(topic, s.read_position),
                    "individuallyDeletedMessages": str(s.cursor.ranges),
                    "durable": s.durable,
                }
                for n, s in topic.subscriptions.items()
            },
        }

    async def check(self, name: TopicName, *, repair: bool = False) -> dict[str, Any]:
        """Read and verify every stored entry of the topic (``magnetar admin topics check``):
        ``ok``, and one row per segment with the error found in it, if any. ``repair``:
        damaged replicas of a cluster's closed ledgers are written again from good ones
        first, and the rows tell what is left."""
        topic = await self.require(name)
        rows = await topic.ledger.check(repair=repair)
        return {"topic": str(name), "ok": not any(r["error"] for r in rows), "ledgers": rows}

    async def last_message_id(self, name: TopicName) -> dict[str, Any]:
        topic = await self.require(name)
        ledger = topic.ledger
        entry = await topic.last_dispatchable()
        if entry is None:
            return {
                "ledgerId": ledger.segments()[-1].segment_id,
                "entryId": -1,
                "partitionIndex": -1,
            }
        mid = ledger.message_id(entry)
        body: dict[str, Any] = {"ledgerId": mid.ledger_id, "entryId": mid.entry_id}
        body["partitionIndex"] = name.partition
        if entry.count > 1:
            body["batchIndex"] = entry.count - 1
        return body

    # -- subscriptions ------------------------------------------------------------------

    async def subscription(self, name: TopicName, sub: str) -> tuple[Topic, Subscription]:
        topic = await self.require(name)
        found = topic.subscriptions.get(sub)
        if found is None:
            raise SubscriptionNotFoundError(f"subscription {sub!r} of {name} does not exist")
        return topic, found

    async def create_subscription(self, name: TopicName, sub: str, at: MessageId) -> None:
        topic = await self.require(name)
        if sub in topic.subscriptions:
            raise AlreadyExistsError(f"subscription {sub!r} of {name} already exists")
        start = self.offset_for(topic, at)
        await topic.subscription(sub, SubType.EXCLUSIVE, durable=True, start=start)

    @staticmethod
    def offset_for(topic: Topic, at: MessageId) -> int:
        if at.is_latest:
            return topic.ledger.end_offset
        if at.is_earliest or at.ledger_id < 0:
            return topic.ledger.start_offset
        return topic.ledger.offset_of(at)

    async def delete_subscription(self, name: TopicName, sub: str, *, force: bool = False) -> None:
        topic, found = await self.subscription(name, sub)
        if found.consumers and not force:
            raise PreconditionFailedError(
                f"subscription {sub!r} has {len(found.consumers)} connected consumer(s); "
                "close them or pass force=true"
            )
        found.disconnect_all()
        await topic.unsubscribe(sub)

    async def skip(self, name: TopicName, sub: str, count: int) -> None:
        """Acknowledge the first ``count`` unacknowledged messages; durable on return."""
        if count < 0:
            raise InvalidRequestError(f"cannot skip a negative number of messages ({count})")
        _, found = await self.subscription(name, sub)
        offsets: list[int] = []
        offset, end = found.cursor.mark_delete, found.ledger.end_offset
        while len(offsets) < count:
            offset = found.cursor.first_unacked(offset)
            if offset >= end:
                break
            offsets.append(offset)
            offset += 1
        # Through the subscription, not the bare cursor: deliveries pending on connected
        # consumers are settled too, so stats stop counting them as unacknowledged.
        found.ack({o: [o] for o in offsets})
        await self._persist(found)

    async def skip_all(self, name: TopicName, sub: str) -> None:
        _, found = await self.subscription(name, sub)
        found.ack_cumulative(found.ledger.end_offset - 1)
        await self._persist(found)

    async def reset_cursor(self, name: TopicName, sub: str, timestamp: int) -> int:
        _, found = await self.subscription(name, sub)
        offset = await found.ledger.find_offset(timestamp)
        await found.reset(offset)
        return offset

    @staticmethod
    async def _persist(sub: Subscription) -> None:
        if sub.store is not None:
            await sub.store.flush()
        sub.kick()


def _location(local: bool, offload: dict[str, Any] | None) -> str:
    """Where a segment's bytes can be read: local files, the object store, or both."""
    key = (offload or {}).get("key")  # none: only abandoned offload attempts are recorded
    remote = f"{(offload or {}).get('store', '')}/{key}" if key else ""
    if local and remote:
        return f"local+{remote}"
    return "local" if local else remote


def _type_name(sub_type: SubType) -> str:
    return {"KEY_SHARED": "Key_Shared"}.get(sub_type.name, sub_type.name.title())


def _compacted_ledger(topic: Topic) -> dict[str, Any]:
    """Pulsar's compactedLedger of internal stats; ledgerId -1 before any compaction.
    Magnetar's own: the ledger's name and the horizon (offsets below it are compacted)."""
    view = topic.compaction.view if topic.compaction is not None else None
    if view is None:
        return {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False}
    segments = view.ledger.segments()
    return {
        "ledgerId": next(
            (s.segment_id for s in reversed(segments) if not s.is_empty),
            segments[-1].segment_id if segments else -1,
        ),
        "entries": view.ledger.end_offset - view.ledger.start_offset,
        "size": sum(s.size for s in segments),
        "offloaded": False,
        "name": view.ledger.name,
        "horizon": view.horizon,
    }
