"""Kafka topic names and partitions on Magnetar topics.

Kafka topic ``NAME`` is ``persistent://<kafka namespace>/NAME``. A partitioned topic's
Kafka partition ``i`` is its partition ``NAME-partition-i``; a non-partitioned topic is one
Kafka partition, 0. Auto-created topics are non-partitioned (Kafka's ``num.partitions=1``);
CreateTopics makes a partitioned topic of the requested size.
"""

from __future__ import annotations

import uuid

from magnetar.broker import Broker, Topic
from magnetar.broker.admin import TopicAdmin
from magnetar.broker.errors import AlreadyExistsError
from magnetar.broker.policies import TopicPolicies
from magnetar.core.names import TopicName, check_kafka_topic
from magnetar.protocols.kafka.errors import UnknownTopicError

_TOPIC_IDS = uuid.UUID("6d61676e-6574-6172-2d6b-61666b612d69")  # uuid5 namespace of topic ids


class KafkaTopics:
    """Resolves Kafka (topic, partition) pairs to loaded broker topics."""

    def __init__(self, broker: Broker, namespace: str) -> None:
        self.broker = broker
        self.tenant, _, self.namespace = namespace.partition("/")
        self.admin = TopicAdmin(broker)
        self._names: dict[tuple[str, int], TopicName] = {}

    def name(self, topic: str) -> TopicName:
        """The Magnetar name of Kafka topic ``topic``; InvalidNameError (Kafka's
        INVALID_TOPIC_EXCEPTION) unless Kafka's rules and Magnetar's both allow it."""
        check_kafka_topic(topic)
        return TopicName.parse(f"persistent://{self.tenant}/{self.namespace}/{topic}")

    def topic_id(self, topic: str) -> uuid.UUID:
        """Kafka's topic id of ``topic`` (Metadata v10+, KIP-848 assignments): derived from
        the cluster-wide topic name, so every broker answers the same id without a lookup.
        A topic deleted and created again keeps its id (Kafka would give a new one)."""
        return uuid.uuid5(_TOPIC_IDS, str(self.name(topic)))

    async def by_id(self, topic_id: uuid.UUID) -> str | None:
        """The Kafka topic whose id is ``topic_id``, or None."""
        return next((t for t in await self.list() if self.topic_id(t) == topic_id), None)

    async def partition_count(self, topic: str, *, create: bool = False) -> int | None:
        """Partitions of ``topic``; None when it does not exist (and was not created)."""
        name = self.name(topic)
        n = await self.broker.partitions(name)
        if n:
            return n
        if await self.broker.topic_exists(name):
            return 1
        if create and self.broker.settings.allow_auto_topic_creation:
            await self.broker.get_topic(name, create=True)
            return 1
        return None

    def cached(self, topic: str, index: int) -> Topic | None:
        """The loaded topic behind (topic, index) if already resolved: no I/O, no wait."""
        name = self._names.get((topic, index))
        return self.broker.topics.get(str(name)) if name is not None else None

    async def partition_name(self, topic: str, index: int) -> TopicName:
        """The Magnetar name behind Kafka partition (topic, index), without loading it."""
        name = self.name(topic)
        return name.partition_name(index) if await self.broker.partitions(name) else name

    async def partition(self, topic: str, index: int, *, create: bool = False) -> Topic:
        """The broker topic of Kafka partition (topic, index). UnknownTopicError if absent."""
        found = self.cached(topic, index)
        if found is not None:
            return found
        name = self.name(topic)
        n = await self.broker.partitions(name)
        if n:
            if not 0 <= index < n:
                raise UnknownTopicError(f"topic {topic!r} has no partition {index}")
            part = name.partition_name(index)
        else:
            if index != 0 or await self.partition_count(topic, create=create) is None:
                raise UnknownTopicError(f"topic {topic!r} partition {index} does not exist")
            part = name
        loaded = await self.broker.get_topic(part, create=True)
        self._names[(topic, index)] = part
        return loaded

    async def list(self) -> list[str]:
        """Every Kafka topic of the namespace (partitioned topics once, by base name)."""
        partitioned = await self.broker.partitioned_topics(self.tenant, self.namespace)
        plain = [
            n
            for n in await self.broker.local_topic_names(self.tenant, self.namespace)
            if TopicName.parse(f"{self.tenant}/{self.namespace}/{n}").partition < 0
        ]
        return sorted(set(partitioned) | set(plain))

    async def create(
        self, topic: str, partitions: int, policies: TopicPolicies | None = None
    ) -> None:
        """Create a partitioned topic with its topic ``policies`` (AlreadyExistsError when
        ``topic`` exists in any form). The policies are stored first, so the topic never
        exists without them; a failed creation removes them again."""
        name = self.name(topic)
        if await self.broker.topic_exists(name):
            raise AlreadyExistsError(f"topic {topic!r} already exists")
        store = self.broker.topic_policies
        given = policies is not None and policies != TopicPolicies()
        if policies is not None and given:
            await store.set(name.tenant, name.namespace, name.local, policies)
        try:
            await self.broker.create_partitioned_topic(name, partitions)
        except BaseException:
            if given:
                await store.set(name.tenant, name.namespace, name.local, TopicPolicies())
            raise

    async def delete(self, topic: str) -> None:
        """Delete ``topic`` with its data and cursors (as Kafka does: even while in use)."""
        name = self.name(topic)
        if await self.broker.partitions(name):
            await self.admin.delete_partitioned(name, force=True)
        elif await self.broker.topic_exists(name):
            await self.admin.delete(name, force=True)
        else:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        self._names = {k: v for k, v in self._names.items() if k[0] != topic}
