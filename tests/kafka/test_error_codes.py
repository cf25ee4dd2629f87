"""Every MagnetarError maps to the Kafka error code it declares; retriable ones to a code
Kafka clients retry (table over every class, so a new class cannot be forgotten)."""

from __future__ import annotations

import pytest

from magnetar.broker import errors as be
from magnetar.broker.ownership import NotOwnerError
from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.meta.errors import BadVersionError
from magnetar.protocols.kafka.errors import (
    RETRIABLE,
    ErrorCode,
    GroupError,
    NotStoredError,
    RefusedError,
    declared,
    error_code_of,
)
from magnetar.storage.errors import (
    CorruptionError,
    DiskFullError,
    OffsetOutOfRangeError,
    WriteFailedError,
)
from magnetar.testing.errors import bare
from tests.errors_table import EVERY_ERROR_CLASS


@EVERY_ERROR_CLASS
def test_every_error_class_maps_to_its_declared_code(cls: type[MagnetarError]) -> None:
    code = declared(cls)  # KeyError: a name the handler's ErrorCode does not have
    error = bare(cls)
    if isinstance(error, RefusedError):  # the code travels with each refusal
        error.wire_code = ErrorCode.INVALID_REQUEST
        assert error_code_of(error) == ErrorCode.INVALID_REQUEST
    elif cls.retriable:
        assert error_code_of(error) in RETRIABLE, f"{cls.__name__} is retriable"
    else:
        assert error_code_of(error) == code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (be.TopicNotFoundError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (be.NamespaceNotFoundError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (be.AlreadyExistsError, ErrorCode.TOPIC_ALREADY_EXISTS),
        (be.InvalidRequestError, ErrorCode.INVALID_REQUEST),
        (be.PartitionCountError, ErrorCode.INVALID_PARTITIONS),
        (be.TooManyTopicsError, ErrorCode.POLICY_VIOLATION),
        (be.MessageTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
        (NotOwnerError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (be.TopicFencedError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
        (DiskFullError, ErrorCode.KAFKA_STORAGE_ERROR),
        (WriteFailedError, ErrorCode.KAFKA_STORAGE_ERROR),
        (NotStoredError, ErrorCode.KAFKA_STORAGE_ERROR),
        (CorruptionError, ErrorCode.CORRUPT_MESSAGE),  # librdkafka surfaces it in poll()
        (InvalidNameError, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (BadVersionError, ErrorCode.REQUEST_TIMED_OUT),  # a concurrent update: retry
    ],
)
def test_what_kafka_clients_are_answered(error: type[MagnetarError], code: ErrorCode) -> None:
    assert error_code_of(bare(error)) == code


def test_refusals_server_faults_and_a_retriable_class_with_a_final_code() -> None:
    assert error_code_of(GroupError(ErrorCode.ILLEGAL_GENERATION, "old")) == (
        ErrorCode.ILLEGAL_GENERATION
    )
    assert error_code_of(RuntimeError("bug")) == ErrorCode.UNKNOWN_SERVER_ERROR

    class Moving(be.InvalidRequestError):
        retriable = True

    assert error_code_of(bare(Moving)) == ErrorCode.REQUEST_TIMED_OUT
