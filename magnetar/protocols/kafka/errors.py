"""Errors of the Kafka protocol handler and the Kafka wire error codes they map to.

One root, :class:`KafkaProtocolError`; each subclass carries the Kafka ``error_code`` a
client expects for it. :func:`error_code_of` turns any exception met while serving a
request (broker, storage or protocol) into the code to put in the response.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from magnetar.core.errors import InvalidNameError, MagnetarError


class ErrorCode(enum.IntEnum):
    """Kafka's wire error codes (the subset this handler answers with)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_INSTANCE_ID = 82  # a static member replaced by a newer one with its instance id
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    PRODUCER_FENCED = 90
    INVALID_RECORD = 87
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110  # KIP-848: the member's epoch is ahead of or unknown to the group
    UNRELEASED_INSTANCE_ID = 111  # KIP-848: a live member holds the static instance id
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113  # KIP-848: a commit with an older epoch than the member's
    INVALID_REGULAR_EXPRESSION = 128


class KafkaProtocolError(MagnetarError):
    """A Kafka request could not be served; ``error_code`` is what the client is told."""

    code = "kafka.error"
    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR


class CorruptRecordError(KafkaProtocolError):
    """A record batch fails its CRC or does not parse: nothing of it was stored."""

    code = "kafka.corrupt_record"
    error_code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(KafkaProtocolError):
    """A record batch parses but breaks a rule (offsets, counts, magic): nothing was stored."""

    code = "kafka.invalid_record"
    error_code = ErrorCode.INVALID_RECORD


class UnsupportedCompressionError(CorruptRecordError):
    code = "kafka.unsupported_compression"


class NotStoredError(KafkaProtocolError):
    """A write failed and stored nothing; the producer's retry will be stored."""

    code = "kafka.not_stored"
    retriable = True
    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class UnsupportedVersionError(KafkaProtocolError):
    """The client used an API or version this handler does not advertise."""

    code = "kafka.unsupported_version"
    error_code = ErrorCode.UNSUPPORTED_VERSION


class MalformedRequestError(KafkaProtocolError):
    """The request bytes do not decode; Kafka closes the connection on these."""

    code = "kafka.malformed_request"
    error_code = ErrorCode.INVALID_REQUEST


class UnknownTopicError(KafkaProtocolError):
    code = "kafka.unknown_topic"
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class OffsetOutOfRangeError(KafkaProtocolError):
    code = "kafka.offset_out_of_range"
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class MessageTooLargeError(KafkaProtocolError):
    code = "kafka.message_too_large"
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RefusedError(KafkaProtocolError):
    """A request was refused for a reason the client must act on; ``wire_code`` says which."""

    code = "kafka.refused"

    def __init__(self, wire_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.wire_code = wire_code


class GroupError(RefusedError):
    """A consumer-group request was refused (generation, member, rebalance in progress)."""

    code = "kafka.group"


class SequenceError(RefusedError):
    """An idempotent producer's batch was refused (epoch or sequence out of order)."""

    code = "kafka.sequence"


# Broker and storage error codes → Kafka error codes.
_BY_MAGNETAR_CODE = {
    "broker.topic_not_found": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "broker.namespace_not_found": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "broker.tenant_not_found": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "broker.not_found": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "broker.exists": ErrorCode.TOPIC_ALREADY_EXISTS,
    "broker.invalid": ErrorCode.INVALID_REQUEST,
    "broker.partition_count": ErrorCode.INVALID_PARTITIONS,  # over the broker's maximum
    "broker.too_many_topics": ErrorCode.POLICY_VIOLATION,  # the namespace is full
    "broker.message_too_large": ErrorCode.MESSAGE_TOO_LARGE,
    "broker.not_owner": ErrorCode.NOT_LEADER_OR_FOLLOWER,  # another broker serves it
    "broker.topic_fenced": ErrorCode.NOT_LEADER_OR_FOLLOWER,  # moving to another broker
    "storage.offset_out_of_range": ErrorCode.OFFSET_OUT_OF_RANGE,
    "storage.disk_full": ErrorCode.KAFKA_STORAGE_ERROR,
    "storage.write_failed": ErrorCode.KAFKA_STORAGE_ERROR,
    "storage.too_many_open_files": ErrorCode.KAFKA_STORAGE_ERROR,
    # Damaged stored data: not retriable, so consumers surface it (librdkafka hands
    # "Broker: Corrupt message" to poll(); KAFKA_STORAGE_ERROR it would retry silently).
    "storage.corrupt": ErrorCode.CORRUPT_MESSAGE,
    InvalidNameError.code: ErrorCode.INVALID_TOPIC_EXCEPTION,
}


def error_code_of(error: BaseException) -> ErrorCode:
    """The Kafka error code to answer ``error`` with."""
    if isinstance(error, RefusedError):
        return error.wire_code
    if isinstance(error, KafkaProtocolError):
        return error.error_code
    if isinstance(error, MagnetarError):
        return _BY_MAGNETAR_CODE.get(error.code, ErrorCode.UNKNOWN_SERVER_ERROR)
    return ErrorCode.UNKNOWN_SERVER_ERROR
