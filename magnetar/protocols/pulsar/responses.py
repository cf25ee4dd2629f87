"""Builders of the frames a broker sends, ready to write to the socket.

Each returns encoded bytes (decode them with ``frames.decode_frame`` to look inside). Request
ids are the client's: echo the one of the request you answer. Error codes are
``ServerError`` values, e.g. ``pb.ServerError.TopicNotFound``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from magnetar.core.ids import MessageId
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import (
    PROTOCOL_VERSION,
    BytesLike,
    encode_command,
    encode_raw_payload_command,
)
from magnetar.protocols.pulsar.message_ids import to_wire

_Type = pb.BaseCommand.Type
_LookupType = pb.CommandLookupTopicResponse.LookupType
_MetadataLookupType = pb.CommandPartitionedTopicMetadataResponse.LookupType


def schema_version_bytes(version: int) -> bytes:
    """A schema version as the clients expect it on the wire: 8 bytes, big-endian."""
    return struct.pack(">q", version)


# --- connection -----------------------------------------------------------------------------


def connected(
    server_version: str,
    *,
    protocol_version: int = PROTOCOL_VERSION,
    max_message_size: int | None = None,
) -> bytes:
    """Answer to CONNECT. Use min(client's protocol_version, ours) as ``protocol_version``."""
    body = pb.CommandConnected(server_version=server_version, protocol_version=protocol_version)
    if max_message_size is not None:
        body.max_message_size = max_message_size
    return encode_command(pb.BaseCommand(type=_Type.CONNECTED, connected=body))


def auth_challenge(method: str, data: bytes, server_version: str, protocol_version: int) -> bytes:
    """Ask the client for a fresh credential (its token expired), as Pulsar does."""
    body = pb.CommandAuthChallenge(
        server_version=server_version,
        challenge=pb.AuthData(auth_method_name=method, auth_data=data),
        protocol_version=protocol_version,
    )
    return encode_command(pb.BaseCommand(type=_Type.AUTH_CHALLENGE, auth_challenge=body))


def ping() -> bytes:
    return encode_command(pb.BaseCommand(type=_Type.PING, ping=pb.CommandPing()))


def pong() -> bytes:
    return encode_command(pb.BaseCommand(type=_Type.PONG, pong=pb.CommandPong()))


def success(request_id: int, *, schema: pb.Schema | None = None) -> bytes:
    """Generic success (SUBSCRIBE, UNSUBSCRIBE, CLOSE_*, SEEK ...)."""
    body = pb.CommandSuccess(request_id=request_id)
    if schema is not None:
        body.schema.CopyFrom(schema)
    return encode_command(pb.BaseCommand(type=_Type.SUCCESS, success=body))


def error(request_id: int, code: pb.ServerError, message: str) -> bytes:
    """Generic failure of the request ``request_id``."""
    body = pb.CommandError(request_id=request_id, error=code, message=message)
    return encode_command(pb.BaseCommand(type=_Type.ERROR, error=body))


# --- topic discovery ------------------------------------------------------------------------


def partitioned_metadata_response(request_id: int, partitions: int) -> bytes:
    """``partitions`` = 0 for a plain (non-partitioned) topic."""
    body = pb.CommandPartitionedTopicMetadataResponse(
        request_id=request_id, partitions=partitions, response=_MetadataLookupType.Success
    )
    return _partition_metadata(body)


def partitioned_metadata_error(request_id: int, code: pb.ServerError, message: str) -> bytes:
    body = pb.CommandPartitionedTopicMetadataResponse(
        request_id=request_id, response=_MetadataLookupType.Failed, error=code, message=message
    )
    return _partition_metadata(body)


def _partition_metadata(body: pb.CommandPartitionedTopicMetadataResponse) -> bytes:
    command = pb.BaseCommand(type=_Type.PARTITIONED_METADATA_RESPONSE)
    command.partition_metadata_response.CopyFrom(body)
    return encode_command(command)


def lookup_response(
    request_id: int,
    broker_service_url: str,
    *,
    authoritative: bool = True,
    redirect: bool = False,
    broker_service_url_tls: str | None = None,
) -> bytes:
    """The topic lives at ``broker_service_url`` (Connect), or ask there again (redirect)."""
    body = pb.CommandLookupTopicResponse(
        request_id=request_id,
        broker_service_url=broker_service_url,
        response=_LookupType.Redirect if redirect else _LookupType.Connect,
        authoritative=authoritative,
    )
    if broker_service_url_tls is not None:
        body.broker_service_url_tls = broker_service_url_tls
    return _lookup(body)


def lookup_error(request_id: int, code: pb.ServerError, message: str) -> bytes:
    body = pb.CommandLookupTopicResponse(
        request_id=request_id, response=_LookupType.Failed, error=code, message=message
    )
    return _lookup(body)


def _lookup(body: pb.CommandLookupTopicResponse) -> bytes:
    command = pb.BaseCommand(type=_Type.LOOKUP_RESPONSE)
    command.lookup_topic_response.CopyFrom(body)
    return encode_command(command)


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    *,
    filtered: bool = False,
    topics_hash: str | None = None,
) -> bytes:
    """``filtered``: the list already matches the client's pattern."""
    body = pb.CommandGetTopicsOfNamespaceResponse(
        request_id=request_id, topics=list(topics), filtered=filtered
    )
    if topics_hash is not None:
        body.topics_hash = topics_hash
    command = pb.BaseCommand(type=_Type.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    command.get_topics_of_namespace_response.CopyFrom(body)
    return encode_command(command)


# --- producers ------------------------------------------------------------------------------


def producer_success(
    request_id: int,
    producer_name: str,
    *,
    last_sequence_id: int = -1,
    schema_version: bytes | None = None,
    topic_epoch: int | None = None,
    producer_ready: bool = True,
) -> bytes:
    """``last_sequence_id``: the highest sequence id stored from this producer name (dedup).

    ``producer_ready=False``: the producer is queued (WaitForExclusive); a second answer with
    ``producer_ready=True`` follows when it gets the topic.
    """
    body = pb.CommandProducerSuccess(
        request_id=request_id, producer_name=producer_name, last_sequence_id=last_sequence_id
    )
    if not producer_ready:
        body.producer_ready = False
    if schema_version is not None:
        body.schema_version = schema_version
    if topic_epoch is not None:
        body.topic_epoch = topic_epoch
    return encode_command(pb.BaseCommand(type=_Type.PRODUCER_SUCCESS, producer_success=body))


def send_receipt(
    producer_id: int,
    sequence_id: int,
    message_id: MessageId,
    *,
    highest_sequence_id: int | None = None,
) -> bytes:
    """The entry is durable at ``message_id`` (ledger, entry; no batch index)."""
    body = pb.CommandSendReceipt(
        producer_id=producer_id, sequence_id=sequence_id, message_id=to_wire(message_id)
    )
    if highest_sequence_id is not None:
        body.highest_sequence_id = highest_sequence_id
    return encode_command(pb.BaseCommand(type=_Type.SEND_RECEIPT, send_receipt=body))


def send_error(producer_id: int, sequence_id: int, code: pb.ServerError, message: str) -> bytes:
    body = pb.CommandSendError(
        producer_id=producer_id, sequence_id=sequence_id, error=code, message=message
    )
    return encode_command(pb.BaseCommand(type=_Type.SEND_ERROR, send_error=body))


def close_producer(producer_id: int, request_id: int) -> bytes:
    """The broker closes the producer; the client looks the topic up and reconnects it."""
    body = pb.CommandCloseProducer(producer_id=producer_id, request_id=request_id)
    return encode_command(pb.BaseCommand(type=_Type.CLOSE_PRODUCER, close_producer=body))


# --- consumers ------------------------------------------------------------------------------


def message(
    consumer_id: int,
    message_id: MessageId,
    raw: BytesLike,
    *,
    redelivery_count: int = 0,
    checksum: int | None = None,
    ack_set: Iterable[int] = (),
    consumer_epoch: int | None = None,
) -> bytes:
    """Deliver one stored entry: ``raw`` is ``Payload.raw`` as the producer sent it.

    ``checksum`` is the CRC32C of ``raw`` when stored alongside it (computed otherwise).
    """
    body = pb.CommandMessage(
        consumer_id=consumer_id,
        message_id=to_wire(message_id),
        redelivery_count=redelivery_count,
        ack_set=list(ack_set),
    )
    if consumer_epoch is not None:
        body.consumer_epoch = consumer_epoch
    command = pb.BaseCommand(type=_Type.MESSAGE, message=body)
    return encode_raw_payload_command(command, raw, checksum=checksum)


def close_consumer(consumer_id: int, request_id: int) -> bytes:
    """The broker closes the consumer; the client looks up and subscribes again."""
    body = pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)
    return encode_command(pb.BaseCommand(type=_Type.CLOSE_CONSUMER, close_consumer=body))


def active_consumer_change(consumer_id: int, *, is_active: bool) -> bytes:
    """Failover subscriptions: tell a consumer whether it is now the active one."""
    body = pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active)
    command = pb.BaseCommand(type=_Type.ACTIVE_CONSUMER_CHANGE, active_consumer_change=body)
    return encode_command(command)


def ack_response(
    consumer_id: int,
    request_id: int,
    *,
    code: pb.ServerError | None = None,
    message: str | None = None,
) -> bytes:
    """Answer to an ACK that carried a request id; ``code`` set when the ack failed."""
    body = pb.CommandAckResponse(consumer_id=consumer_id, request_id=request_id)
    if code is not None:
        body.error = code
    if message is not None:
        body.message = message
    return encode_command(pb.BaseCommand(type=_Type.ACK_RESPONSE, ack_response=body))


def get_last_message_id_response(
    request_id: int,
    last_message_id: MessageId,
    *,
    mark_delete_position: MessageId | None = None,
) -> bytes:
    """For a batch entry set ``batch_index`` = n - 1 in ``last_message_id``."""
    body = pb.CommandGetLastMessageIdResponse(
        request_id=request_id, last_message_id=to_wire(last_message_id)
    )
    if mark_delete_position is not None:
        body.consumer_mark_delete_position.CopyFrom(to_wire(mark_delete_position))
    command = pb.BaseCommand(type=_Type.GET_LAST_MESSAGE_ID_RESPONSE)
    command.get_last_message_id_response.CopyFrom(body)
    return encode_command(command)


# --- schemas --------------------------------------------------------------------------------


def get_schema_response(request_id: int, schema: pb.Schema, schema_version: bytes) -> bytes:
    body = pb.CommandGetSchemaResponse(
        request_id=request_id, schema=schema, schema_version=schema_version
    )
    return encode_command(pb.BaseCommand(type=_Type.GET_SCHEMA_RESPONSE, get_schema_response=body))


def get_schema_error(request_id: int, code: pb.ServerError, message: str) -> bytes:
    body = pb.CommandGetSchemaResponse(
        request_id=request_id, error_code=code, error_message=message
    )
    return encode_command(pb.BaseCommand(type=_Type.GET_SCHEMA_RESPONSE, get_schema_response=body))


def get_or_create_schema_response(request_id: int, schema_version: bytes) -> bytes:
    body = pb.CommandGetOrCreateSchemaResponse(request_id=request_id, schema_version=schema_version)
    return _get_or_create_schema(body)


def get_or_create_schema_error(request_id: int, code: pb.ServerError, message: str) -> bytes:
    body = pb.CommandGetOrCreateSchemaResponse(
        request_id=request_id, error_code=code, error_message=message
    )
    return _get_or_create_schema(body)


def _get_or_create_schema(body: pb.CommandGetOrCreateSchemaResponse) -> bytes:
    command = pb.BaseCommand(type=_Type.GET_OR_CREATE_SCHEMA_RESPONSE)
    command.get_or_create_schema_response.CopyFrom(body)
    return encode_command(command)
