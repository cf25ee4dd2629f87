"""ListOffsets by maximum timestamp (KIP-734, ``timestamp = -3``, ListOffsets v7+).

Kafka answers the offset and timestamp of the record with the largest timestamp in the
partition (the first such record when several share it). The topic keeps each segment's
largest publish time, and a KAFKA entry's publish time is its batch's max timestamp, so the
record is found without a scan: the segment with the largest publish time, its first entry at
that time (the time index), then the first record in it carrying the entry's largest
timestamp. A message produced by a Pulsar client is ranked by its publish time (the broker's
clock), as the time index ranks it for a by-timestamp lookup; its Kafka timestamp is its event
time when it has one. Pure reads: nothing is written.
"""

from __future__ import annotations

from magnetar.broker import Topic
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.conversion import to_kafka_batch

MAX_TIMESTAMP = -3


async def max_timestamp_offset(topic: Topic) -> tuple[int, int]:
    """(timestamp, offset) of the record with the largest timestamp; (-1, -1) when the
    partition holds no record."""
    start = topic.start_offset
    segments = [s for s in topic.segments() if s.end_offset > start and not s.is_empty]
    if not segments or topic.end_offset <= start:
        return -1, -1
    newest = max(s.max_publish_time for s in segments)
    offset = await topic.find_offset(newest)
    entries = await topic.read(offset, max_entries=1)
    if not entries:
        return -1, -1
    entry = entries[0]
    best_ts, best_delta = -1, 0
    for r in records.decode(to_kafka_batch(entry)):
        if r.timestamp > best_ts:
            best_ts, best_delta = r.timestamp, r.offset_delta
    return best_ts, entry.base_offset + best_delta
