"""Errors → the Pulsar ServerError a client expects: the one mapping of the Pulsar server.

Each error class names its code (``pulsar_error``, STYLE 12); this module resolves the name
and reads ``retriable``. The C++ client (pulsar-client) retries a failed lookup, producer or
consumer creation unless the result is one it takes as final (TopicNotFound, NotAllowedError,
AuthorizationError, ProducerBusy, ConsumerBusy, IncompatibleSchema, ChecksumError, ...), and
resends a message after any SEND_ERROR but ChecksumError. A retriable error is therefore
answered with a code it retries — the class's own when it is one (ServiceNotReady makes it
look the topic up again; PersistenceError and MetadataError, as Pulsar answers storage and
metadata failures), else ServiceNotReady — and a non-retriable one with its specific code.
Anything that is not a MagnetarError is a server fault: UnknownError.
"""

from __future__ import annotations

from magnetar.core.errors import InvalidNameError, MagnetarError
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb

# Codes the C++ client retries on (its isResultRetryable) that say why: a retriable error
# gets one of them (UnknownError is retried too, but says nothing).
RETRIED = frozenset(
    {
        pb.ServerError.ServiceNotReady,
        pb.ServerError.PersistenceError,
        pb.ServerError.MetadataError,
        pb.ServerError.TooManyRequests,
    }
)


def declared(cls: type[MagnetarError]) -> pb.ServerError:
    """The code ``cls`` declares (ValueError when its name is not one of Pulsar's)."""
    return pb.ServerError.Value(cls.pulsar_error)


def server_error(error: BaseException) -> pb.ServerError:
    if not isinstance(error, MagnetarError):
        return pb.ServerError.UnknownError
    code = declared(type(error))
    if error.retriable and code not in RETRIED:
        return pb.ServerError.ServiceNotReady
    return code


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
