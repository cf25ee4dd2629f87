"""Kafka request/response framing: which APIs and versions are served, decode, encode.

Field layouts come from Kafka's own JSON message definitions, as compiled by the pinned
``kafka-python`` package's ``kafka.protocol`` (it encodes and decodes both directions); the
two KIP-848 messages it does not ship are defined the same way from JSON files in
``magnetar.protocols.kafka.schemas``. This module is the only one that touches it: it
decodes a size-prefixed request frame into a :class:`Request` and encodes a response built
from plain dicts. Pure code, no I/O.

The advertised versions (:data:`SUPPORTED`) are what this handler implements; a request for
anything else is refused (:class:`UnsupportedVersionError`): ApiVersions is answered the
KIP-511 way (a v0 body with error 35 and the ApiVersions range) by the caller, any other API
with :func:`unsupported_response` where its response format has an error code.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its JSON schemas with importlib.resources.read_text, which
    # Python 3.11-3.12 flag as deprecated; nothing a Magnetar user can act on.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol import (  # type: ignore[import-untyped]
        admin,
        consumer,
        metadata,
        producer,
        sasl,
    )
    from kafka.protocol.api_header import (  # type: ignore[import-untyped]
        ResponseClassRegistry,
    )
    from kafka.protocol.api_message import ApiMessage  # type: ignore[import-untyped]

from magnetar.core.values import value_class
from magnetar.protocols.kafka.errors import (
    ErrorCode,
    MalformedRequestError,
    UnsupportedVersionError,
)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS = 15, 16, 18
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 19, 20, 22, 32
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
DELETE_RECORDS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS, CREATE_PARTITIONS = 21, 33, 35, 37
DELETE_GROUPS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE = 42, 43, 44, 47
DESCRIBE_TOPIC_PARTITIONS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_QUORUM = 75, 23, 55
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
ALTER_REPLICA_LOG_DIRS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 34, 45, 46
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
_OWN_SCHEMAS = "magnetar.protocols.kafka.schemas"  # messages kafka-python does not ship


with warnings.catch_warnings():  # the same read_text deprecation, for our own schemas
    warnings.simplefilter("ignore", DeprecationWarning)

    class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_OWN_SCHEMAS):  # type: ignore[call-arg]
        pass

    class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_OWN_SCHEMAS):  # type: ignore[call-arg]
        pass

    class ConsumerGroupDescribeRequest(ApiMessage, load_json=_OWN_SCHEMAS):  # type: ignore[call-arg]
        pass

    class ConsumerGroupDescribeResponse(ApiMessage, load_json=_OWN_SCHEMAS):  # type: ignore[call-arg]
        pass


# api key → (request class, response class, lowest, highest version served)
_APIS: dict[int, tuple[Any, Any, int, int]] = {
    PRODUCE: (producer.ProduceRequest, producer.ProduceResponse, 3, 9),
    FETCH: (consumer.FetchRequest, consumer.FetchResponse, 4, 12),
    LIST_OFFSETS: (consumer.ListOffsetsRequest, consumer.ListOffsetsResponse, 1, 10),
    METADATA: (metadata.MetadataRequest, metadata.MetadataResponse, 0, 12),
    OFFSET_COMMIT: (consumer.OffsetCommitRequest, consumer.OffsetCommitResponse, 2, 8),
    OFFSET_FETCH: (consumer.OffsetFetchRequest, consumer.OffsetFetchResponse, 1, 8),
    FIND_COORDINATOR: (metadata.FindCoordinatorRequest, metadata.FindCoordinatorResponse, 0, 4),
    JOIN_GROUP: (consumer.JoinGroupRequest, consumer.JoinGroupResponse, 0, 7),
    HEARTBEAT: (consumer.HeartbeatRequest, consumer.HeartbeatResponse, 0, 4),
    LEAVE_GROUP: (consumer.LeaveGroupRequest, consumer.LeaveGroupResponse, 0, 5),
    SYNC_GROUP: (consumer.SyncGroupRequest, consumer.SyncGroupResponse, 0, 5),
    DESCRIBE_GROUPS: (admin.DescribeGroupsRequest, admin.DescribeGroupsResponse, 0, 5),
    LIST_GROUPS: (admin.ListGroupsRequest, admin.ListGroupsResponse, 0, 4),
    API_VERSIONS: (metadata.ApiVersionsRequest, metadata.ApiVersionsResponse, 0, 2),
    CREATE_TOPICS: (admin.CreateTopicsRequest, admin.CreateTopicsResponse, 0, 7),
    DELETE_TOPICS: (admin.DeleteTopicsRequest, admin.DeleteTopicsResponse, 0, 6),
    INIT_PRODUCER_ID: (producer.InitProducerIdRequest, producer.InitProducerIdResponse, 0, 4),
    DESCRIBE_CONFIGS: (admin.DescribeConfigsRequest, admin.DescribeConfigsResponse, 0, 4),
    CONSUMER_GROUP_HEARTBEAT: (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 1, 1),
    CONSUMER_GROUP_DESCRIBE: (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 0),
    DELETE_RECORDS: (admin.DeleteRecordsRequest, admin.DeleteRecordsResponse, 0, 2),
    ALTER_CONFIGS: (admin.AlterConfigsRequest, admin.AlterConfigsResponse, 0, 2),
    DESCRIBE_LOG_DIRS: (admin.DescribeLogDirsRequest, admin.DescribeLogDirsResponse, 1, 4),
    CREATE_PARTITIONS: (admin.CreatePartitionsRequest, admin.CreatePartitionsResponse, 0, 3),
    DELETE_GROUPS: (admin.DeleteGroupsRequest, admin.DeleteGroupsResponse, 0, 2),
    ELECT_LEADERS: (admin.ElectLeadersRequest, admin.ElectLeadersResponse, 0, 2),
    OFFSET_FOR_LEADER_EPOCH: (
        consumer.OffsetForLeaderEpochRequest,
        consumer.OffsetForLeaderEpochResponse,
        2,
        4,
    ),
    DESCRIBE_QUORUM: (admin.DescribeQuorumRequest, admin.DescribeQuorumResponse, 0, 2),
    INCREMENTAL_ALTER_CONFIGS: (
        admin.IncrementalAlterConfigsRequest,
        admin.IncrementalAlterConfigsResponse,
        0,
        1,
    ),
    OFFSET_DELETE: (consumer.OffsetDeleteRequest, consumer.OffsetDeleteResponse, 0, 0),
    ADD_PARTITIONS_TO_TXN: (
        producer.AddPartitionsToTxnRequest,
        producer.AddPartitionsToTxnResponse,
        0,
        3,
    ),
    ADD_OFFSETS_TO_TXN: (producer.AddOffsetsToTxnRequest, producer.AddOffsetsToTxnResponse, 0, 3),
    END_TXN: (producer.EndTxnRequest, producer.EndTxnResponse, 0, 3),
    TXN_OFFSET_COMMIT: (producer.TxnOffsetCommitRequest, producer.TxnOffsetCommitResponse, 0, 3),
    ALTER_REPLICA_LOG_DIRS: (
        admin.AlterReplicaLogDirsRequest,
        admin.AlterReplicaLogDirsResponse,
        1,
        2,
    ),
    ALTER_PARTITION_REASSIGNMENTS: (
        admin.AlterPartitionReassignmentsRequest,
        admin.AlterPartitionReassignmentsResponse,
        0,
        1,
    ),
    LIST_PARTITION_REASSIGNMENTS: (
        admin.ListPartitionReassignmentsRequest,
        admin.ListPartitionReassignmentsResponse,
        0,
        0,
    ),
    DESCRIBE_TOPIC_PARTITIONS: (
        admin.DescribeTopicPartitionsRequest,
        admin.DescribeTopicPartitionsResponse,
        0,
        0,
    ),
    # v0 handshakes are followed by bare SASL tokens outside Kafka framing: not served
    SASL_HANDSHAKE: (sasl.SaslHandshakeRequest, sasl.SaslHandshakeResponse, 1, 1),
    SASL_AUTHENTICATE: (sasl.SaslAuthenticateRequest, sasl.SaslAuthenticateResponse, 0, 2),
    DESCRIBE_ACLS: (admin.DescribeAclsRequest, admin.DescribeAclsResponse, 0, 3),
    CREATE_ACLS: (admin.CreateAclsRequest, admin.CreateAclsResponse, 0, 3),
    DELETE_ACLS: (admin.DeleteAclsRequest, admin.DeleteAclsResponse, 0, 3),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (
        admin.DescribeUserScramCredentialsRequest,
        admin.DescribeUserScramCredentialsResponse,
        0,
        0,
    ),
    ALTER_USER_SCRAM_CREDENTIALS: (
        admin.AlterUserScramCredentialsRequest,
        admin.AlterUserScramCredentialsResponse,
        0,
        0,
    ),
}
SUPPORTED: Mapping[int, tuple[int, int]] = {k: (v[2], v[3]) for k, v in _APIS.items()}
_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
READ_BUFFER = 256 * 1024  # bytes a read may bring (asyncio reads as much at once)
MAX_IDLE_BUFFER = 4 << 20  # a buffer grown for a large request is dropped once empty


@value_class()
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: Any  # the decoded kafka.protocol request: attribute access by field name


def peek(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (without its size)."""
    if len(frame) < _PREFIX.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    return key, version, correlation_id


def decode_request(frame: bytes) -> Request:
    """Decode one request frame (the bytes after the size prefix).

    Raises UnsupportedVersionError for an API or version not served, MalformedRequestError
    when the bytes do not decode as that request.
    """
    key, version, correlation_id = peek(frame)
    api = _APIS.get(key)
    if api is None or not api[2] <= version <= api[3]:
        raise UnsupportedVersionError(f"API {key} version {version} is not supported")
    try:
        body = api[0].decode(frame, version=version, header=True)
    except Exception as exc:  # the codec raises struct/index/value errors on bad bytes
        raise MalformedRequestError(
            f"API {key} v{version} request does not decode: {exc!r}"
        ) from exc
    return Request(key, version, correlation_id, body.header.client_id or "", body)


def encode_response(request: Request, values: Mapping[str, Any]) -> bytes:
    """The framed response to ``request`` built from ``values`` (nested dicts and lists;
    fields left out take their schema defaults)."""
    response_class = _APIS[request.api_key][1][request.api_version]
    message = build(response_class, values)
    message.with_header(correlation_id=request.correlation_id)
    return bytes(message.encode(header=True, framed=True))


def api_versions_error(correlation_id: int) -> bytes:
    """KIP-511: an ApiVersions request of a version this server does not know is answered
    with a v0 body, UNSUPPORTED_VERSION and the ApiVersions range, so the client retries."""
    low, high = SUPPORTED[API_VERSIONS]
    body = struct.pack(">hihhh", 35, 1, API_VERSIONS, low, high)
    return _SIZE.pack(4 + len(body)) + struct.pack(">i", correlation_id) + body


def unsupported_response(frame: bytes) -> bytes | None:
    """An UNSUPPORTED_VERSION answer to a request for an API or version not served, in that
    API's own response format, so the client fails fast with a clear error instead of seeing
    a disconnect and retrying. None when no such answer can be built: the API or version is
    unknown to ``kafka.protocol``, or its response has no top-level error code to carry it
    (the caller then closes the connection, as Kafka does)."""
    key, version, correlation_id = peek(frame)
    header = _Header(key, version)
    try:
        response_class = ResponseClassRegistry.get_response_class(header)
    except ValueError:  # a version kafka.protocol does not know
        return None
    if response_class is None:
        return None
    fields = {
        name: field
        for name, field in response_class._struct.fields.items()
        if field.for_version_q(version)
    }
    if "error_code" not in fields:
        return None
    values: dict[str, Any] = {"error_code": ErrorCode[UnsupportedVersionError.kafka_error]}
    if "error_message" in fields:
        values["error_message"] = f"API {key} version {version} is not supported by this server"
    message = build(response_class, values)
    message.with_header(correlation_id=correlation_id)
    return bytes(message.encode(header=True, framed=True))


# Where a response names differently what its request holds (arrays, then scalars).
_REQUEST_ARRAYS = {
    "responses": ("topics", "topic_data"),
    "partition_responses": ("partition_data", "partitions"),
    "partitions": ("partitions", "partition_data"),
}
_REQUEST_SCALARS = {
    "partition_index": ("partition_index", "partition", "index"),
    "index": ("index", "partition_index", "partition"),
    "name": ("name", "topic"),
    "topic": ("topic", "name"),
    "topic_id": ("topic_id",),
    "group_id": ("group_id",),
}


def error_response(request: Request, code: int, message: str) -> bytes:
    """The answer Kafka gives a request that failed as a whole (its ``getErrorResponse``):
    the response echoes what was asked (topics, partitions, groups) with ``code`` in every
    error field, so the client handles the error by its code (retrying a retriable one)
    instead of losing its connection."""
    response_class = _APIS[request.api_key][1][request.api_version]
    values = _echo(response_class, request.api_version, request.body, code, message)
    message_ = build(response_class, values)
    message_.with_header(correlation_id=request.correlation_id)
    return bytes(message_.encode(header=True, framed=True))


def _echo(container: Any, version: int, asked: Any, code: int, message: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, field in container._struct.fields.items():
        if not field.for_version_q(version):
            continue
        if name == "error_code":
            values[name] = code
        elif name == "error_message":
            values[name] = message
        elif field.is_struct_array():
            items = _asked(asked, _REQUEST_ARRAYS.get(name, (name,)))
            values[name] = [
                _echo(field.data_class, version, item, code, message)
                for item in (items if isinstance(items, list) else [])
            ]
        elif not field.is_struct() and not field.is_array():
            value = _asked(asked, _REQUEST_SCALARS.get(name, ()))
            if value is not None and not isinstance(value, bool):
                values[name] = value
    return values


def _asked(asked: Any, names: Iterable[str]) -> Any:
    for name in names:
        value = getattr(asked, name, None)
        if value is not None:
            return value
    return None


@dataclass(frozen=True, slots=True)
class _Header:
    """What ResponseClassRegistry needs of a request header."""

    request_api_key: int
    request_api_version: int


def build(container: Any, values: Mapping[str, Any]) -> Any:
    """A kafka.protocol data container from nested dicts."""
    fields = container._struct.fields
    kwargs = {}
    for name, value in values.items():
        field = fields[name]
        if value is not None and field.is_struct_array():
            value = [build(field.data_class, v) for v in value]
        elif value is not None and field.is_struct():
            value = build(field.data_class, value)
        kwargs[name] = value
    return container(**kwargs)


class FrameReader:
    """Splits a byte stream into size-prefixed request frames; refuses oversized ones.

    The transport reads straight into its buffer (:meth:`get_buffer` /
    :meth:`buffer_updated`, asyncio's ``BufferedProtocol``): over TLS the SSL transport
    decrypts into it, with no intermediate ``bytes`` per read and no join of TLS records.
    Each frame is copied out once; the bytes before the next frame are moved to the front
    only when the free space runs short.
    """

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray(READ_BUFFER)
        self._start = 0  # first byte not yet taken by a frame
        self._end = 0  # end of the bytes received

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Free space for at least ``sizehint`` bytes (``READ_BUFFER`` when unsaid)."""
        want = max(sizehint, READ_BUFFER)
        if len(self._buf) - self._end < want:
            live = self._end - self._start
            if live + want > len(self._buf):  # a new, larger buffer (views may still exist)
                grown = bytearray(max(live + want, 2 * len(self._buf)))
                grown[:live] = self._buf[self._start : self._end]
                self._buf = grown
            elif live:
                self._buf[:live] = self._buf[self._start : self._end]
            self._start, self._end = 0, live
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes

    def feed(self, data: bytes) -> None:
        self.get_buffer(len(data))[: len(data)] = data
        self.buffer_updated(len(data))

    def next_frame(self) -> bytes | None:
        """The next whole frame, or None until more bytes arrive. Raises
        MalformedRequestError for a negative or oversized size."""
        start = self._start
        if self._end - start < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, start)
        if size < 0 or size > self.max_frame:
            raise MalformedRequestError(f"request size {size} outside 0..{self.max_frame}")
        if self._end - start < 4 + size:
            return None
        with memoryview(self._buf) as view:
            frame = bytes(view[start + 4 : start + 4 + size])
        self._start = start + 4 + size
        if self._start == self._end:  # all taken: start over, and give a big buffer back
            self._start = self._end = 0
            if len(self._buf) > MAX_IDLE_BUFFER:
                self._buf = bytearray(READ_BUFFER)
        return frame


# -- the consumer protocol's own payloads (JoinGroup metadata, SyncGroup assignment) ------


def decode_subscription(data: bytes) -> Any:
    """A classic member's ConsumerProtocolSubscription (``topics``; ``owned_partitions`` from
    v1). ValueError when the bytes do not decode."""
    try:
        return consumer.ConsumerProtocolSubscription.decode(data)
    except Exception as e:  # the codec raises struct/index/value errors on bad bytes
        raise ValueError(f"the member's subscription does not decode: {e!r}") from None


def decode_assignment(data: bytes) -> set[tuple[str, int]]:
    """The (topic, partition)s of a ConsumerProtocolAssignment; empty for none or for an
    assignor's own format."""
    if not data:
        return set()
    try:
        assignment = consumer.ConsumerProtocolAssignment.decode(data)
    except Exception:  # not the consumer protocol's format: nothing known to be owned
        return set()
    return {(tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions}


def encode_assignment(partitions: Iterable[tuple[str, int]]) -> bytes:
    """A version-0 ConsumerProtocolAssignment of ``partitions``."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    message = consumer.ConsumerProtocolAssignment(0, sorted(by_topic.items()), b"")
    return bytes(message.encode())
