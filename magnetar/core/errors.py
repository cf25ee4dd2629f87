"""The one exception root of Magnetar.

Every error raised on purpose by Magnetar is a :class:`MagnetarError`. Each class carries a
stable ``code`` (protocol handlers and the HTTP API map it to their own error codes), a
``retriable`` flag (a retry of the same call may succeed later) and a message that says
what to do next. Areas define their own roots (``StorageError``, ``MetadataError`` ...) in
their packages; they all derive from :class:`MagnetarError`.
"""

from __future__ import annotations

from typing import ClassVar


class MagnetarError(Exception):
    """Root of every error Magnetar raises on purpose."""

    code: ClassVar[str] = "magnetar"
    retriable: ClassVar[bool] = False

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

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"setting {setting!r}: {problem}")
        self.setting = setting


class InvalidNameError(MagnetarError):
    """A tenant, namespace or topic name is malformed."""

    code = "name.invalid"


class ClosedError(MagnetarError):
    """You closed this resource and then used it."""

    code = "closed"
