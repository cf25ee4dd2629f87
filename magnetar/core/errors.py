"""The one exception root of Magnetar.

Every error raised on purpose by Magnetar is a :class:`MagnetarError`. Each class carries a
stable ``code``, a ``retriable`` flag (a retry of the same call may succeed later), a message
that says what to do next, and its answer on each wire (STYLE 12): ``http_status``,
``pulsar_error`` (a name of Pulsar's ``ServerError``) and ``kafka_error`` (a name of Kafka's
error codes). The wire codes are names so that core imports no protocol package; each server
resolves them (``magnetar.protocols.pulsar.errors_map``, ``magnetar.protocols.kafka.errors``,
``magnetar.http.server``) and reads ``retriable``: a retriable error is answered with a code
the client retries (HTTP 503 with Retry-After). Areas define their own roots
(``StorageError``, ``MetadataError`` ...) in their packages, which set the area's defaults;
they all derive from :class:`MagnetarError`.
"""

from __future__ import annotations

from typing import ClassVar


class MagnetarError(Exception):
    """Root of every error Magnetar raises on purpose."""

    code: ClassVar[str] = "magnetar"
    retriable: ClassVar[bool] = False
    http_status: ClassVar[int] = 500
    pulsar_error: ClassVar[str] = "UnknownError"
    kafka_error: ClassVar[str] = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def for_code(cls, code: str) -> type[MagnetarError]:
        """The most specific subclass registered under ``code``, or MagnetarError."""
        return _by_code(cls).get(code, MagnetarError)


def _by_code(root: type[MagnetarError]) -> dict[str, type[MagnetarError]]:
    found: dict[str, type[MagnetarError]] = {}
    stack: list[type[MagnetarError]] = [MagnetarError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return found


class ConfigError(MagnetarError):
    """A setting is missing, malformed or impossible; the message names the setting."""

    code = "config.invalid"
    http_status = 400
    pulsar_error = "NotAllowedError"
    kafka_error = "INVALID_CONFIG"

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"setting {setting!r}: {problem}")
        self.setting = setting


class InvalidNameError(MagnetarError):
    """A tenant, namespace or topic name is malformed."""

    code = "name.invalid"
    http_status = 412  # Pulsar's admin API answers a bad name with 412
    pulsar_error = "InvalidTopicName"
    kafka_error = "INVALID_TOPIC_EXCEPTION"


class ClosedError(MagnetarError):
    """You closed this resource and then used it."""

    code = "closed"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"
