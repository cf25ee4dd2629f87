"""Broker and storage errors → the Pulsar ServerError a client expects."""

from __future__ import annotations

from magnetar.broker import errors as be
from magnetar.broker.authorization import AuthorizationError
from magnetar.broker.ownership import NotOwnerError
from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.errors import MessageRefusedError

_MAP: list[tuple[type[MagnetarError], pb.ServerError]] = [
    (AuthorizationError, pb.ServerError.AuthorizationError),
    (NotOwnerError, pb.ServerError.ServiceNotReady),
    (be.TopicFencedError, pb.ServerError.ServiceNotReady),
    (be.SubscriptionNotFoundError, pb.ServerError.SubscriptionNotFound),
    (be.SchemaNotFoundError, pb.ServerError.TopicNotFound),
    (be.NotFoundError, pb.ServerError.TopicNotFound),
    (be.ProducerFencedError, pb.ServerError.ProducerFenced),
    (be.ProducerBusyError, pb.ServerError.ProducerBusy),
    (be.ConsumerBusyError, pb.ServerError.ConsumerBusy),
    (be.IncompatibleSchemaError, pb.ServerError.IncompatibleSchema),
    (be.InvalidRequestError, pb.ServerError.NotAllowedError),
    # ChecksumError is the one SEND_ERROR on which the C++ client fails that message alone
    # (see MessageRefusedError); any other makes it reconnect and resend it forever
    (be.MessageTooLargeError, pb.ServerError.ChecksumError),
    (InvalidNameError, pb.ServerError.InvalidTopicName),
    (MessageRefusedError, pb.ServerError.ChecksumError),
    (be.StorageError, pb.ServerError.PersistenceError),
]


def server_error(error: BaseException) -> pb.ServerError:
    for cls, code in _MAP:
        if isinstance(error, cls):
            return code
    return pb.ServerError.UnknownError


def discovery_error(error: BaseException) -> pb.ServerError:
    """The code for a failed PARTITIONED_METADATA or LOOKUP.

    The C++ client (pulsar-client) retries a lookup that failed with InvalidTopicName until
    its operation timeout: the errors it takes as final do not include it, since Pulsar
    refuses no topic name the client itself lets through. Magnetar refuses more (``..``, a
    NUL, 10,000 characters), so it answers NotAllowedError, which the client takes as
    final: an invalid name fails at once, with the message saying what is wrong.
    """
    if isinstance(error, InvalidNameError):
        return pb.ServerError.NotAllowedError
    return server_error(error)
