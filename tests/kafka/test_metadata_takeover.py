"""Kafka Metadata while a partition's bundle changes hands (another broker died and this one
is taking it over): that partition is answered LEADER_NOT_AVAILABLE with no leader, so the
client asks again, and the other partitions keep their leaders. Before, the lookup's
NotOwnerError escaped the handler and the connection was closed, which made a consumer
group across two brokers lose its coordinator again and again after a broker was killed
(tests/cluster/test_brokers.py). The takeover is the injected fault: a stand-in ownership
whose lookup raises for one partition."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from magnetar.broker.ownership import NotOwnerError
from magnetar.core.names import TopicName
from magnetar.protocols.kafka.admin import topic_metadata
from magnetar.protocols.kafka.errors import ErrorCode


class _TakingOver:
    """Ownership of a cluster where partition 1's bundle is being taken over."""

    async def lookup(self, name: TopicName) -> tuple[Any, bool]:
        if str(name).endswith("-partition-1"):
            raise NotOwnerError(f"the bundle of {name} is being taken over; retry")
        return SimpleNamespace(kafka_node=7), False


class _Topics:
    async def partition_count(self, name: str, create: bool) -> int:
        return 3

    def topic_id(self, name: str) -> Any:
        return None

    def name(self, topic: str) -> TopicName:
        return TopicName.parse(topic)


async def _partitions(name: TopicName) -> int:
    return 3


def test_a_partition_being_taken_over_has_no_leader_yet_and_the_others_answer() -> None:
    svc = SimpleNamespace(
        topics=_Topics(),
        broker=SimpleNamespace(ownership=_TakingOver(), partitions=_partitions),
        settings=SimpleNamespace(node_id=0),
    )
    answer = asyncio.run(topic_metadata(svc, "orders", False))  # type: ignore[arg-type]
    assert answer["error_code"] == ErrorCode.NONE
    got = {p["partition_index"]: (p["error_code"], p["leader_id"]) for p in answer["partitions"]}
    assert got == {0: (0, 7), 1: (ErrorCode.LEADER_NOT_AVAILABLE, -1), 2: (0, 7)}
