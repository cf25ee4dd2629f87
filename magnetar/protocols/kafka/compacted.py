"""Kafka consumers of a compacted topic read its compacted view below the horizon, as Kafka
consumers read a log its cleaner compacted (``cleanup.policy=compact``).

A topic whose compaction threshold is on (its own ``cleanup.policy=compact``, or its
namespace's ``compactionThreshold``) and that has a compacted view
(:mod:`magnetar.broker.compaction`) is fetched from the view below its horizon and from the
topic after it. Offsets are kept: each batch of the view is the original one without the
records compaction dropped, its base offset and last offset delta unchanged, so offsets have
gaps (Kafka clients expect them of compacted topics). The earliest offset is the view's
first retained one while it is older than the topic's own start (retention deleted the
originals, the view keeps the latest value of each key).
"""

from __future__ import annotations

import dataclasses

from magnetar.broker import Topic
from magnetar.broker.compaction import CompactedRecord, CompactedView
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.conversion import to_kafka_batch


def view_of(topic: Topic) -> CompactedView | None:
    """The compacted view Kafka consumers of ``topic`` read, if it is compacted."""
    compaction = topic.compaction
    if compaction is None or compaction.threshold <= 0:
        return None
    return compaction.view


def log_start(topic: Topic) -> int:
    """The first offset a Kafka consumer can fetch (the view's, when older)."""
    start = topic.start_offset
    view = view_of(topic)
    if view is not None and view.firsts:
        return min(start, view.firsts[0])
    return start


def batch_of(record: CompactedRecord) -> bytes | None:
    """The record batch of one entry of the view: the retained records at their original
    offsets; None when compaction dropped them all."""
    entry = record.entry
    batch = to_kafka_batch(entry)
    if not record.dropped:
        return batch
    dropped = set(record.dropped)
    kept = [
        dataclasses.replace(r, offset_delta=i)
        for i, r in enumerate(records.decode(batch))
        if i not in dropped
    ]
    if not kept:
        return None
    header = records.read_header(batch)
    return records.encode(
        kept,
        base_offset=entry.base_offset,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_offset_delta=entry.count - 1,
    )
