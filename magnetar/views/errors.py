"""Errors of the views area: one root, :class:`ViewError`, with a stable code per class.

The HTTP layer answers ``http_status`` (503 with Retry-After when ``retriable``); the CLI
prints the message.
"""

from __future__ import annotations

from typing import Any, ClassVar

from magnetar.core.errors import MagnetarError


class ViewError(MagnetarError):
    """Root of every error of the views area."""

    code: ClassVar[str] = "views.error"
    http_status = 500


class InvalidViewError(ViewError):
    """The definition is unusable (bad SQL, a missing key column, an unknown topic or an
    unimportable function); nothing was created or changed. Fix the definition and retry."""

    code = "views.invalid"
    http_status = 400


class ViewNotFoundError(ViewError):
    """No view of that name exists (or it was deleted)."""

    code = "views.not_found"
    http_status = 404


class ViewConflictError(ViewError):
    """The call does not fit the view's current state (e.g. writing a read-only as-of view)."""

    code = "views.conflict"
    http_status = 409


class TransformError(ViewError):
    """The transformation raised on one event; ``at`` names the event (topic, partition,
    offset). The view stops there (FAILED): no change of the failing batch was committed."""

    code = "views.transform"

    def __init__(self, message: str, at: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.at = at


class UnparsedMessageError(TransformError):
    """A message's value does not parse as its topic's JSON schema and the view has
    ``"onUnparsed": "fail"``; ``at`` names the first such message. Nothing of its batch was
    committed."""

    code = "views.unparsed"


class ViewFencedError(ViewError):
    """Another broker leads the view now: the store holds a newer leader epoch than the
    writer's (see :meth:`~magnetar.views.stores.base.StateStore.fence`). Nothing was written;
    the old leader stops its query."""

    code = "views.fenced"
    http_status = 409


class ViewMovedError(ViewError):
    """Another broker leads the view: the call belongs there (HTTP 307 to ``location``, or
    to ``secure_location`` for a call that came over TLS, when the leader serves HTTPS)."""

    code = "views.moved"
    http_status = 307

    def __init__(self, message: str, location: str, secure_location: str = "") -> None:
        super().__init__(message)
        self.location = location
        self.secure_location = secure_location

    def location_for(self, secure: bool) -> str:
        return self.secure_location if secure and self.secure_location else self.location


class ViewNotLedError(ViewError):
    """Several brokers: no broker leads the view at this moment (its leader just went away
    and another is taking it over). Retry in a few seconds."""

    code = "views.no_leader"
    retriable = True
    http_status = 503


class StateStoreError(ViewError):
    """The state store failed or is unreachable; the transaction in flight was rolled back,
    so a retry of the same batch finds the store as it was before."""

    code = "views.store"
    retriable = True
    http_status = 503
