"""Errors of the Kafka protocol handler and the Kafka wire error codes they map to.

Every error class names the Kafka code a client expects for it (``kafka_error``, a name of
:class:`ErrorCode`; STYLE 12), the handler's own classes under :class:`KafkaProtocolError`
included. :func:`error_code_of` — the one mapping of the Kafka server — resolves the name
and reads ``retriable``: a retriable error is answered with a code Kafka clients retry (the
class's own when it is one, else REQUEST_TIMED_OUT), a non-retriable one with its own code.
"""

from __future__ import annotations

import enum
import logging

from magnetar.core.errors import MagnetarError

log = logging.getLogger(__name__)


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
    NOT_ENOUGH_REPLICAS = 19
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
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
    SASL_AUTHENTICATION_FAILED = 58
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
    """A Kafka request could not be served; ``kafka_error`` is what the client is told."""

    code = "kafka.error"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


class CorruptRecordError(KafkaProtocolError):
    """A record batch fails its CRC or does not parse: nothing of it was stored."""

    code = "kafka.corrupt_record"
    kafka_error = "CORRUPT_MESSAGE"


class InvalidRecordError(KafkaProtocolError):
    """A record batch parses but breaks a rule (offsets, counts, magic): nothing was stored."""

    code = "kafka.invalid_record"
    kafka_error = "INVALID_RECORD"


class UnsupportedCompressionError(CorruptRecordError):
    code = "kafka.unsupported_compression"


class NotStoredError(KafkaProtocolError):
    """A write failed and stored nothing; the producer's retry will be stored."""

    code = "kafka.not_stored"
    retriable = True
    kafka_error = "KAFKA_STORAGE_ERROR"


class UnsupportedVersionError(KafkaProtocolError):
    """The client used an API or version this handler does not advertise."""

    code = "kafka.unsupported_version"
    kafka_error = "UNSUPPORTED_VERSION"


class MalformedRequestError(KafkaProtocolError):
    """The request bytes do not decode; Kafka closes the connection on these."""

    code = "kafka.malformed_request"
    kafka_error = "INVALID_REQUEST"


class UnknownTopicError(KafkaProtocolError):
    code = "kafka.unknown_topic"
    kafka_error = "UNKNOWN_TOPIC_OR_PARTITION"


class OffsetOutOfRangeError(KafkaProtocolError):
    code = "kafka.offset_out_of_range"
    kafka_error = "OFFSET_OUT_OF_RANGE"


class MessageTooLargeError(KafkaProtocolError):
    code = "kafka.message_too_large"
    kafka_error = "MESSAGE_TOO_LARGE"


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


# Codes Kafka's clients retry (Kafka's RetriableException subclasses), among those answered.
RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


def declared(cls: type[MagnetarError]) -> ErrorCode:
    """The code ``cls`` names (KeyError when it is not one of :class:`ErrorCode`)."""
    return ErrorCode[cls.kafka_error]


def error_code_of(error: BaseException) -> ErrorCode:
    """The Kafka error code to answer ``error`` with."""
    if isinstance(error, RefusedError):
        return error.wire_code
    if not isinstance(error, MagnetarError):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    code = declared(type(error))
    if error.retriable and code not in RETRIABLE:
        return ErrorCode.REQUEST_TIMED_OUT
    if code is ErrorCode.UNKNOWN_SERVER_ERROR:  # the client learns nothing: say it here
        log.warning("answering Kafka UNKNOWN_SERVER_ERROR for %s: %s", type(error).__name__, error)
    return code
