"""Errors → HTTP answers: the one mapping of the admin REST API and the views API.

Each error class declares its ``http_status`` (STYLE 12). A ``retriable`` error — storage
busy or full, the topic moving to another broker, a concurrent update — is answered with
503 Service Unavailable and a ``Retry-After`` header, whatever its class says, so that any
HTTP client's retry policy applies; the JSON body says what happened either way:
``{"reason": message, "code": the error's stable code, "retriable": bool}``.
"""

from __future__ import annotations

from aiohttp import web

from magnetar.core.errors import MagnetarError

RETRY_AFTER_S = 1  # a retriable error usually clears within a second (a handover, a flush)


def status_of(error: MagnetarError) -> int:
    """The HTTP status ``error`` is answered with."""
    return 503 if error.retriable else error.http_status


def error_response(error: MagnetarError) -> web.Response:
    """The JSON answer to ``error``: its status, and Retry-After when retriable."""
    body = {"reason": str(error), "code": error.code, "retriable": error.retriable}
    headers = {"Retry-After": str(RETRY_AFTER_S)} if error.retriable else None
    return web.json_response(body, status=status_of(error), headers=headers)
