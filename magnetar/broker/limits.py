"""Bounds on what one topic and one namespace may hold: Pulsar's
``maxNumPartitionsPerPartitionedTopic`` and ``maxTopicsPerNamespace``.

Without them one admin call (``PUT .../partitions`` with 10^20) or one client producing to
ever new names makes every later lookup, Kafka Metadata answer and stats call allocate
without end. Both are checked before anything is written, so a refused call changes
nothing. Pulsar defaults both to 0 (no cap); Magnetar defaults to a cap (see BrokerSettings),
and 0 still means none.

The count of a namespace's topics is Pulsar's: each partition of a partitioned topic counts
as one topic. It is read from the metadata store at each creation, so two creations racing
at the limit may both pass it; the bound is on growth, not an exact quota.
"""

from __future__ import annotations

import json

from magnetar.broker import policies as paths
from magnetar.broker.errors import PartitionCountError, TooManyTopicsError
from magnetar.core.names import PARTITION_SUFFIX, TopicName
from magnetar.meta import MetadataStore


class TopicLimits:
    """Checks partition counts and namespace sizes against the broker's settings."""

    def __init__(
        self, meta: MetadataStore, *, max_partitions_per_topic: int, max_topics_per_namespace: int
    ) -> None:
        self.meta = meta
        self.max_partitions = max_partitions_per_topic  # 0: no cap
        self.max_topics = max_topics_per_namespace  # 0: no cap

    def check_partitions(self, name: TopicName, partitions: int) -> None:
        """PartitionCountError unless ``partitions`` is in 1..the cap (Pulsar's 406)."""
        if partitions < 1:
            raise PartitionCountError(
                f"Number of partitions should be more than 0, got {partitions} for {name}"
            )
        if self.max_partitions and partitions > self.max_partitions:
            raise PartitionCountError(
                f"Number of partitions should be less than or equal to {self.max_partitions}, "
                f"got {partitions} for {name}: the limit is the setting "
                "max_num_partitions_per_partitioned_topic"
            )

    async def check_room(self, name: TopicName, adding: int) -> None:
        """TooManyTopicsError if ``adding`` more topics would take ``name``'s namespace past
        the cap (Pulsar's 412 "Exceed maximum number of topics in namespace")."""
        if not self.max_topics or adding <= 0:
            return
        count = await self.topics_in(name.tenant, name.namespace)
        if count + adding > self.max_topics:
            raise TooManyTopicsError(
                f"Exceed maximum number of topics in namespace: {name.namespace_name} holds "
                f"{count} and {name} would add {adding}, the limit is {self.max_topics} (each "
                "partition counts as one): delete topics or raise the setting "
                "max_topics_per_namespace"
            )

    async def check_new_topic(self, name: TopicName) -> None:
        """Before a topic is registered on first use: a partition of an existing partitioned
        topic was counted with it; anything else is one more topic."""
        if name.partition >= 0 and name.partition < await self._partitions(name.base):
            return
        await self.check_room(name, 1)

    async def topics_in(self, tenant: str, namespace: str) -> int:
        """Topics of the namespace: each partition of a partitioned topic, and every other
        registered topic."""
        partitioned = {
            local: await self._partitions(TopicName("persistent", tenant, namespace, local))
            for local in await self.meta.list_children(f"/admin/partitioned/{tenant}/{namespace}")
        }
        count = sum(partitioned.values())
        for local in await self.meta.list_children(f"/admin/topics/{tenant}/{namespace}"):
            base, sep, index = local.rpartition(PARTITION_SUFFIX)
            if not (sep and index.isdigit() and int(index) < partitioned.get(base, 0)):
                count += 1
        return count

    async def _partitions(self, name: TopicName) -> int:
        node = await self.meta.get(paths.partitioned_path(name.tenant, name.namespace, name.local))
        return int(json.loads(node.value)["partitions"]) if node else 0
