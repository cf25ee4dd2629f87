"""OffsetForLeaderEpoch (API 23, v2-4): where a leader epoch ends, for KIP-320's check that
a consumer's position was not truncated away.

A Magnetar partition has one leader epoch, 0, for its whole life (ownership moves between
brokers never rewrite the log, and Metadata reports no epoch): a requested epoch <= 0 ends
at the partition's end offset (epoch 0 is the current one); a higher epoch is unknown, -1/-1
(Kafka's UNDEFINED). A current leader epoch above 0 in the request is UNKNOWN_LEADER_EPOCH.
A partition this broker does not own is NOT_LEADER_OR_FOLLOWER, an unknown one
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from magnetar.core.errors import MagnetarError
from magnetar.protocols.kafka.errors import ErrorCode, error_code_of
from magnetar.protocols.kafka.service import Service, Session
from magnetar.protocols.kafka.wire import Request

EPOCH = 0  # the one leader epoch of every partition
UNKNOWN_LEADER_EPOCH = 75
Response = dict[str, Any]


async def offset_for_leader_epoch(svc: Service, session: Session, req: Request) -> Response:
    topics = []
    for t in req.body.topics:
        parts = [await _epoch_end(svc, t.topic, p) for p in t.partitions]
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


async def _epoch_end(svc: Service, topic: str, p: Any) -> Response:
    answer = {"partition": p.partition, "error_code": ErrorCode.NONE, "leader_epoch": -1,
              "end_offset": -1}  # fmt: skip
    try:
        found = await svc.topics.partition(topic, p.partition)
    except MagnetarError as e:
        return {**answer, "error_code": error_code_of(e)}
    if p.current_leader_epoch > EPOCH:
        return {**answer, "error_code": UNKNOWN_LEADER_EPOCH}
    if p.leader_epoch <= EPOCH:
        return {**answer, "leader_epoch": EPOCH, "end_offset": found.end_offset}
    return answer
