"""The broker: topics by name, loaded on demand, with the namespace policies that govern them.

Stateless apart from storage (seeds 001/004): everything it needs after a restart —
topics, partitions, cursors, schemas, dedup snapshots — is in the metadata store or the
ledgers, so a broker can be killed at any moment and another one picks up.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from magnetar.broker import policies as paths
from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.dedup import Deduplication
from magnetar.broker.delays import DEFAULT_TICK_MS
from magnetar.broker.errors import (
    AlreadyExistsError,
    InvalidRequestError,
    NamespaceNotFoundError,
    TopicNotFoundError,
)
from magnetar.broker.limits import TopicLimits
from magnetar.broker.log_start import LogStarts
from magnetar.broker.non_persistent import NonPersistentTopic
from magnetar.broker.ownership import Ownership
from magnetar.broker.peers import Peers
from magnetar.broker.policies import Namespaces, Policies, TopicPolicyStore
from magnetar.broker.producer_names import ProducerNames
from magnetar.broker.records import IdBlock, LeaseKind, Leases, RecordKind, RecordStore, reserve_ids
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.subscription import UnackedLimits
from magnetar.broker.topic import Topic
from magnetar.broker.transactions import TransactionIndex
from magnetar.core import formats
from magnetar.core.names import TopicName
from magnetar.ledger import LedgerFactory, OffsetOutOfRangeError
from magnetar.meta import MetadataStore, Notification


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    deduplication_enabled: bool = (
        False  # broker-wide default, as Pulsar's brokerDeduplicationEnabled
    )
    schema_compatibility_strategy: str = "FULL"  # Pulsar's broker default
    allow_auto_topic_creation: bool = True
    max_message_size: int = 5 * 1024 * 1024
    offload_deletion_lag_ms: int = 4 * 3600 * 1000  # Pulsar's default: 4 hours
    cluster_name: str = "standalone"  # the prefix of generated producer names
    max_unacked_messages_per_consumer: int = 50_000  # Shared/Key_Shared; 0: no cap (Pulsar's)
    max_unacked_messages_per_subscription: int = 200_000  # Shared/Key_Shared; 0: no cap
    max_num_partitions_per_partitioned_topic: int = 1024  # 0: no cap (Pulsar's default)
    max_topics_per_namespace: int = 10_000  # each partition counts; 0: no cap (Pulsar's)
    auto_skip_non_recoverable_data: bool = False  # subscriptions skip damaged entries


class Broker:
    """Owns every topic of this node. Create, then ``await start()``; ``aclose()`` at the end."""

    def __init__(
        self, meta: MetadataStore, ledgers: LedgerFactory, settings: BrokerSettings
    ) -> None:
        self.meta = meta
        self.ledgers = ledgers
        self.settings = settings
        self.namespaces = Namespaces(meta)
        self.schemas = SchemaRegistry(meta)
        self.topics: dict[str, Topic] = {}
        self.non_persistent: dict[str, NonPersistentTopic] = {}  # in memory while in use
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._policies: dict[str, Policies] = {}
        self._unwatch = meta.watch("/admin/policies", self._on_policy_change)
        self.topic_policies = TopicPolicyStore(meta, self.namespaces)
        self._unwatch_topics = meta.watch(paths.TOPIC_POLICIES, self._on_topic_policy_change)
        self.producer_names = ProducerNames(settings.cluster_name)
        self.log_starts = LogStarts(meta)
        self.ownership: Ownership | None = None  # several brokers: who serves which bundle
        self.peers = Peers()  # how calls to the other brokers authenticate (standalone sets it)
        self.limits = TopicLimits(
            meta,
            max_partitions_per_topic=settings.max_num_partitions_per_partitioned_topic,
            max_topics_per_namespace=settings.max_topics_per_namespace,
        )

    async def start(self) -> None:
        # a message of max_message_size bytes in its batch or record framing may inflate a
        # little past it (Pulsar pads its frame limit by 10 KiB for the same reason)
        formats.limit_message_size(self.settings.max_message_size + 10 * 1024)
        await self.namespaces.ensure_defaults()
        await self.producer_names.start(self.meta)

    def _on_policy_change(self, note: Notification) -> None:
        ns = note.path.removeprefix("/admin/policies/")
        self._policies.pop(ns, None)
        asyncio.get_running_loop().create_task(self._apply_policies(ns))

    async def _apply_policies(self, namespace: str) -> None:
        for topic in list(self.topics.values()):
            if topic.name.namespace_name == namespace:
                await self._configure_dedup(topic)
                await self._configure_delayed_delivery(topic)
                await self._configure_compaction(topic)

    def _on_topic_policy_change(self, note: Notification) -> None:
        path = note.path.removeprefix(paths.TOPIC_POLICIES + "/")
        if path.count("/") == 2:
            name = TopicName.parse(f"persistent://{path}")
            asyncio.get_running_loop().create_task(self.apply_topic_policies(name))

    async def apply_topic_policies(self, name: TopicName) -> None:
        """Make the loaded topics ``name`` governs (itself, or its partitions) follow its
        topic policies now (the REST call waits for this; other brokers see the watch)."""
        for topic in list(self.topics.values()):
            if topic.name == name or topic.name.base == name:
                await self._configure_dedup(topic)
                await self._configure_limits(topic)
                await self._configure_compaction(topic)

    async def topic_policy(self, name: TopicName, field: str) -> object:
        """A topic policy of ``name``: a partition's own, else its partitioned topic's, else
        None (not set on the topic)."""
        for candidate in dict.fromkeys([name, name.base]):
            topic_level = await self.topic_policies.get(
                candidate.tenant, candidate.namespace, candidate.local
            )
            value = getattr(topic_level, field)
            if value is not None:
                return value
        return None

    async def retention(self, name: TopicName) -> dict[str, int]:
        """The retention that applies to ``name``: its topic policy, else its namespace's
        ({} keeps everything)."""
        topic_level = await self.topic_policy(name, "retentionPolicies")
        if isinstance(topic_level, dict):
            return topic_level
        return dict((await self.policies(name)).retention_policies or {})

    async def deduplication(self, name: TopicName) -> bool:
        """Whether ``name`` deduplicates: its topic policy (a partition's own, else its
        partitioned topic's), else its namespace's, else the broker's default."""
        for candidate in dict.fromkeys([name, name.base]):
            topic_level = await self.topic_policies.get(
                candidate.tenant, candidate.namespace, candidate.local
            )
            if topic_level.deduplicationEnabled is not None:
                return topic_level.deduplicationEnabled
        enabled = (await self.policies(name)).deduplicationEnabled
        return self.settings.deduplication_enabled if enabled is None else enabled

    async def policies(self, name: TopicName) -> Policies:
        ns = name.namespace_name
        cached = self._policies.get(ns)
        if cached is None:
            cached = await self.namespaces.policies(name.tenant, name.namespace)
            self._policies[ns] = cached
        return cached

    async def schema_strategy(self, name: TopicName) -> str:
        strategy = (await self.policies(name)).schema_compatibility_strategy
        return self.settings.schema_compatibility_strategy if strategy == "UNDEFINED" else strategy

    # -- topics -------------------------------------------------------------------------

    async def partitions(self, name: TopicName) -> int:
        """Partitions of a partitioned topic; 0 for a plain topic (or a partition)."""
        if name.partition >= 0:
            return 0
        node = await self.meta.get(paths.partitioned_path(name.tenant, name.namespace, name.local))
        return int(json.loads(node.value)["partitions"]) if node else 0

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        self.limits.check_partitions(name, partitions)
        await self.policies(name)  # the namespace must exist
        path = paths.partitioned_path(name.tenant, name.namespace, name.local)
        if await self.meta.exists(path) or await self.meta.exists(
            paths.topic_path(name.tenant, name.namespace, name.local)
        ):
            raise AlreadyExistsError(f"topic {name} already exists")
        await self.limits.check_room(name, partitions)
        await self.meta.put(
            path, json.dumps({"partitions": partitions}).encode(), expected_version=-1
        )

    async def set_partitions(self, name: TopicName, partitions: int) -> None:
        self.limits.check_partitions(name, partitions)
        await self.limits.check_room(name, partitions - await self.partitions(name))
        path = paths.partitioned_path(name.tenant, name.namespace, name.local)
        await self.meta.put(path, json.dumps({"partitions": partitions}).encode())

    async def delete_topic(self, topic: Topic) -> None:
        """Unload ``topic`` and delete its data, cursors, dedup state and registration."""
        name = topic.name
        self.topics.pop(str(name), None)
        await topic.aclose()
        await self.meta.delete_recursive(topic.cursor_root)
        await self.meta.delete_recursive(f"/dedup/{name.path}")
        if topic.compaction is not None:
            await topic.compaction.delete()
        if topic.txns is not None:
            await topic.txns.delete()
        await topic.ledger.delete()
        await self.log_starts.delete(name)
        await self.meta.delete_recursive(paths.topic_path(name.tenant, name.namespace, name.local))
        if name.partition < 0:
            await self.schemas.delete(name.path)

    async def delete_records(self, topic: Topic, before: int) -> int:
        """Delete ``topic``'s records before offset ``before`` (Kafka's DeleteRecords; -1:
        all of them, up to the end offset) and return the new start offset. Durable when
        this returns: from then on reads below it fail with OffsetOutOfRangeError, after a
        restart too; the segments wholly below it are deleted now, the one holding it once
        it is closed and the retention sweep sees it. An offset below the start changes
        nothing; one past the end raises OffsetOutOfRangeError and deletes nothing."""
        ledger = topic.ledger
        end = ledger.end_offset
        before = end if before == -1 else before
        if not 0 <= before <= end:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {topic.name} before offset {before}: "
                f"use -1 or 0..{end} (the end offset)"
            )
        if before > ledger.start_offset:
            await self.log_starts.set(topic.name, before)
            ledger.delete_before(before)
            await ledger.trim_deleted()
        return ledger.start_offset

    async def get_non_persistent_topic(self, name: TopicName) -> NonPersistentTopic:
        """The non-persistent topic ``name``, created in memory on first use (its namespace
        must exist); forgotten again once it has no producer and no consumer."""
        await self.policies(name)
        key = str(name)
        topic = self.non_persistent.get(key)
        if topic is None:
            topic = NonPersistentTopic(name, self.producer_names.next, self._forget_idle)
            self.non_persistent[key] = topic
        return topic

    def _forget_idle(self, topic: NonPersistentTopic) -> None:
        if self.non_persistent.get(str(topic.name)) is topic:
            del self.non_persistent[str(topic.name)]

    async def list_non_persistent_topics(self, tenant: str, namespace: str) -> list[str]:
        """Non-persistent topics of a namespace in use on this broker (each partition)."""
        await self.namespaces.policies(tenant, namespace)
        prefix = f"non-persistent://{tenant}/{namespace}/"
        return sorted(k for k in self.non_persistent if k.startswith(prefix))

    async def topic_exists(self, name: TopicName) -> bool:
        return await self.meta.exists(paths.topic_path(name.tenant, name.namespace, name.local))

    async def get_topic(self, name: TopicName, *, create: bool = True) -> Topic:
        """The loaded topic ``name``; created on first use when auto-creation allows it."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        loading = self._loading.get(key)
        if loading is None:
            # The load is a task of its own: a caller that goes away (a client that
            # disconnects while its request creates the topic) must not stop it half-way,
            # with the partition registered but not open here (every later load of the
            # topic then failed). Callers wait for it shielded.
            loading = asyncio.get_running_loop().create_task(self._load_once(name, create))
            loading.add_done_callback(_retrieved)
            self._loading[key] = loading
        return await asyncio.shield(loading)

    async def _load_once(self, name: TopicName, create: bool) -> Topic:
        key = str(name)
        try:
            topic = await self._load(name, create)
        finally:
            self._loading.pop(key, None)
        self.topics[key] = topic
        return topic

    async def _load(self, name: TopicName, create: bool) -> Topic:
        try:
            await self.policies(name)
        except NamespaceNotFoundError:
            raise
        registered = await self.topic_exists(name)
        if not registered:
            allowed = create and self.settings.allow_auto_topic_creation
            if not allowed:
                raise TopicNotFoundError(f"topic {name} does not exist")
            await self.limits.check_new_topic(name)
            await self.meta.put(paths.topic_path(name.tenant, name.namespace, name.local), b"{}")
        if self.ownership is not None:  # registered by any broker, served by its owner only
            await self.ownership.check(name)  # NotOwnerError: its client looks it up again
        ledger = await self.ledgers.open(name.path)
        ledger.auto_skip_non_recoverable_data = self.settings.auto_skip_non_recoverable_data
        ledger.delete_before(min(await self.log_starts.get(name), ledger.end_offset))
        limits = UnackedLimits(
            self.settings.max_unacked_messages_per_consumer,
            self.settings.max_unacked_messages_per_subscription,
        )
        topic = Topic(
            name,
            ledger,
            self.meta,
            new_producer_name=self.producer_names.next,
            unacked_limits=limits,
        )
        topic.txns = TransactionIndex(self.meta, name.path, ledger)
        await topic.txns.load()
        topic.compaction = TopicCompaction(
            name.path, ledger, self.ledgers, self.meta, txns=topic.txns
        )
        await topic.compaction.load()
        await topic.load_subscriptions()
        await self._configure_dedup(topic)
        await self._configure_limits(topic)
        await self._configure_delayed_delivery(topic)
        await self._configure_compaction(topic)
        return topic

    async def _configure_limits(self, topic: Topic) -> None:
        size = await self.topic_policy(topic.name, "maxMessageSize")
        topic.max_message_size = size if isinstance(size, int) else None

    async def _configure_delayed_delivery(self, topic: Topic) -> None:
        policy = (await self.policies(topic.name)).delayed_delivery_policies or {}
        topic.set_delayed_delivery(
            bool(policy.get("active", True)), int(policy.get("tickTime", DEFAULT_TICK_MS))
        )

    async def _configure_compaction(self, topic: Topic) -> None:
        if topic.compaction is not None:
            topic.compaction.threshold = await self.compaction_threshold(topic.name)

    async def compaction_threshold(self, name: TopicName) -> int:
        """Bytes published that start a compaction run of ``name`` (0: never): its topic
        policy, else its namespace's."""
        own = await self.topic_policy(name, "compactionThreshold")
        if isinstance(own, int):
            return own
        return (await self.policies(name)).compaction_threshold or 0

    async def _configure_dedup(self, topic: Topic) -> None:
        enabled = await self.deduplication(topic.name)
        if enabled and topic.dedup is None:
            dedup = Deduplication(self.meta, f"/dedup/{topic.name.path}")
            await dedup.load(topic.ledger)
            topic.dedup = dedup
        elif not enabled and topic.dedup is not None:
            await topic.dedup.snapshot()
            topic.dedup = None

    async def partitioned_topics(self, tenant: str, namespace: str) -> list[str]:
        """Local names of the namespace's partitioned topics (no check that it exists)."""
        return await self.meta.list_children(f"/admin/partitioned/{tenant}/{namespace}")

    async def subscription_exists(self, name: TopicName, subscription: str) -> bool:
        """Whether partition (or plain topic) ``name`` has the durable ``subscription``,
        loaded here or not."""
        return await self.meta.exists(f"/cursors/{name.path}/{subscription}")

    # -- what the areas above keep in the metadata store (see magnetar.broker.records) -----

    def records(self, kind: RecordKind) -> RecordStore:
        return RecordStore(self.meta, kind)

    def leases(self, kind: LeaseKind) -> Leases:
        return Leases(self.meta, kind)

    async def reserve_ids(self, block: IdBlock, size: int) -> int:
        """The first number of a block of ``size`` no caller ever got before (durable)."""
        return await reserve_ids(self.meta, block, size)

    # -- the object store and Iceberg tables behind the ledgers ---------------------------

    @property
    def object_store_url(self) -> str | None:
        """Where offloaded segments live (readers go there directly), or None."""
        return self.ledgers.object_store_url

    @property
    def has_tables(self) -> bool:
        """True when offloaded segments are registered in an Iceberg catalog."""
        return self.ledgers.has_tables

    async def table_of(self, name: TopicName) -> dict[str, Any] | None:
        """The Iceberg table of topic (or partition) ``name``; None before it exists."""
        return await self.ledgers.table_of(name.path)

    async def list_topics(self, tenant: str, namespace: str) -> list[str]:
        """Persistent topics of a namespace: plain topics and each partition."""
        await self.namespaces.policies(tenant, namespace)
        names = await self.local_topic_names(tenant, namespace)
        return [f"persistent://{tenant}/{namespace}/{n}" for n in names]

    async def local_topic_names(self, tenant: str, namespace: str) -> list[str]:
        """Local names of the namespace's registered topics and partitions (no check that
        the namespace exists)."""
        return await self.meta.list_children(f"/admin/topics/{tenant}/{namespace}")

    async def unload_namespace(self, tenant: str, namespace: str, bundle: str | None) -> int:
        """Hand a namespace's bundles (or one) back gracefully: clients are told to go, the
        topics' cursors and ledgers are closed, then the bundle nodes are deleted; the next
        lookup places each bundle again. Returns the number of topics unloaded."""
        ownership = self.ownership
        if ownership is None:
            raise InvalidRequestError("unloading needs several brokers (a ZooKeeper cluster)")
        prefix = f"/bundles/{tenant}/{namespace}/"
        paths = [
            p
            for p in ownership.owned
            if p.startswith(prefix) and (bundle is None or p == prefix + bundle)
        ]
        ownership.unloading.update(paths)
        try:
            count = 0
            for key, topic in list(self.topics.items()):
                if ownership.bundle_path(topic.name) not in paths:
                    continue
                del self.topics[key]
                await topic.fence()
                await topic.aclose()
                await topic.ledger.unload()
                count += 1
            for path in paths:
                await ownership.release(path)
            return count
        finally:
            ownership.unloading.difference_update(paths)

    def ownership_lost(self) -> None:
        """The ZooKeeper session is gone: stop serving every topic now (another broker may
        own them soon); the ledgers are left as they are, for their next owner to recover."""
        for key, topic in list(self.topics.items()):
            topic.fenced = True
            topic.disconnect_all()
            topic.ledger.release()
            del self.topics[key]

    async def aclose(self) -> None:
        self._unwatch()
        self._unwatch_topics()
        for loading in list(self._loading.values()):  # no topic opens while closing
            loading.cancel()
        for topic in list(self.topics.values()):
            await topic.fence()  # publishes under way end first: the snapshot holds them
            await topic.aclose()
        self.topics.clear()


def _retrieved(task: asyncio.Future[Topic]) -> None:
    """A load's failure reaches its callers; this keeps asyncio from also logging it as
    never retrieved when every caller has gone."""
    if not task.cancelled():
        task.exception()
