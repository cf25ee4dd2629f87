"""Every MagnetarError maps to a Pulsar ServerError it declares; retriable ones to a code
the C++ client retries (table over every class, so a new class cannot be forgotten)."""

from __future__ import annotations

import pytest

from magnetar.broker import errors as be
from magnetar.broker.authorization import AuthorizationError
from magnetar.broker.ownership import NotOwnerError
from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import MessageRefusedError
from magnetar.protocols.pulsar.errors_map import RETRIED, declared, discovery_error, server_error
from magnetar.storage.errors import DiskFullError, StorageError
from magnetar.testing.errors import bare
from tests.errors_table import EVERY_ERROR_CLASS

E = pb.ServerError


@EVERY_ERROR_CLASS
def test_every_error_class_maps_to_its_declared_code(cls: type[MagnetarError]) -> None:
    code = declared(cls)  # ValueError: a name Pulsar does not have
    answered = server_error(bare(cls))
    if cls.retriable:
        assert answered in RETRIED, f"{cls.__name__} is retriable but answered {E.Name(answered)}"
    else:
        assert answered == code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (AuthorizationError, E.AuthorizationError),
        (NotOwnerError, E.ServiceNotReady),
        (be.TopicFencedError, E.ServiceNotReady),
        (be.SubscriptionNotFoundError, E.SubscriptionNotFound),
        (be.SchemaNotFoundError, E.TopicNotFound),
        (be.TopicNotFoundError, E.TopicNotFound),
        (be.ProducerFencedError, E.ProducerFenced),
        (be.ProducerBusyError, E.ProducerBusy),
        (be.ConsumerBusyError, E.ConsumerBusy),
        (be.IncompatibleSchemaError, E.IncompatibleSchema),
        (be.InvalidRequestError, E.NotAllowedError),
        (be.MessageTooLargeError, E.ChecksumError),  # fails that message alone
        (MessageRefusedError, E.ChecksumError),
        (InvalidNameError, E.InvalidTopicName),
        (StorageError, E.PersistenceError),
        (DiskFullError, E.PersistenceError),  # retriable: the client resends
    ],
)
def test_what_pulsar_clients_are_answered(error: type[MagnetarError], code: int) -> None:
    assert server_error(bare(error)) == code


def test_a_retriable_class_declaring_a_final_code_is_answered_service_not_ready() -> None:
    class Busy(be.ProducerBusyError):
        retriable = True

    assert server_error(bare(Busy)) == E.ServiceNotReady


def test_server_faults_and_lookups() -> None:
    assert server_error(RuntimeError("bug")) == E.UnknownError
    # the C++ client would retry a lookup answered InvalidTopicName until its timeout
    assert discovery_error(bare(InvalidNameError)) == E.NotAllowedError
    assert discovery_error(bare(be.TopicNotFoundError)) == E.TopicNotFound
