"""Command handlers of a Pulsar connection (one instance per ``server.Connection``).

Each ``_on_<command>`` takes the decoded frame. A handler that needs the broker returns a
coroutine, which the connection runs as a task and answers with the right error frame if it
raises; quick ones answer inline and return None.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from magnetar.broker import AccessMode, Consumer, SubType, Topic
from magnetar.broker.errors import InvalidRequestError
from magnetar.broker.formats import PULSAR
from magnetar.broker.non_persistent import NonPersistentTopic
from magnetar.broker.schemas import SchemaInfo
from magnetar.core.authentication import AuthenticationError
from magnetar.core.entries import Entry
from magnetar.core.ids import MessageId
from magnetar.core.names import TopicName, parse_namespace
from magnetar.protocols.pulsar import compression, entry_format, responses, transactions
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import MessageRefusedError
from magnetar.protocols.pulsar.frames import Frame
from magnetar.protocols.pulsar.handles import (
    ConsumerHandle,
    ProducerHandle,
    TransientConsumerHandle,
)
from magnetar.protocols.pulsar.message_ids import from_wire

if TYPE_CHECKING:
    from magnetar.protocols.pulsar.server import Connection

log = logging.getLogger(__name__)
T = pb.BaseCommand.Type
Handler = Callable[[Frame], Awaitable[None] | None]
DUPLICATE_ID = MessageId(-1, -1)
NON_PERSISTENT = "non-persistent"


class Commands:
    """The handlers of one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.broker = conn.broker

    def table(self) -> dict[int, Handler]:
        return {
            T.CONNECT: self._on_connect,
            T.PING: self._on_ping,
            T.PONG: lambda f: None,
            T.AUTH_RESPONSE: self._on_auth_response,
            T.PARTITIONED_METADATA: self._on_partitioned_metadata,
            T.LOOKUP: self._on_lookup,
            T.PRODUCER: self._on_producer,
            T.SEND: self._on_send,
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.SUBSCRIBE: self._on_subscribe,
            T.FLOW: self._on_flow,
            T.ACK: self._on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            T.CLOSE_CONSUMER: self._on_close_consumer,
            T.UNSUBSCRIBE: self._on_unsubscribe,
            T.SEEK: self._on_seek,
            T.GET_LAST_MESSAGE_ID: self._on_get_last_message_id,
            T.GET_SCHEMA: self._on_get_schema,
            T.GET_OR_CREATE_SCHEMA: self._on_get_or_create_schema,
            T.GET_TOPICS_OF_NAMESPACE: self._on_get_topics_of_namespace,
            **{kind: self._on_transaction for kind in transactions.COMMANDS},
        }

    # -- connection and discovery -------------------------------------------------------

    def _on_connect(self, frame: Frame) -> None:
        cmd = frame.command.connect
        self.conn.client_protocol = cmd.protocol_version
        if self.conn.server.authenticator is not None:
            try:
                identity = self.conn.authenticate(cmd.auth_method_name, cmd.auth_data)
            except AuthenticationError as e:
                self.conn.refuse(e)
                return
            self.conn.authenticated(identity)
        self.conn.handshake_done()
        self.conn.write(self.conn.connected_reply(cmd.protocol_version))

    def _on_auth_response(self, frame: Frame) -> None:
        """The client's fresh credential after an AUTH_CHALLENGE: valid, the connection goes
        on; invalid, refused and closed."""
        if self.conn.server.authenticator is None:
            return
        answer = frame.command.auth_response.response
        try:
            identity = self.conn.authenticate(answer.auth_method_name, answer.auth_data)
        except AuthenticationError as e:
            self.conn.refuse(e)
            return
        if self.conn.identity is not None and identity.role != self.conn.identity.role:
            self.conn.refuse(AuthenticationError("a renewed credential may not change the role"))
            return
        self.conn.authenticated(identity)

    def _on_transaction(self, frame: Frame) -> None:
        request_id = transactions.request_id_of(frame.command)
        if request_id is not None:
            code = pb.ServerError.NotAllowedError
            self.conn.write(responses.error(request_id, code, transactions.NOT_ENABLED))

    def _on_ping(self, frame: Frame) -> None:
        self.conn.write(responses.pong())

    async def _on_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partition_metadata
        name = self.conn.topic_name(cmd.topic)
        await self.conn.authorize(name, "lookup")
        await self.broker.policies(name)  # a missing namespace is an error, not 0 partitions
        partitions = await self.broker.partitions(name)
        self.conn.write(responses.partitioned_metadata_response(cmd.request_id, partitions))

    async def _on_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookup_topic
        name = self.conn.topic_name(cmd.topic)
        await self.conn.authorize(name, "lookup")
        await self.broker.policies(name)
        wanted = cmd.advertised_listener_name
        if wanted and wanted not in self.conn.server.listeners:
            # Pulsar answers ServiceNotReady "the broker do not have <name> listener", which
            # the C++ client retries until its operation timeout (it gives up at once only
            # for the listener name "test"). NotAllowedError is among the errors it does not
            # retry, so the client gets this message at once instead of a timeout.
            known = ", ".join(sorted(self.conn.server.listeners)) or "none"
            message = (
                f"the broker do not have {wanted} listener (it has: {known}); use one of "
                "those names, or start the broker with --advertised-listeners naming it"
            )
            self.conn.write(
                responses.lookup_error(cmd.request_id, pb.ServerError.NotAllowedError, message)
            )
            return
        url, owns = self.conn.server.service_url, True
        tls = self.conn.server.service_url_tls  # a client on pulsar+ssl:// connects there
        listeners: Mapping[str, Mapping[str, str]] = self.conn.server.listeners
        ownership = self.broker.ownership
        if ownership is not None:
            owner, owns = await ownership.lookup(name, authoritative=cmd.authoritative)
            if owner.id != ownership.me.id:
                url, listeners, tls = owner.pulsar, owner.listeners, owner.pulsar_tls or None
        if wanted:  # the owner's address on that listener (brokers of a cluster share names)
            listener = listeners.get(wanted, {})
            url, tls = listener.get("pulsar", ""), listener.get("pulsar+ssl")
        # an owner: connect there; nobody yet: ask there again, authoritatively (it takes it)
        self.conn.write(
            responses.lookup_response(
                cmd.request_id, url, redirect=not owns, broker_service_url_tls=tls
            )
        )

    async def _on_get_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.get_topics_of_namespace
        tenant, namespace = parse_namespace(cmd.namespace)
        mode = pb.CommandGetTopicsOfNamespace.Mode
        topics: list[str] = []
        if cmd.mode in (mode.PERSISTENT, mode.ALL):
            topics += await self.broker.list_topics(tenant, namespace)
        if cmd.mode in (mode.NON_PERSISTENT, mode.ALL):
            topics += await self.broker.list_non_persistent_topics(tenant, namespace)
        self.conn.write(responses.get_topics_of_namespace_response(cmd.request_id, topics))

    # -- producers ----------------------------------------------------------------------

    async def _on_producer(self, frame: Frame) -> None:
        cmd = frame.command.producer
        name = self.conn.topic_name(cmd.topic)
        await self.conn.authorize(name, "produce")
        topic: Topic | NonPersistentTopic
        if name.domain == NON_PERSISTENT:
            topic = await self.broker.get_non_persistent_topic(name)
        else:
            topic = await self.broker.get_topic(name)
        version = None
        if cmd.HasField("schema") and pb.Schema.Type.Name(cmd.schema.type) != "NONE":
            strategy = await self.broker.schema_strategy(name)
            n = await self.broker.schemas.add(name.base.path, _schema_info(cmd.schema), strategy)
            version = responses.schema_version_bytes(n)
        wanted = cmd.producer_name if cmd.HasField("producer_name") else None

        def queued() -> None:
            # Pulsar's answer to a WaitForExclusive producer that has to wait: the client
            # stops its request timer and waits for a second, ready, PRODUCER_SUCCESS.
            self.conn.write(
                responses.producer_success(
                    cmd.request_id, wanted or "", schema_version=version, producer_ready=False
                )
            )

        mode = AccessMode(cmd.producer_access_mode)
        with self.conn.opening_producer(cmd.producer_id):
            producer = await topic.add_producer(wanted or None, mode, on_queued=queued)
        self.conn.producers[cmd.producer_id] = ProducerHandle(producer, topic, name.partition)
        producer.on_fenced = lambda: self.conn.close_producer_by_broker(cmd.producer_id)
        last = topic.dedup.persisted.get(producer.name, -1) if topic.dedup else -1
        producer.told_last_sequence, producer.reconnected = last, cmd.epoch > 0
        self.conn.write(
            responses.producer_success(
                cmd.request_id, producer.name, last_sequence_id=last, schema_version=version
            )
        )

    def _on_send(self, frame: Frame) -> Awaitable[None] | None:
        cmd = frame.command.send
        handle = self.conn.producers.get(cmd.producer_id)
        if handle is None or frame.payload is None:
            self.conn.write(
                responses.send_error(
                    cmd.producer_id,
                    cmd.sequence_id,
                    pb.ServerError.UnknownError,
                    f"producer {cmd.producer_id} is not connected; create the producer first",
                )
            )
            return None
        return self._publish(handle, frame)

    async def _publish(self, handle: ProducerHandle, frame: Frame) -> None:
        cmd, payload = frame.command.send, frame.payload
        assert payload is not None
        if handle.producer.closed:  # fenced while this SEND was on its way
            code, text = pb.ServerError.ProducerFenced, "the producer was fenced by another one"
            self.conn.write(responses.send_error(cmd.producer_id, cmd.sequence_id, code, text))
            return
        md = payload.metadata
        _check_times(md)
        compression.check_payload(md, payload.data, max_size=self.conn.server.max_message_size)
        count = cmd.num_messages if cmd.HasField("num_messages") else 1
        result = await handle.topic.publish(
            handle.producer,
            bytes(payload.raw),
            count=max(count, 1),
            sequence=(cmd.sequence_id, max(cmd.highest_sequence_id, cmd.sequence_id + count - 1)),
            publish_time=md.publish_time or None,
            event_time=md.event_time if md.HasField("event_time") else -1,
            fmt=PULSAR,
        )
        mid = DUPLICATE_ID
        if isinstance(handle.topic, NonPersistentTopic):
            assert result.entry is not None
            mid = handle.topic.message_id(result.entry)
        elif result.entry is not None:
            mid = handle.topic.message_id(result.entry)
        mid = MessageId(mid.ledger_id, mid.entry_id, -1, handle.partition)
        highest = cmd.highest_sequence_id if cmd.HasField("highest_sequence_id") else None
        self.conn.write(
            responses.send_receipt(
                cmd.producer_id, cmd.sequence_id, mid, highest_sequence_id=highest
            )
        )

    def _on_close_producer(self, frame: Frame) -> None:
        cmd = frame.command.close_producer
        self.conn.cancel_opening_producer(cmd.producer_id)
        handle = self.conn.producers.pop(cmd.producer_id, None)
        if handle is not None:
            handle.topic.remove_producer(handle.producer)
        self.conn.write(responses.success(cmd.request_id))

    # -- consumers ----------------------------------------------------------------------

    async def _on_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        name = self.conn.topic_name(cmd.topic)
        await self.conn.authorize(name, "consume", subscription=cmd.subscription)
        if name.domain == NON_PERSISTENT:
            await self._subscribe_non_persistent(cmd, name)
            return
        topic = await self.broker.get_topic(name)
        if cmd.HasField("schema") and pb.Schema.Type.Name(cmd.schema.type) != "NONE":
            strategy = await self.broker.schema_strategy(name)
            await self.broker.schemas.check_readable(
                name.base.path, _schema_info(cmd.schema), strategy
            )
        if cmd.HasField("start_message_id"):
            start = _start_offset(topic, from_wire(cmd.start_message_id))
        elif cmd.initial_position == pb.CommandSubscribe.InitialPosition.Earliest:
            start = topic.start_offset
        else:
            start = topic.end_offset
        sub_type = self.conn.sub_type(cmd.sub_type)
        if cmd.read_compacted and sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            raise InvalidRequestError(
                "reading compacted is allowed on Exclusive and Failover subscriptions only"
            )
        sub = await topic.subscription(cmd.subscription, sub_type, durable=cmd.durable, start=start)
        await sub.settled()  # a seek in progress: attach at the new position
        consumer = Consumer(
            cmd.consumer_id,
            cmd.consumer_name or f"consumer-{cmd.consumer_id}",
            self.conn,
            priority=cmd.priority_level,
        )
        sub.add_consumer(consumer, sub_type)
        sub.read_compacted = cmd.read_compacted
        self.conn.register_consumer(ConsumerHandle(consumer, sub, topic, name.partition))
        self.conn.write(responses.success(cmd.request_id))

    async def _subscribe_non_persistent(self, cmd: pb.CommandSubscribe, name: TopicName) -> None:
        topic = await self.broker.get_non_persistent_topic(name)
        sub_type = self.conn.sub_type(cmd.sub_type)
        if cmd.read_compacted:
            raise InvalidRequestError("non-persistent topics have no compacted view")
        sub = await topic.subscription(cmd.subscription, sub_type)
        consumer = Consumer(
            cmd.consumer_id,
            cmd.consumer_name or f"consumer-{cmd.consumer_id}",
            self.conn,
            priority=cmd.priority_level,
        )
        sub.add_consumer(consumer, sub_type)
        self.conn.register_consumer(TransientConsumerHandle(consumer, sub, topic, name.partition))
        self.conn.write(responses.success(cmd.request_id))

    def _on_flow(self, frame: Frame) -> None:
        cmd = frame.command.flow
        handle = self.conn.consumers.get(cmd.consumer_id)
        if handle is not None:
            handle.subscription.flow(handle.consumer, cmd.message_permits)

    def _on_ack(self, frame: Frame) -> Awaitable[None] | None:
        cmd = frame.command.ack
        handle = self.conn.consumers.get(cmd.consumer_id)
        if handle is None:
            return None
        if isinstance(handle, TransientConsumerHandle):  # nothing to acknowledge
            if cmd.HasField("request_id"):
                self.conn.write(responses.ack_response(cmd.consumer_id, cmd.request_id))
            return None
        if cmd.HasField("validation_error"):
            _log_discarded(handle, cmd)  # and acknowledge them, as Pulsar does
        topic, sub = handle.topic, handle.subscription
        # An id naming no stored entry is ignored, as Pulsar refuses an invalid position:
        # mapping it anywhere would acknowledge messages the consumer never saw.
        pairs = [(d, topic.stored_offset(from_wire(d))) for d in cmd.message_id]
        del cmd.message_id[:]
        bases: list[int] = []
        for data, base in pairs:
            if base is not None:
                cmd.message_id.add().CopyFrom(data)
                bases.append(base)
        unknown = [b for b in bases if sub.entry_count(b) is None]
        if unknown or cmd.HasField("request_id"):
            # Tracked so a CLOSE_CONSUMER that follows waits for it before confirming.
            task = asyncio.get_running_loop().create_task(
                self.conn.guard(self._ack_after_reading(handle, cmd, bases, unknown), frame)
            )
            self.conn.ack_tasks.add(task)
            task.add_done_callback(self.conn.ack_tasks.discard)
            return None
        self._apply_ack(handle, cmd, bases)
        return None

    async def _ack_after_reading(
        self, handle: ConsumerHandle, cmd: pb.CommandAck, bases: list[int], unknown: list[int]
    ) -> None:
        for base in unknown:
            entries = await handle.topic.read(base, max_entries=1)
            if entries and entries[0].base_offset == base:
                handle.subscription.remember_count(base, entries[0].count)
        self._apply_ack(handle, cmd, bases)
        if cmd.HasField("request_id"):
            # An ack the client asked a receipt for is answered once the cursor is durable.
            if handle.subscription.store is not None:
                await handle.subscription.store.flush()
            self.conn.write(responses.ack_response(cmd.consumer_id, cmd.request_id))

    def _apply_ack(self, handle: ConsumerHandle, cmd: pb.CommandAck, bases: list[int]) -> None:
        sub = handle.subscription
        cumulative = cmd.ack_type == pb.CommandAck.AckType.Cumulative
        acks: dict[int, list[int]] = {}
        for data, base in zip(cmd.message_id, bases, strict=True):
            count = sub.entry_count(base) or 1  # None: no such entry (trimmed away)
            if data.ack_set:
                offsets = [base + i for i in range(count) if not _bit(data.ack_set, i)]
                if cumulative:
                    sub.ack_cumulative(base - 1)
            elif cumulative:
                sub.ack_cumulative(base + count - 1)
                continue
            else:
                offsets = list(range(base, base + count))
            # One ACK may name an entry several times (one ack set per acked message of a
            # batch): each names offsets acknowledged, so they add up.
            acks.setdefault(base, []).extend(offsets)
        if acks:
            sub.ack(acks)

    def _on_redeliver(self, frame: Frame) -> None:
        cmd = frame.command.redeliver_unacknowledged_messages
        handle = self.conn.consumers.get(cmd.consumer_id)
        if not isinstance(handle, ConsumerHandle):  # none, or non-persistent: nothing kept
            return
        topic = handle.topic
        bases = None
        if cmd.message_ids:
            bases = [topic.offset_of(MessageId(d.ledger_id, d.entry_id)) for d in cmd.message_ids]
        handle.subscription.redeliver(handle.consumer, bases)

    async def _on_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        if self.conn.ack_tasks:
            await asyncio.gather(*self.conn.ack_tasks, return_exceptions=True)
        handle = self.conn.consumers.get(cmd.consumer_id)
        await self.conn.release_consumer(cmd.consumer_id)
        if handle is not None and handle.subscription.store is not None:
            # The client flushed its acks before closing: make them durable, then confirm.
            await handle.subscription.store.flush()
        self.conn.write(responses.success(cmd.request_id))

    async def _on_unsubscribe(self, frame: Frame) -> None:
        cmd = frame.command.unsubscribe
        handle = self.conn.consumers.get(cmd.consumer_id)
        if handle is None:
            self.conn.write(
                responses.error(cmd.request_id, pb.ServerError.ConsumerNotFound, "no such consumer")
            )
            return
        others = [c for c in handle.subscription.consumers if c is not handle.consumer]
        if others:
            self.conn.write(
                responses.error(
                    cmd.request_id,
                    pb.ServerError.MetadataError,  # what Pulsar answers
                    f"subscription {handle.subscription.name!r} has {len(others)} other "
                    "consumer(s); close them before unsubscribing",
                )
            )
            return
        await self.conn.release_consumer(cmd.consumer_id)
        if handle.subscription.name in handle.topic.subscriptions:
            await handle.topic.unsubscribe(handle.subscription.name)
        self.conn.write(responses.success(cmd.request_id))

    async def _on_seek(self, frame: Frame) -> None:
        cmd = frame.command.seek
        handle = self.conn.consumers.get(cmd.consumer_id)
        if handle is None:
            self.conn.write(
                responses.error(cmd.request_id, pb.ServerError.ConsumerNotFound, "no such consumer")
            )
            return
        if isinstance(handle, TransientConsumerHandle):
            self.conn.write(_not_on_non_persistent(cmd.request_id, "seek"))
            return
        topic, sub = handle.topic, handle.subscription
        if cmd.HasField("message_publish_time"):
            offset = await topic.find_offset(cmd.message_publish_time)
        else:
            offset = _start_offset(topic, from_wire(cmd.message_id))
        # Answer only after the reset closed the consumers: the client completes its seek
        # once it has subscribed again and only then takes the seek position as its start
        # (an answer before the close makes it restart after the last message it had read).
        await sub.reset(offset)
        self.conn.write(responses.success(cmd.request_id))

    async def _on_get_last_message_id(self, frame: Frame) -> None:
        cmd = frame.command.get_last_message_id
        handle = self.conn.consumers.get(cmd.consumer_id)
        if handle is None:
            self.conn.write(
                responses.error(cmd.request_id, pb.ServerError.ConsumerNotFound, "no such consumer")
            )
            return
        if isinstance(handle, TransientConsumerHandle):
            self.conn.write(_not_on_non_persistent(cmd.request_id, "GetLastMessageId"))
            return
        topic = handle.topic
        mid = MessageId(topic.segments()[-1].segment_id, -1, -1, handle.partition)
        last = await topic.last_dispatchable()
        if last is not None:
            batched = True  # entries of other protocols reach Pulsar consumers as batches
            if last.format == PULSAR:
                metadata = entry_format.metadata_of(last.payload)
                batched = metadata.HasField("num_messages_in_batch")
            batch_index = last.count - 1 if batched else -1
            eid = topic.message_id(last)
            mid = MessageId(eid.ledger_id, eid.entry_id, batch_index, handle.partition)
        mark = _mark_delete_position(topic, handle.subscription.cursor.mark_delete, last)
        mark = MessageId(mark.ledger_id, mark.entry_id, -1, handle.partition)
        self.conn.write(
            responses.get_last_message_id_response(cmd.request_id, mid, mark_delete_position=mark)
        )

    # -- schemas ------------------------------------------------------------------------

    async def _on_get_schema(self, frame: Frame) -> None:
        cmd = frame.command.get_schema
        name = self.conn.topic_name(cmd.topic)
        version = None
        if cmd.HasField("schema_version") and len(cmd.schema_version) == 8:
            (version,) = struct.unpack(">q", cmd.schema_version)
        found = await self.broker.schemas.get(name.base.path, version)
        if found is None:
            self.conn.write(
                responses.get_schema_error(
                    cmd.request_id, pb.ServerError.TopicNotFound, f"topic {name} has no schema"
                )
            )
            return
        n, info = found
        schema = pb.Schema(name=info.name or name.local, schema_data=info.data)
        schema.type = pb.Schema.Type.Value(info.type)
        for k, v in info.properties.items():
            schema.properties.add(key=k, value=v)
        self.conn.write(
            responses.get_schema_response(cmd.request_id, schema, responses.schema_version_bytes(n))
        )

    async def _on_get_or_create_schema(self, frame: Frame) -> None:
        cmd = frame.command.get_or_create_schema
        name = self.conn.topic_name(cmd.topic)
        strategy = await self.broker.schema_strategy(name)
        n = await self.broker.schemas.add(name.base.path, _schema_info(cmd.schema), strategy)
        self.conn.write(
            responses.get_or_create_schema_response(
                cmd.request_id, responses.schema_version_bytes(n)
            )
        )


def _not_on_non_persistent(request_id: int, what: str) -> bytes:
    return responses.error(
        request_id,
        pb.ServerError.NotAllowedError,
        f"{what} is not supported on non-persistent topics",
    )


def _schema_info(schema: pb.Schema) -> SchemaInfo:
    props = {p.key: p.value for p in schema.properties}
    return SchemaInfo(
        pb.Schema.Type.Name(schema.type), bytes(schema.schema_data), props, schema.name
    )


def _log_discarded(handle: ConsumerHandle, cmd: pb.CommandAck) -> None:
    """An ACK with ``validation_error``: the client discarded messages it cannot use (bad
    checksum, failed decryption with DISCARD). Pulsar logs it and acknowledges them anyway;
    kept pending, they would stay in the backlog and come back to the same client forever."""
    log.warning(
        "consumer %s of subscription %s discarded %d message(s): %s",
        handle.consumer.name,
        handle.subscription.name,
        len(cmd.message_id),
        pb.CommandAck.ValidationError.Name(cmd.validation_error),
    )


def _bit(words: Any, i: int) -> bool:
    return bool((words[i // 64] >> (i % 64)) & 1) if i // 64 < len(words) else False


def _start_offset(topic: Topic, mid: MessageId) -> int:
    """Where a reader starting at ``mid``, or a seek to ``mid``, begins: at ``mid``'s entry.

    As Pulsar's broker does: it cannot know whether the client wants ``mid`` itself (the
    client's ``startMessageIdInclusive`` never reaches it), so it delivers the whole entry and
    the client drops what precedes the start (and the start itself unless inclusive).
    """
    if mid.is_earliest or mid.ledger_id < 0:
        return topic.start_offset
    if mid.is_latest:
        return topic.end_offset
    return _entry_offset(topic, mid)


def _mark_delete_position(topic: Topic, mark_delete: int, last: Entry | None) -> MessageId:
    """The subscription's mark-delete position as Pulsar reports it: the id of the last entry
    whose messages are all acknowledged up to the first unacknowledged one (``mark_delete``,
    an offset), or (segment, -1) before a segment's first entry.

    A reader that starts at (or seeks to) the latest id compares it with the last message id
    to answer ``has_message_available``: only (ledger, entry) order matters there, so an
    offset inside an entry maps to the position just before that entry.
    """
    if last is not None and mark_delete >= last.base_offset + last.count:
        eid = topic.message_id(last)
        return MessageId(eid.ledger_id, eid.entry_id)
    before = mark_delete if last is None else min(mark_delete, last.base_offset)
    firsts = sorted(topic.segment_first_offsets().items(), key=lambda item: item[1])
    segment_id, first = firsts[0]
    for sid, start in firsts:
        if start <= before - 1:
            segment_id, first = sid, start
    return MessageId(segment_id, max(before - 1 - first, -1))


def _entry_offset(topic: Topic, mid: MessageId) -> int:
    """The base offset of the entry that ``mid`` names (its batch index left out)."""
    return topic.offset_of(MessageId(mid.ledger_id, mid.entry_id))


INT64_MAX = (1 << 63) - 1


def _check_times(md: pb.MessageMetadata) -> None:
    """Pulsar sends times as uint64; the log keeps int64 milliseconds."""
    for field in ("publish_time", "event_time"):
        value = getattr(md, field)
        if value > INT64_MAX:
            raise MessageRefusedError(
                f"message refused: {field} {value} is beyond the largest time the log can "
                f"hold ({INT64_MAX} ms); send milliseconds since the epoch"
            )
